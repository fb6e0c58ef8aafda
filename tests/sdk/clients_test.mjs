// The clients agents are built with, against a running ilpd, with tools and
// structured outputs: the official TypeScript SDK (tools, stream with
// inputJson), the Vercel AI SDK (generateText with default settings, tools
// with toolChoice "required", generateObject with an off-task schema) and
// LangChain JS (bindTools, withStructuredOutput).
//   node clients_test.mjs BASE_URL MODEL_ID
// Prints one "ok - " / "not ok - " line per check.
import Anthropic from '@anthropic-ai/sdk';
import { createAnthropic } from '@ai-sdk/anthropic';
import { ChatAnthropic } from '@langchain/anthropic';
import { generateObject, generateText, tool } from 'ai';
import { z } from 'zod';

const baseURL = process.argv[2];
const modelId = process.argv[3];
let failed = 0;
function check(ok, name, detail) {
  if (ok) console.log(`ok - clients: ${name}`);
  else { failed++; console.log(`not ok - clients: ${name}: ${JSON.stringify(detail)?.slice(0, 400)}`); }
}
async function attempt(name, fn) {
  try { await fn(); } catch (e) { check(false, name, { error: String(e), cause: String(e?.cause ?? '') }); }
}

const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 30 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
};
const weatherOk = (input) => input && typeof input.city === 'string' && ['celsius', 'fahrenheit'].includes(input.unit);
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];

// The official SDK: a forced call, then the same streamed with the inputJson event (one call: the
// demo model, never trained on tools, would otherwise go on calling until max_tokens).
await attempt('sdk tools', async () => {
  const client = new Anthropic({ baseURL, apiKey: 'test-key', maxRetries: 0 });
  const tools = [{ name: 'get_weather', description: 'Weather of a city.', input_schema: weatherSchema }];
  const msg = await client.messages.create({
    model: modelId, max_tokens: 100, temperature: 0, messages: ask, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true },
  });
  const use = msg.content.find((b) => b.type === 'tool_use');
  check(msg.stop_reason === 'tool_use' && use && use.name === 'get_weather' && use.id.startsWith('toolu_') &&
        weatherOk(use.input), 'sdk: messages.create with tools and tool_choice any gives a valid tool_use', msg);

  const stream = client.messages.stream({
    model: modelId, max_tokens: 100, temperature: 0, messages: ask, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true },
  });
  let partial = '', snapshot = null;
  stream.on('inputJson', (delta, snap) => { partial += delta; snapshot = snap; });
  const final = await stream.finalMessage();
  const fuse = final.content.find((b) => b.type === 'tool_use');
  check(fuse && JSON.stringify(JSON.parse(partial)) === JSON.stringify(use.input) &&
        JSON.stringify(snapshot) === JSON.stringify(use.input) && JSON.stringify(fuse.input) === JSON.stringify(use.input),
        'sdk: messages.stream emits inputJson deltas whose concatenation and snapshot are the input', { partial, fuse });
});

const anthropic = createAnthropic({ baseURL: `${baseURL}/v1`, apiKey: 'test-key' });

// The AI SDK with its defaults (max_tokens 4096 or the model's, no temperature).
await attempt('ai-sdk generateText', async () => {
  const r = await generateText({ model: anthropic(modelId), prompt: 'Tell me a story about a cat.', maxRetries: 0 });
  check(typeof r.text === 'string' && r.text.length > 0 && r.usage.inputTokens > 0,
        'ai-sdk: generateText with default settings', { text: r.text?.slice(0, 80), finish: r.finishReason });
});

await attempt('ai-sdk tools', async () => {
  const r = await generateText({
    model: anthropic(modelId), prompt: 'What is the weather in Paris?', maxRetries: 0, temperature: 0,
    toolChoice: 'required',
    tools: {
      get_weather: tool({
        description: 'Weather of a city.',
        inputSchema: z.object({ city: z.string().max(30), unit: z.enum(['celsius', 'fahrenheit']) }),
      }),
    },
  });
  const call = r.toolCalls?.[0];
  check(call && call.toolName === 'get_weather' && weatherOk(call.input) && r.finishReason === 'tool-calls',
        'ai-sdk: tools with toolChoice required give a valid call', { calls: r.toolCalls, finish: r.finishReason });
});

await attempt('ai-sdk generateObject', async () => {
  const schema = z.object({
    title: z.string().max(40), year: z.number().int(), genres: z.array(z.enum(['drama', 'comedy', 'horror'])).max(3),
  });
  const r = await generateObject({
    model: anthropic(modelId), schema, maxRetries: 0, temperature: 0, prompt: 'Describe a movie about a dragon.',
  });
  check(schema.safeParse(r.object).success, 'ai-sdk: generateObject with an off-task schema gives a valid object', r.object);
});

// LangChain JS.
const chat = new ChatAnthropic({
  model: modelId, anthropicApiUrl: baseURL, apiKey: 'test-key', temperature: 0, maxRetries: 0, maxTokens: 100,
});
await attempt('langchain bindTools', async () => {
  const bound = chat.bindTools(
    [{ name: 'get_weather', description: 'Weather of a city.', schema: z.object({ city: z.string().max(30), unit: z.enum(['celsius', 'fahrenheit']) }) }],
    { tool_choice: 'any' });
  const m = await bound.invoke('What is the weather in Paris?');
  const call = m.tool_calls?.[0];
  check(call && call.name === 'get_weather' && weatherOk(call.args), 'langchain: bindTools + invoke gives a valid tool call',
        m.tool_calls);
});
await attempt('langchain withStructuredOutput', async () => {
  const schema = z.object({ answer: z.enum(['yes', 'no']), reason: z.string().max(40) });
  const r = await chat.withStructuredOutput(schema).invoke('Is the sky blue?');
  check(schema.safeParse(r).success, 'langchain: withStructuredOutput gives a valid object', r);
});

process.exit(failed ? 1 : 0);
