// The official TypeScript SDK against a running ilpd: node sdk_test.mjs BASE_URL MODEL_ID
// (MODEL_ID: the id /v1/models lists for the served model). Prints one
// "ok - " / "not ok - " line per check.
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.argv[2];
const modelId = process.argv[3];
const client = new Anthropic({ baseURL, apiKey: 'test-key', maxRetries: 0 });
let failed = 0;
function check(ok, name, detail) {
  if (ok) console.log(`ok - sdk: ${name}`);
  else { failed++; console.log(`not ok - sdk: ${name}: ${JSON.stringify(detail)?.slice(0, 300)}`); }
}
// A story request (the demo model's story task): longer than max_tokens.
const system = 'You are a storyteller for young children.';
const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];

try {
  const msg = await client.messages.create({ model: modelId, max_tokens: 24, temperature: 0, system, messages });
  check(msg.type === 'message' && msg.content[0].type === 'text' && msg.content[0].text.length > 0 &&
        msg.usage.input_tokens > 0 && msg.stop_reason === 'max_tokens', 'messages.create', msg);

  const stream = client.messages.stream({ model: modelId, max_tokens: 24, temperature: 0, system, messages });
  let deltas = '';
  stream.on('text', (t) => { deltas += t; });
  const final = await stream.finalMessage();
  check(final.content[0].text === msg.content[0].text && deltas === final.content[0].text &&
        final.usage.input_tokens === msg.usage.input_tokens && final.usage.output_tokens === 24,
        'messages.stream + finalMessage() equals messages.create', { final, deltas });

  const count = await client.messages.countTokens({ model: modelId, system, messages });
  check(count.input_tokens === msg.usage.input_tokens, 'messages.countTokens', count);

  const page = await client.models.list();
  check(page.data.length === 1 && page.data[0].type === 'model' && page.data[0].id === modelId, 'models.list', page.data);

  const { data, response } = await client.messages
    .create({ model: modelId, max_tokens: 4, messages }).withResponse();
  const mask = response.headers.get('x-layer-mask');
  check(data.type === 'message' && mask && Buffer.from(mask, 'base64').length === 32 &&
        ['off', 'full', 'active'].includes(response.headers.get('x-layer-status')),
        '.withResponse() reads x-layer-mask and x-layer-status', { mask });

  try {
    await client.messages.create({ model: modelId, max_tokens: 0, messages });
    check(false, 'a bad request throws BadRequestError', 'no error');
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && e.status === 400 && e.error?.error?.type === 'invalid_request_error',
          'a bad request throws BadRequestError', { name: e.constructor.name, status: e.status });
  }
} catch (e) {
  check(false, 'SDK calls', String(e));
}
process.exit(failed ? 1 : 0);
