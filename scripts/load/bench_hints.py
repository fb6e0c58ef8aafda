#!/usr/bin/python3
"""Generation speed with layers skipped through x-layer-hint vs full depth, in
one server run (a benchmark, not a test).

Usage: /usr/bin/python3 scripts/load/bench_hints.py MODEL --skip 0.25 [--n 5] [--tokens 64]
The server runs with --hint-max-deviation set to the skipped fraction so that
the hint is applied; the hint keeps layers 0..2 and the last. Prints decode
tok/s (engine time after the first token) and TTFT from the request log.
"""
import argparse
import base64
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "server"))
from ilpd_server import Server  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--skip", type=float, default=0.25)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    s = Server("--hint-max-deviation", str(a.skip + 0.01), "--layer-skip", "off", model=a.model)
    try:
        st, h, o = s.json("POST", "/v1/messages", {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
        n_layers = len([b for b in base64.b64decode(h["x-layer-mask"]) if b])
        skip = int(round(a.skip * n_layers))
        mask = [1] * n_layers
        for i in range(skip):  # spread over the middle layers
            mask[3 + (i * (n_layers - 4)) // skip] = 0
        hint = base64.b64encode(bytes(mask + [0] * (32 - n_layers))).decode()
        body = {"model": "m", "max_tokens": a.tokens, "temperature": 0, "messages": [{"role": "user", "content": "Tell me a story."}]}
        for i in range(a.n):
            s.json("POST", "/v1/messages", body)
            st, h, o = s.json("POST", "/v1/messages", body, {"x-layer-hint": hint})
            assert h["x-layer-hint-status"] == "applied", h
    finally:
        rc, log = s.stop()
    runs = {"full": [], "hint": []}
    reqs = [json.loads(l) for l in log.splitlines() if '"event":"request"' in l and '"engine_ms"' in l]
    for r in reqs[1:]:
        if r["output_tokens"] < 2:
            continue
        key = "hint" if r["layers_skipped"] else "full"
        runs[key].append(((r["output_tokens"] - 1) / ((r["engine_ms"] - r["ttft_ms"]) / 1e3), r["ttft_ms"]))
    f = statistics.median(t for t, _ in runs["full"])
    g = statistics.median(t for t, _ in runs["hint"])
    print("%s: %d layers, hint skips %d (%.0f%%)" % (os.path.basename(a.model), n_layers, skip, 100 * skip / n_layers))
    print("decode tok/s: full %.1f, hint %.1f (time per token %.3f of full; ideal %.3f)" % (f, g, f / g, 1 - skip / n_layers))
    print("ttft ms: full %.1f, hint %.1f" % (statistics.median(t for _, t in runs["full"]), statistics.median(t for _, t in runs["hint"])))


if __name__ == "__main__":
    main()
