#!/usr/bin/python3
"""The prompt cache through the real server on the built-in demo model: a three-turn conversation
(the last turn streamed) gives the answers of a server without the cache, while turns 2 and 3 read
the previous turn's prompt from it; usage says so (input_tokens + cache_read_input_tokens = the
prompt, cache_creation_input_tokens = what was newly kept); a cache_control breakpoint is accepted;
with API keys, one key's prompts never serve another key; Prometheus counts hits, misses, tokens
reused and bytes held."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import Checks, Server, sse  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "ilpd-demo-F16.gguf")
check = Checks()
SYSTEM = [{"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
USERS = ["Classify this customer message as shipping, returns, product or payment.\nMessage: My card was declined "
         "when I tried to pay for the blender.",
         "Is a lemon a fruit?",
         "Tell me a story about a little girl named Lily."]


def body(msgs, stream=False):
    return {"model": "ilpd-demo", "max_tokens": 40, "temperature": 0, "system": SYSTEM, "messages": msgs,
            "stream": stream}


def turn(s, msgs, key=None, stream=False):
    """(text, usage, status) of one request."""
    h = {"x-api-key": key} if key else None
    if not stream:
        st, _, o = s.json("POST", "/v1/messages", body(msgs), h)
        if st != 200:
            return None, {}, st
        return "".join(b.get("text", "") for b in o["content"]), o["usage"], st
    st, _, raw = s.request("POST", "/v1/messages", body(msgs, True), h)
    events = sse(raw)
    usage, text = {}, ""
    for ev, data in events:
        if ev == "message_start":
            usage = dict(data["message"]["usage"])
        if ev == "content_block_delta" and data["delta"].get("type") == "text_delta":
            text += data["delta"]["text"]
        if ev == "message_delta":
            usage["output_tokens"] = data["usage"]["output_tokens"]
    return text, usage, st


def conversation(s, key=None, stream_last=True):
    msgs, out = [], []
    for i, u in enumerate(USERS):
        msgs.append({"role": "user", "content": u})
        st_c, _, cnt = s.json("POST", "/v1/messages/count_tokens", {"model": "m", "system": SYSTEM, "messages": msgs},
                              {"x-api-key": key} if key else None)
        text, usage, st = turn(s, msgs, key, stream=stream_last and i == 2)
        out.append((text, usage, st, cnt.get("input_tokens") if st_c == 200 else None))
        msgs.append({"role": "assistant", "content": text or "ok"})
    return out


def main():
    on = Server("-c", "2048", model=DEMO)
    off = Server("-c", "2048", "--prompt-cache-mb", "0", model=DEMO)
    try:
        a, b = conversation(on), conversation(off)
        check(all(x[2] == 200 for x in a + b), "every turn answered (200)", [x[2] for x in a + b])
        check([x[0] for x in a] == [x[0] for x in b], "the three answers equal a server without the cache",
              [(x[0], y[0]) for x, y in zip(a, b) if x[0] != y[0]])
        u = [x[1] for x in a]
        check(u[0].get("cache_read_input_tokens") == 0 and u[0].get("cache_creation_input_tokens") == a[0][3] and
              u[0].get("input_tokens") == a[0][3],
              "turn 1: nothing read, the whole prompt kept (cache_creation_input_tokens)", u[0])
        for t in (1, 2):
            prev = a[t - 1][3]
            check(u[t].get("cache_read_input_tokens") == prev and
                  u[t].get("input_tokens") + u[t].get("cache_read_input_tokens") == a[t][3] and
                  u[t].get("cache_creation_input_tokens") == a[t][3] - prev,
                  "turn %d%s: the previous prompt (%s tokens) read from the cache, input_tokens the rest" %
                  (t + 1, " (streamed: message_start's usage)" if t == 2 else "", prev), u[t])
        ub = [x[1] for x in b]
        check(all(x.get("cache_read_input_tokens") == 0 and x.get("cache_creation_input_tokens") == 0 for x in ub),
              "--prompt-cache-mb 0: nothing read, nothing kept", ub)
        st, _, m = on.request("GET", "/metrics")
        m = m.decode()
        vals = {ln.split()[0]: float(ln.split()[1]) for ln in m.splitlines() if ln.startswith("ilpd_prompt_cache")}
        check(vals.get("ilpd_prompt_cache_hits_total", 0) >= 2 and vals.get("ilpd_prompt_cache_misses_total", 0) >= 1 and
              vals.get("ilpd_prompt_cache_tokens_reused_total", 0) >= a[0][3] + a[1][3] and
              vals.get("ilpd_prompt_cache_bytes", 0) > 0 and "ilpd_prompt_cache_evictions_total" in vals,
              "Prometheus: hits, misses, tokens reused, bytes held, evictions", vals)
    finally:
        on.stop()
        off.stop()
    keyed = Server("-c", "2048", "--api-key", "key-one", "--api-key", "key-two", model=DEMO)
    try:
        msgs = [{"role": "user", "content": USERS[1]}]
        t1, u1, _ = turn(keyed, msgs, "key-one")
        msgs += [{"role": "assistant", "content": t1 or "ok"}, {"role": "user", "content": USERS[2]}]
        _, u2, st2 = turn(keyed, msgs, "key-two")
        _, u3, st3 = turn(keyed, msgs, "key-one")
        check(st2 == 200 and u2.get("cache_read_input_tokens") == 0,
              "another API key never reads the first key's prompt", u2)
        check(st3 == 200 and u3.get("cache_read_input_tokens") == u1.get("input_tokens"),
              "the same key reads it", (u1, u3))
    finally:
        keyed.stop()
    sys.exit(1 if check.failed else 0)


if __name__ == "__main__":
    main()
