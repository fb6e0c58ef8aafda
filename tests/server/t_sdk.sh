#!/bin/bash
# The official TypeScript SDK, the Vercel AI SDK and LangChain JS (pinned in
# tests/sdk/package.json) drive the server on the built-in demo model
# (models/, committed: no ../shared needed): plain messages, streaming,
# count_tokens, models, errors (sdk_test.mjs), tools and structured outputs
# (clients_test.mjs).
M=models/ilpd-demo-F16.gguf
[ -f "$M" ] || { echo "not ok - sdk: $M absent (it is committed)"; exit 0; }
command -v node >/dev/null && command -v npm >/dev/null || { echo "skip - sdk: node/npm not installed"; exit 0; }
if [ ! -d tests/sdk/node_modules/@anthropic-ai/sdk ] || [ ! -d tests/sdk/node_modules/@langchain/anthropic ] ||
   [ ! -d tests/sdk/node_modules/ai ]; then
    (cd tests/sdk && npm ci --no-audit --no-fund >"$TESTS_TMP/npm.log" 2>&1) ||
        { echo "skip - sdk: npm ci failed (registry unreachable?): $(tail -2 "$TESTS_TMP/npm.log")"; exit 0; }
fi
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$ILPD" serve -m "$M" --port "$port" --api-key test-key -c 2048 2>"$TESTS_TMP/sdk-server.log" &
pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
node tests/sdk/sdk_test.mjs "http://127.0.0.1:$port" ilpd-demo
rc=$?
node tests/sdk/clients_test.mjs "http://127.0.0.1:$port" ilpd-demo || rc=1
kill -TERM $pid; wait $pid
exit $rc
