#!/usr/bin/python3
"""The prefix cache through the real server on the demo model: a conversation's later turns read the
earlier turns from the cache (usage.cache_read_input_tokens, in JSON and in the stream's message_start and
message_delta), answer what a server without the cache answers, and input_tokens counts what was not read;
with API keys, one key never reads another's entries; /metrics counts hits, misses, reused tokens, bytes."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ilpd_server import Checks, Server, sse  # noqa: E402

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "ilpd-demo-Q8_0.gguf")
check = Checks()
SYSTEM = [{"type": "text", "text": " ".join("Rule %d: answer briefly and kindly, about the story at hand." % i
                                           for i in range(12)), "cache_control": {"type": "ephemeral"}}]
ASKS = ["Tell me a story about a little dog.", "What did the dog find?", "How did the story end?"]


def body(msgs, stream=False):
    return {"model": "demo", "max_tokens": 16, "temperature": 0, "system": SYSTEM, "messages": msgs, "stream": stream}


def turn(s, msgs, headers=None, stream=False):
    """One turn: (text, usage; for a stream the message_start usage and the message_delta usage)."""
    status, _, out = s.request("POST", "/v1/messages", body(msgs, stream), headers)
    if status != 200:
        raise RuntimeError("status %d: %s" % (status, out[:200]))
    if not stream:
        m = json.loads(out)
        return "".join(b.get("text", "") for b in m["content"]), m["usage"], None
    events = sse(out)
    start = next(d for e, d in events if e == "message_start")["message"]["usage"]
    delta = next(d for e, d in events if e == "message_delta")["usage"]
    text = "".join(d["delta"].get("text", "") for e, d in events if e == "content_block_delta")
    return text, start, delta


def conversation(s, headers=None):
    """Three turns, the last one streamed: [(text, usage, delta usage), ...] and the prompts' token counts."""
    msgs, turns, counts = [], [], []
    for i, ask in enumerate(ASKS):
        msgs.append({"role": "user", "content": ask})
        st, _, c = s.json("POST", "/v1/messages/count_tokens", {"model": "demo", "system": SYSTEM, "messages": msgs},
                          headers)
        counts.append(c["input_tokens"] if st == 200 else -1)
        t = turn(s, msgs, headers, stream=i == 2)
        turns.append(t)
        msgs.append({"role": "assistant", "content": t[0]})
    return turns, counts


def main():
    s = Server("-c", "2048", model=DEMO)
    try:
        turns, counts = conversation(s)
        _, metrics_out = s.request("GET", "/metrics")[1:]
    finally:
        s.stop()
    u1, u2, u3 = turns[0][1], turns[1][1], turns[2][1]
    check(u1["cache_read_input_tokens"] == 0 and u1["input_tokens"] == counts[0] and
          u1["cache_creation_input_tokens"] == counts[0],
          "turn 1 reads nothing and stores its prompt (%d tokens)" % counts[0], u1)
    ok = True
    for n, u, prev in ((1, u2, counts[0]), (2, u3, counts[1])):
        ok &= prev <= u["cache_read_input_tokens"] < counts[n] and \
            u["input_tokens"] + u["cache_read_input_tokens"] == counts[n] and \
            u["cache_creation_input_tokens"] == u["input_tokens"]
    check(ok, "turns 2 and 3 read at least the previous prompt from the cache; input_tokens is the rest",
          (u2, u3, counts))
    delta = turns[2][2]
    check(delta and delta["cache_read_input_tokens"] == u3["cache_read_input_tokens"] and
          delta["input_tokens"] == u3["input_tokens"] and delta["output_tokens"] > 0,
          "a stream's message_start and message_delta carry the cache's counts", (u3, delta))
    text = metrics_out.decode()
    hits = re.search(r"^ilpd_prefix_cache_hits_total (\d+)$", text, re.M)
    reused = re.search(r"^ilpd_prefix_cache_reused_tokens_total (\d+)$", text, re.M)
    held = re.search(r"^ilpd_prefix_cache_bytes (\d+)$", text, re.M)
    check(hits and int(hits.group(1)) == 2 and reused and
          int(reused.group(1)) == u2["cache_read_input_tokens"] + u3["cache_read_input_tokens"] and
          held and int(held.group(1)) > 0 and "ilpd_prefix_cache_misses_total 1" in text and
          "ilpd_prefix_cache_evictions_total" in text,
          "/metrics counts the hits, the miss, the tokens reused and the bytes held")

    off = Server("-c", "2048", "--prompt-cache-mb", "0", model=DEMO)
    try:
        turns_off, _ = conversation(off)
    finally:
        off.stop()
    check([t[0] for t in turns] == [t[0] for t in turns_off] and
          all(t[1]["cache_read_input_tokens"] == 0 and t[1]["cache_creation_input_tokens"] == 0 for t in turns_off),
          "a server without the cache answers the same three turns and reads nothing",
          ([t[0] for t in turns], [t[0] for t in turns_off]))

    keyed = Server("-c", "2048", "--api-key", "key-one", "--api-key", "key-two", model=DEMO)
    try:
        msgs = [{"role": "user", "content": ASKS[0]}]
        _, a1, _ = turn(keyed, msgs, {"x-api-key": "key-one"})
        _, b1, _ = turn(keyed, msgs + [{"role": "assistant", "content": "Once"}, {"role": "user", "content": "Go on."}],
                        {"x-api-key": "key-two"})
        _, a2, _ = turn(keyed, msgs + [{"role": "assistant", "content": "Once"}, {"role": "user", "content": "Go on."}],
                        {"x-api-key": "key-one"})
    finally:
        keyed.stop()
    check(a1["cache_read_input_tokens"] == 0 and b1["cache_read_input_tokens"] == 0 and
          a2["cache_read_input_tokens"] > 0,
          "with API keys, a key reads its own entries only (key two read %d, key one %d)" %
          (b1["cache_read_input_tokens"], a2["cache_read_input_tokens"]))
    return 1 if check.failed else 0


if __name__ == "__main__":
    sys.exit(main())
