#!/usr/bin/env python3
"""The prefix cache through the HTTP server: a long conversation's later turns start sooner.

Runs a conversation of three turns behind a system prompt of about --tokens tokens against a running
`ilpd serve` (greedy, streamed) and prints each turn's time to the first text (TTFT) and usage; with
--url-off (a server started with --prompt-cache-mb 0) runs it there too and checks the answers are
identical. With --pid (the cached server's process) and --conversations N, then runs N distinct short
conversations and prints the server's RSS before and after, and the cache's bytes against its budget
(/metrics).

    scripts/load/prefix_cache_check.py --url http://127.0.0.1:8080 [--url-off http://127.0.0.1:8081]
        [--tokens 5000] [--max-tokens 24] [--pid PID --conversations 200]
"""
import argparse
import http.client
import json
import re
import sys
import time
import urllib.parse

ASKS = ["Summarize the rules above in one sentence.", "Which rule matters most?", "Thank you. Anything else?"]


def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=1200)


def call(url, path, body=None, method="POST"):
    c = conn(url)
    c.request(method, path, json.dumps(body) if body is not None else None, {"content-type": "application/json"})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


def stream(url, body):
    """A streamed turn: (text, TTFT in s, usage of message_start, usage of message_delta)."""
    c = conn(url)
    t0 = time.perf_counter()
    c.request("POST", "/v1/messages", json.dumps(dict(body, stream=True)), {"content-type": "application/json"})
    r = c.getresponse()
    buf, text, ttft, start, delta = b"", [], None, None, None
    while True:
        b = r.read1(65536)
        if not b:
            break
        buf += b
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            data = [l[6:] for l in block.decode().split("\n") if l.startswith("data: ")]
            if not data:
                continue
            ev = json.loads(data[0])
            if ev["type"] == "message_start":
                start = ev["message"]["usage"]
            elif ev["type"] == "content_block_delta" and ev["delta"].get("type") == "text_delta":
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(ev["delta"]["text"])
            elif ev["type"] == "message_delta":
                delta = ev["usage"]
            elif ev["type"] == "error":
                raise RuntimeError(ev)
    c.close()
    return "".join(text), ttft if ttft is not None else time.perf_counter() - t0, start, delta


def system_prompt(url, tokens, seed=0):
    """Numbered rules until count_tokens says about TOKENS."""
    rules, i = [], 0
    while True:
        chunk = ["Rule %d.%d: when the user asks about topic %d, answer with care, cite rule %d, and keep it short."
                 % (seed, i + j, (i + j) * 7 % 101, i + j) for j in range(25)]
        rules += chunk
        i += 25
        st, out = call(url, "/v1/messages/count_tokens",
                       {"model": "m", "system": " ".join(rules), "messages": [{"role": "user", "content": "hi"}]})
        if st != 200 or json.loads(out)["input_tokens"] >= tokens:
            return " ".join(rules)


def conversation(url, system, max_tokens):
    msgs, turns = [], []
    for ask in ASKS:
        msgs.append({"role": "user", "content": ask})
        body = {"model": "m", "max_tokens": max_tokens, "temperature": 0, "messages": msgs,
                "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]}
        text, ttft, start, delta = stream(url, body)
        turns.append((text, ttft, start, delta))
        msgs.append({"role": "assistant", "content": text})
    return turns


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def metric(url, name):
    st, out = call(url, "/metrics", method="GET")
    m = re.search(r"^%s (\d+)$" % name, out.decode(), re.M)
    return int(m.group(1)) if m else -1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--url-off", help="a server with --prompt-cache-mb 0: the answers must be the same")
    ap.add_argument("--tokens", type=int, default=5000)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--pid", type=int, help="the cached server's process id (RSS)")
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--conversation-tokens", type=int, default=400)
    a = ap.parse_args()
    ok = True
    system = system_prompt(a.url, a.tokens)
    turns = conversation(a.url, system, a.max_tokens)
    for i, (text, ttft, start, delta) in enumerate(turns):
        print("turn %d: TTFT %.3f s  usage %s  message_delta %s" % (i + 1, ttft, json.dumps(start), json.dumps(delta)))
    for i in (1, 2):
        ratio = turns[0][1] / turns[i][1]
        print("turn %d: TTFT %.1fx lower than turn 1" % (i + 1, ratio))
        ok &= ratio >= 10
    if a.url_off:
        off = conversation(a.url_off, system, a.max_tokens)
        for i, t in enumerate(off):
            print("cache off, turn %d: TTFT %.3f s  usage %s" % (i + 1, t[1], json.dumps(t[2])))
        same = [t[0] for t in turns] == [t[0] for t in off]
        print("answers identical to the cache-off server: %s" % same)
        ok &= same
    if a.pid:
        before = rss_mb(a.pid)
        budget = metric(a.url, "ilpd_prefix_cache_budget_bytes")
        base = system_prompt(a.url, a.conversation_tokens, seed=1)
        for n in range(a.conversations):
            stream(a.url, {"model": "m", "max_tokens": 4, "temperature": 0, "system": "Conversation %d. %s" % (n, base),
                           "messages": [{"role": "user", "content": "Hello."}]})
        after = rss_mb(a.pid)
        held = metric(a.url, "ilpd_prefix_cache_bytes")
        print("RSS before %.0f MB, after %d conversations %.0f MB; cache holds %.1f MB of a %.0f MB budget "
              "(%d entries, %d evictions)" % (before, a.conversations, after, held / 2**20, budget / 2**20,
                                              metric(a.url, "ilpd_prefix_cache_entries"),
                                              metric(a.url, "ilpd_prefix_cache_evictions_total")))
        ok &= 0 <= held <= budget
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
