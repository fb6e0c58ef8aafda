#!/usr/bin/env python3
"""Lossless mode through the HTTP server: answers identical to full depth, and speed.

Sends held-out prompts of every class to a running `ilpd serve` (greedy,
temperature 0) in the modes off and lossless, interleaved (off, lossless,
lossless streamed, per prompt), and reports per class: answers byte-identical
to off (non-streaming and streamed), the drafted tokens kept (x-layer-draft),
and decode speed (output tokens / wall time of the request, less the time to
the first streamed byte for streams) of lossless against off.

    scripts/load/lossless_check.py [--url http://127.0.0.1:8080] [--per-class 20] [--max-tokens 48]
"""
import argparse
import http.client
import json
import os
import sys
import time
import urllib.parse

CLASSES = ["classify", "extract", "yesno", "story"]


def post(url, body, headers):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=120)
    h = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    h.update(headers)
    t0 = time.perf_counter()
    c.request("POST", "/v1/messages", json.dumps(body), h)
    r = c.getresponse()
    first = None
    chunks = []
    while True:
        b = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
        if not b:
            break
        if first is None:
            first = time.perf_counter()
        chunks.append(b)
    t1 = time.perf_counter()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, b"".join(chunks), t1 - t0, (first or t1) - t0


def stream_text(raw):
    text, out_tokens = [], 0
    for block in raw.decode().split("\n\n"):
        data = [l[6:] for l in block.split("\n") if l.startswith("data: ")]
        if not data:
            continue
        ev = json.loads(data[0])
        if ev.get("type") == "content_block_delta" and ev["delta"].get("type") == "text_delta":
            text.append(ev["delta"]["text"])
        if ev.get("type") == "message_delta":
            out_tokens = ev["usage"]["output_tokens"]
    return "".join(text), out_tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--heldout", default=os.path.join(os.path.dirname(__file__), "../../models/heldout"))
    a = ap.parse_args()
    total_bad = 0
    for cls in CLASSES:
        with open(os.path.join(a.heldout, cls + ".jsonl")) as f:
            specs = [json.loads(l) for l in f][: a.per_class]
        same = same_stream = 0
        acc = dra = 0
        t_off = t_ll = 0.0
        tok_off = tok_ll = 0
        for s in specs:
            body = {"model": "m", "max_tokens": a.max_tokens, "temperature": 0, "system": s["system"],
                    "messages": [{"role": "user", "content": s["user"]}]}
            st0, h0, raw0, dt0, _ = post(a.url, body, {"x-layer-mode": "off"})
            st1, h1, raw1, dt1, _ = post(a.url, body, {"x-layer-mode": "lossless"})
            st2, h2, raw2, dt2, _ = post(a.url, dict(body, stream=True), {"x-layer-mode": "lossless"})
            if st0 != 200 or st1 != 200 or st2 != 200:
                print("request failed:", st0, st1, st2, file=sys.stderr)
                return 2
            o0, o1 = json.loads(raw0), json.loads(raw1)
            text0 = "".join(b.get("text", "") for b in o0["content"])
            text1 = "".join(b.get("text", "") for b in o1["content"])
            text2, _ = stream_text(raw2)
            same += text0 == text1 and o0["usage"] == o1["usage"] and o0["stop_reason"] == o1["stop_reason"]
            same_stream += text0 == text2
            d = h1.get("x-layer-draft", "0/0").split("/")
            acc += int(d[0])
            dra += int(d[1])
            t_off += dt0
            t_ll += dt1
            tok_off += o0["usage"]["output_tokens"]
            tok_ll += o1["usage"]["output_tokens"]
        n = len(specs)
        total_bad += (n - same) + (n - same_stream)
        print("%-9s prompts %3d  identical %3d/%d  streamed identical %3d/%d  drafts kept %d/%d  "
              "tok/s (whole request) off %.1f  lossless %.1f  (%.2fx)" %
              (cls, n, same, n, same_stream, n, acc, dra, tok_off / t_off, tok_ll / t_ll,
               (tok_ll / t_ll) / (tok_off / t_off)))
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
