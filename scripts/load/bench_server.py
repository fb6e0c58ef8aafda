#!/usr/bin/python3
"""Server benchmarks (not tests):

1. Overhead: the median time the server adds on top of the engine for a
   1-token request = client round trip - the engine's own time (engine_ms in
   the request log), over N requests.
2. Idle: the first request after IDLE seconds of silence against a warm one,
   for a server with its idle warm-up passes (keep_warm, the default) and one
   without (--keep-warm 0), both running through the same quiet spells; ROUNDS
   spells, the order of the two alternating.

Usage: /usr/bin/python3 scripts/load/bench_server.py MODEL [--n 50] [--idle 120] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "server"))
from ilpd_server import Server  # noqa: E402

BODY = {"model": "bench", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": "Tell me a story about a cat."}]}


def timed(s, body):
    t0 = time.perf_counter()
    st, h, out = s.request("POST", "/v1/messages", json.dumps(body))
    return (time.perf_counter() - t0) * 1e3, st, h.get("request-id")


def engine_ms(log_text):
    out = {}
    for line in log_text.splitlines():
        if '"event":"request"' in line and '"engine_ms"' in line:
            j = json.loads(line)
            out[j["request_id"]] = j["engine_ms"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--idle", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    gen16 = dict(BODY, max_tokens=16)
    servers = {"keep_warm on": Server("-t", "2", model=a.model), "keep_warm 0": Server("-t", "2", "--keep-warm", "0", model=a.model)}
    cold = {k: [] for k in servers}
    warm = {}
    try:
        s = servers["keep_warm on"]
        for _ in range(5):
            timed(s, BODY)
        samples = [timed(s, BODY) for _ in range(a.n)]
        for k, s in servers.items():
            timed(s, gen16)
            warm[k] = statistics.median(timed(s, gen16)[0] for _ in range(7))
        names = list(servers)
        for r in range(a.rounds):
            time.sleep(a.idle)
            for k in names[r % 2:] + names[:r % 2]:
                cold[k].append(timed(servers[k], gen16)[0])
                print("round %d, %s: %.1f ms after %d s idle (warm %.1f ms)" % (r + 1, k, cold[k][-1], a.idle, warm[k]), flush=True)
    finally:
        logs = {k: s.stop()[1] for k, s in servers.items()}
    eng = engine_ms(logs["keep_warm on"])
    over = [rt - eng[rid] for rt, st, rid in samples if st == 200 and rid in eng]
    print("requests: %d x max_tokens=1; round trip median %.2f ms; engine median %.2f ms" % (
        len(over), statistics.median(r for r, _, _ in samples), statistics.median(eng[rid] for _, _, rid in samples if rid in eng)))
    print("server overhead (round trip - engine time): median %.2f ms, p90 %.2f ms" % (
        statistics.median(over), sorted(over)[int(0.9 * len(over)) - 1]))
    for k in servers:
        print("16-token request, %s: warm median %.1f ms; first after %d s idle: median %.1f ms of %d (ratio %.2f; each: %s)" % (
            k, warm[k], a.idle, statistics.median(cold[k]), len(cold[k]), statistics.median(cold[k]) / warm[k],
            ", ".join("%.2f" % (c / warm[k]) for c in cold[k])))


if __name__ == "__main__":
    main()
