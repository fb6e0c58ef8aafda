#!/usr/bin/python3
"""Held-out structured prompts served through `ilpd serve` at temperature 0:
valid JSON rate and category accuracy (classify), exact field match
(extract), yes/no accuracy; plus story answers for reading. Also reports the
layer status the server chose per task.

Usage: /usr/bin/python3 scripts/load/eval_served.py MODEL [--n 100] [--probe-dir DIR] [--json OUT]
"""
import argparse
import collections
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "server"))
from ilpd_server import Server  # noqa: E402


def load(task, n):
    with open(os.path.join(HERE, "..", "..", "models", "heldout", task + ".jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return rows[:n]


def ask(s, row, max_tokens):
    st, h, o = s.json("POST", "/v1/messages", {"model": "ilpd-demo", "max_tokens": max_tokens, "temperature": 0,
                                               "system": row["system"], "messages": [{"role": "user", "content": row["user"]}]})
    if st != 200:
        return None, h
    return o["content"][0]["text"], h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--probe-dir", default=os.path.join(HERE, "..", "..", "config", "probes"))
    ap.add_argument("--json")
    a = ap.parse_args()
    s = Server("--probe-dir", a.probe_dir, model=a.model)
    res = {}
    try:
        for task in ("classify", "extract", "yesno"):
            valid = right = 0
            status = collections.Counter()
            rows = load(task, a.n)
            for row in rows:
                text, h = ask(s, row, 48)
                status[h.get("x-layer-status")] += 1
                if task == "yesno":
                    right += text is not None and text.strip() == row["answer"]
                    valid += text is not None and text.strip() in ("Yes.", "No.")
                    continue
                try:
                    got, want = json.loads(text), json.loads(row["answer"])
                except (TypeError, ValueError):
                    continue
                if task == "classify":
                    ok = isinstance(got, dict) and got.get("category") in ("shipping", "returns", "product", "payment") \
                        and isinstance(got.get("confidence"), (int, float)) and 0 <= got["confidence"] <= 1
                    valid += ok
                    right += ok and got["category"] == want["category"]
                else:
                    ok = isinstance(got, dict) and set(got) == set(want)
                    valid += ok
                    right += ok and got == want
            res[task] = {"n": len(rows), "valid": valid / len(rows), "correct": right / len(rows), "layer_status": dict(status)}
            print("%-8s n=%d  valid %5.1f%%  correct %5.1f%%  layer status %s" % (
                task, len(rows), 100 * valid / len(rows), 100 * right / len(rows), dict(status)))
        stories = []
        for row in load("story", 3):
            text, h = ask(s, row, 200)
            stories.append({"user": row["user"], "answer": text, "layer_status": h.get("x-layer-status")})
            print("\n[%s] (%s)\n%s" % (row["user"], h.get("x-layer-status"), text))
        res["stories"] = stories
    finally:
        s.stop()
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
