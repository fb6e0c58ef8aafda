#!/usr/bin/python3
"""Server benchmarks (not tests):

1. Overhead: the median time the server adds on top of the engine for a
   1-token request = client round trip - the engine's own time (engine_ms in
   the request log), over N requests.
2. Idle: the first request after IDLE seconds of silence against a warm one
   (weights live in anonymous memory, so the kernel cannot drop them).

Usage: /usr/bin/python3 scripts/bench_server.py MODEL [--n 50] [--idle 120]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
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
    a = ap.parse_args()
    s = Server(model=a.model)
    try:
        for _ in range(5):
            timed(s, BODY)
        samples = [timed(s, BODY) for _ in range(a.n)]
        warm = [timed(s, dict(BODY, max_tokens=16))[0] for _ in range(5)]
        time.sleep(a.idle)
        cold = timed(s, dict(BODY, max_tokens=16))[0]
    finally:
        rc, log = s.stop()
    eng = engine_ms(log)
    over = [rt - eng[rid] for rt, st, rid in samples if st == 200 and rid in eng]
    print("requests: %d x max_tokens=1; round trip median %.2f ms; engine median %.2f ms" % (
        len(over), statistics.median(r for r, _, _ in samples), statistics.median(eng[rid] for _, _, rid in samples if rid in eng)))
    print("server overhead (round trip - engine time): median %.2f ms, p90 %.2f ms" % (
        statistics.median(over), sorted(over)[int(0.9 * len(over)) - 1]))
    print("16-token request: warm median %.1f ms; first after %d s idle %.1f ms (ratio %.2f)" % (
        statistics.median(warm), a.idle, cold, cold / statistics.median(warm)))


if __name__ == "__main__":
    main()
