#!/usr/bin/python3
"""The prompt cache's must-show (issue 20), against servers this script starts.

1. A conversation of three turns behind a long system prompt (about --tokens tokens, made of
   held-out stories), greedy: time to first token of each turn with the cache and with
   --prompt-cache-mb 0, the answers of both (they must be equal) and each turn's usage.
2. --conversations distinct conversations (two turns each) through a server with a small cache
   (--budget-mb): its RSS before and after, and the cache's bytes, which must stay under the budget.

  scripts/load/prefix_cache_check.py MODEL [--tokens 5000] [--threads 2] [--ctx 8192]
      [--conversations 200] [--budget-mb 64] [--skip-churn]
Prints a JSON summary last; exits 1 when a check fails.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "server"))
from ilpd_server import Server, sse  # noqa: E402

QUESTIONS = ["Is a lemon a fruit?", "Tell me a story about a little girl named Lily.",
             "Classify this customer message as shipping, returns, product or payment.\nMessage: Where is my order "
             "A-48213? It was supposed to arrive last week."]


def long_system(s, want):
    """A system prompt of about WANT tokens (held-out stories), measured with count_tokens."""
    stories = [json.loads(l)["answer"] for l in open(os.path.join(REPO, "models", "heldout", "story.jsonl"))]
    text, i = "You are a helpful assistant. Here are some stories for reference.\n", 0
    while True:
        st, _, o = s.json("POST", "/v1/messages/count_tokens", {"model": "m", "system": text,
                                                                 "messages": [{"role": "user", "content": "hi"}]})
        if st != 200 or o["input_tokens"] >= want:
            return text, o.get("input_tokens")
        text += stories[i % len(stories)] + "\n"
        i += 1


def ask(s, system, msgs, max_tokens):
    """(seconds to the first content delta, text, usage from message_start, status) of one
    streamed request, read as it arrives."""
    import http.client
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}], "messages": msgs}
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=3600)
    t0 = time.time()
    c.request("POST", "/v1/messages", body=json.dumps(body), headers={"content-type": "application/json"})
    r = c.getresponse()
    first, raw = None, b""
    while True:
        line = r.readline()
        if not line:
            break
        if first is None and line.startswith(b"event: content_block_delta"):
            first = time.time() - t0
        raw += line
    c.close()
    text, usage = "", {}
    for ev, data in sse(raw):
        if ev == "message_start":
            usage = dict(data["message"]["usage"])
        if ev == "content_block_delta" and data["delta"].get("type") == "text_delta":
            text += data["delta"]["text"]
    return first, text, usage, r.status


def conversation(s, system, max_tokens):
    """Per turn: its TTFT, answer and usage."""
    msgs, out = [], []
    for q in QUESTIONS:
        msgs.append({"role": "user", "content": q})
        t, text, usage, st = ask(s, system, msgs, max_tokens)
        out.append({"ttft_s": round(t, 3) if t else None, "text": text, "usage": usage, "status": st})
        msgs.append({"role": "assistant", "content": text or "ok"})
    return out


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--budget-mb", type=int, default=64)
    ap.add_argument("--skip-churn", action="store_true")
    a = ap.parse_args()
    common = ["-c", str(a.ctx), "-t", str(a.threads)]
    summary, ok = {"model": a.model}, True
    for name, extra in (("cache", []), ("no_cache", ["--prompt-cache-mb", "0"])):
        s = Server(*common, *extra, model=a.model)
        try:
            system, n = long_system(s, a.tokens)
            summary["system_tokens"] = n
            summary[name] = conversation(s, system, a.max_tokens)
        finally:
            s.stop()
        for i, t in enumerate(summary[name]):
            print("%-8s turn %d: ttft %s s, usage %s" % (name, i + 1, t["ttft_s"], t["usage"]), flush=True)
    c, nc = summary["cache"], summary["no_cache"]
    same = [x["text"] for x in c] == [x["text"] for x in nc]
    speedup = [round(c[0]["ttft_s"] / c[i]["ttft_s"], 1) if c[i]["ttft_s"] else None for i in (1, 2)]
    summary["answers_identical"] = same
    summary["ttft_turn1_over_turn"] = {"2": speedup[0], "3": speedup[1]}
    ok &= same and all(x is not None and x >= 10 for x in speedup)
    print("answers identical to the cache-off server: %s; turn-1 TTFT / turn 2, 3: %s" % (same, speedup), flush=True)
    if not a.skip_churn:
        s = Server("-c", "2048", "-t", str(a.threads), "--prompt-cache-mb", str(a.budget_mb), model=a.model)
        try:
            before = rss_kb(s.proc.pid)
            for i in range(a.conversations):
                system = "You are assistant number %d. Answer briefly." % i
                msgs = [{"role": "user", "content": "Conversation %d: %s" % (i, QUESTIONS[i % 3])}]
                _, text, _, _ = ask(s, system, msgs, 8)
                msgs += [{"role": "assistant", "content": text or "ok"}, {"role": "user", "content": QUESTIONS[(i + 1) % 3]}]
                ask(s, system, msgs, 8)
            after = rss_kb(s.proc.pid)
            _, _, m = s.request("GET", "/metrics")
            vals = {ln.split()[0]: float(ln.split()[1]) for ln in m.decode().splitlines()
                    if ln.startswith("ilpd_prompt_cache")}
        finally:
            s.stop()
        held = vals.get("ilpd_prompt_cache_bytes", -1)
        summary["churn"] = {"conversations": a.conversations, "budget_mb": a.budget_mb, "rss_before_mb": before / 1024,
                            "rss_after_mb": after / 1024, "cache_bytes_mb": held / 2**20, "metrics": vals}
        ok &= 0 <= held <= a.budget_mb * 2**20 and after - before <= a.budget_mb * 1024 + 64 * 1024
        print("churn: RSS %.1f -> %.1f MB, cache %.1f MB of %d MB, %d evictions" %
              (before / 1024, after / 1024, held / 2**20, a.budget_mb, vals.get("ilpd_prompt_cache_evictions_total", 0)))
    for k in ("cache", "no_cache"):
        for t in summary[k]:
            t["text"] = t["text"][:80]
    print(json.dumps(summary))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
