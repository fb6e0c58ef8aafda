#!/usr/bin/python3
"""Writes the prompt sets the probes are calibrated and evaluated on.

  demo:  the demo model's held-out prompts (models/heldout/*.jsonl, or the
         folder HELDOUT_DIR; never trained on), split per task by position:
         even lines calibrate, odd lines evaluate, so calibration and
         evaluation never share a prompt. One-turn examples only.
  stories: stories260K, raw-text story openings: calibration from the
         TinyStories training sample, evaluation from the validation head.

Usage:
  /usr/bin/python3 scripts/model/probe_data.py demo OUT_DIR [HELDOUT_DIR]
  /usr/bin/python3 scripts/model/probe_data.py stories SHARED_DIR OUT_DIR
Each writes OUT_DIR/calibrate.jsonl and OUT_DIR/eval.jsonl with lines
{"system", "user", "class"} or {"prompt", "class"}.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def demo(out, heldout):
    cal, ev = [], []
    for task in ("classify", "extract", "yesno", "tools", "schema", "story"):
        path = os.path.join(heldout, task + ".jsonl")
        if not os.path.exists(path):  # tools and schema: v2 only
            continue
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        for i, r in enumerate(r for r in rows if not r.get("history")):  # one turn only
            item = {"system": r["system"], "user": r["user"], "class": task}
            (cal if i % 2 == 0 else ev).append(item)
    write(os.path.join(out, "calibrate.jsonl"), cal)
    write(os.path.join(out, "eval.jsonl"), ev)


def openings(path, n, skip_first):
    """The first 6-10 words of N paragraphs that start a story."""
    text = open(path, encoding="utf-8").read().replace("<|endoftext|>", "\n\n")
    paras = [p.strip() for p in text.split("\n\n") if p.strip()]
    rows = []
    for i, p in enumerate(paras[skip_first:]):
        words = p.split()
        if len(words) < 12:
            continue
        rows.append({"prompt": " ".join(words[: 6 + i % 5]), "class": "story"})
        if len(rows) == n:
            break
    return rows


def stories(shared, out):
    base = os.path.join(shared, "data", "tinystories")
    write(os.path.join(out, "calibrate.jsonl"), openings(os.path.join(base, "tinystories_train_2MiB.txt"), 120, 0))
    write(os.path.join(out, "eval.jsonl"), openings(os.path.join(base, "tinystories_val_head.txt"), 60, 1))


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "demo":
        os.makedirs(sys.argv[2], exist_ok=True)
        demo(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else os.path.join(HERE, "..", "..", "models", "heldout"))
    elif len(sys.argv) == 4 and sys.argv[1] == "stories":
        os.makedirs(sys.argv[3], exist_ok=True)
        stories(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
