#!/usr/bin/env python3
"""Lossless mode through the HTTP server: answers identical to full depth, and speed.

Sends held-out prompts of every class to a running `ilpd serve` (greedy,
temperature 0), per prompt: mode off, lossless, lossless streamed. Reports
per class: answers byte-identical to off (non-streaming and streamed, with
the same usage and stop reason), the drafted tokens kept (x-layer-draft),
and two speeds of lossless against off:
  - decode: the output tokens after the first over the server's decode time
    (Server-Timing's decode: what lossless mode changes; the prompt before
    it is the same in both modes);
  - whole request: the time of the whole request (HTTP, prompt and all)
    as the client sees it.

    scripts/load/lossless_check.py [--url http://127.0.0.1:8080] [--per-class 20] [--max-tokens 48]
                                   [--api-keys OFF,LOSSLESS,STREAM] [--classes classify,extract,yesno,story]

Lossless mode drafts from the answers the server gave earlier to the same
API key (its lookup cache). A prompt asked in mode off and then in lossless
mode under one key would draft its whole answer from the first: with
--api-keys (three keys the server accepts) each kind of request goes out
under its own key, so that a prompt's lossless requests only draft from the
answers to earlier prompts, as a fair measure needs. Exit status: 1 when an
answer differs, 2 when a request fails.
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
    """Returns status, headers, body, the request's time, and for a stream the
    events with the time each arrived: [(seconds since the request, event)]."""
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=120)
    h = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    h.update(headers)
    t0 = time.perf_counter()
    c.request("POST", "/v1/messages", json.dumps(body), h)
    r = c.getresponse()
    chunks, events, pending = [], [], b""
    while True:
        b = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
        if not b:
            break
        t = time.perf_counter() - t0
        chunks.append(b)
        if body.get("stream"):
            pending += b
            while b"\n\n" in pending:
                block, pending = pending.split(b"\n\n", 1)
                data = [l[6:] for l in block.decode().split("\n") if l.startswith("data: ")]
                if data:
                    events.append((t, json.loads(data[0])))
    dt = time.perf_counter() - t0
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, hdrs, b"".join(chunks), dt, events


def stream_summary(events):
    """The text, output tokens and stop reason of a stream."""
    text, out_tokens, stop = [], 0, None
    for _, ev in events:
        if ev.get("type") == "content_block_delta" and ev["delta"].get("type") == "text_delta":
            text.append(ev["delta"]["text"])
        if ev.get("type") == "message_delta":
            out_tokens = ev["usage"]["output_tokens"]
            stop = ev["delta"].get("stop_reason")
    return "".join(text), out_tokens, stop


def decode_ms(headers):
    """Server-Timing's decode duration in ms (0 when absent)."""
    for part in headers.get("server-timing", "").split(","):
        name, _, dur = part.strip().partition(";dur=")
        if name == "decode" and dur:
            return float(dur)
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--per-class", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--api-keys", default="", help="OFF,LOSSLESS,STREAM: one API key per kind of request")
    ap.add_argument("--classes", default=",".join(CLASSES), help="comma-separated classes to send")
    ap.add_argument("--heldout", default=os.path.join(os.path.dirname(__file__), "../../models/heldout"))
    a = ap.parse_args()
    keys = a.api_keys.split(",") if a.api_keys else []
    if keys and len(keys) != 3:
        ap.error("--api-keys takes three keys")
    key = [{"x-api-key": k} for k in keys] if keys else [{}, {}, {}]
    total_bad = 0
    for cls in a.classes.split(","):
        with open(os.path.join(a.heldout, cls + ".jsonl")) as f:
            specs = [json.loads(l) for l in f][: a.per_class]
        same = same_stream = acc = dra = 0
        dec_off = dec_ll = whole_off = whole_ll = 0.0
        tok_dec = 0
        for s in specs:
            body = {"model": "m", "max_tokens": a.max_tokens, "temperature": 0, "system": s["system"],
                    "messages": [{"role": "user", "content": s["user"]}]}
            st0, h0, raw0, dt0, _ = post(a.url, body, dict(key[0], **{"x-layer-mode": "off"}))
            st1, h1, raw1, dt1, _ = post(a.url, body, dict(key[1], **{"x-layer-mode": "lossless"}))
            st2, _, _, _, ev2 = post(a.url, dict(body, stream=True), dict(key[2], **{"x-layer-mode": "lossless"}))
            if st0 != 200 or st1 != 200 or st2 != 200:
                print("request failed:", st0, st1, st2, file=sys.stderr)
                return 2
            o0, o1 = json.loads(raw0), json.loads(raw1)
            text0 = "".join(b.get("text", "") for b in o0["content"])
            text1 = "".join(b.get("text", "") for b in o1["content"])
            text2, n2, stop2 = stream_summary(ev2)
            n0 = o0["usage"]["output_tokens"]
            same += text0 == text1 and o0["usage"] == o1["usage"] and o0["stop_reason"] == o1["stop_reason"]
            same_stream += text0 == text2 and n0 == n2 and o0["stop_reason"] == stop2
            d = h1.get("x-layer-draft", "0/0").split("/")
            acc += int(d[0])
            dra += int(d[1])
            d0, d1 = decode_ms(h0), decode_ms(h1)
            if n0 > 1 and d0 > 0 and d1 > 0:
                dec_off += d0
                dec_ll += d1
                tok_dec += n0 - 1
            whole_off += dt0
            whole_ll += dt1
        n = len(specs)
        total_bad += (n - same) + (n - same_stream)
        dec_x = (tok_dec / dec_ll) / (tok_dec / dec_off) if dec_off > 0 and dec_ll > 0 else 0
        print("%-9s prompts %3d  identical %3d/%d  streamed identical %3d/%d  drafts kept %d/%d  "
              "decode tok/s off %.0f lossless %.0f (%.2fx)  whole request %.2fx" %
              (cls, n, same, n, same_stream, n, acc, dra, 1e3 * tok_dec / dec_off if dec_off else 0,
               1e3 * tok_dec / dec_ll if dec_ll else 0, dec_x, whole_off / whole_ll if whole_ll else 0))
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
