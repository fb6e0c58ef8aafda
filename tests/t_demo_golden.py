#!/usr/bin/python3
"""The built-in demo model (models/ilpd-demo-F16.gguf) against PyTorch.

models/demo.golden.json holds, for held-out prompts, the greedy ids that the
PyTorch model produced (scripts/model/train/golden.py) with the top-1/top-2 logit
margin of each step. Teacher-forced on those ids, the engine's argmax must be
the next golden id at every step (a step whose margin is under 0.01 is a
near-tie that either side may break, and is reported but not failed).
The prompt ids, decoded to text, must tokenize back to the same ids with our
tokenizer (SentencePiece's own ids, so the tokenizers agree).
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "model"))
import ilpd_gguf  # noqa: E402

ILPD = os.environ.get("ILPD", "./ilpd")
TMP = os.environ.get("TESTS_TMP", "/tmp")
MODEL = os.path.join(HERE, "..", "models", "ilpd-demo-F16.gguf")
GOLDEN = os.path.join(HERE, "..", "models", "demo.golden.json")


def detok(tokens, types, ids):
    out = b""
    for i in ids:
        t = tokens[i]
        if types[i] == 6:
            out += bytes([int(t[3:5], 16)])
        else:
            out += t.replace("\u2581", " ").encode()
    return out.decode("utf-8")


def main():
    if not os.path.exists(MODEL) or not os.path.exists(GOLDEN):
        print("skip - demo golden: models/ilpd-demo-F16.gguf or models/demo.golden.json absent")
        return 0
    golden = json.load(open(GOLDEN))
    kv = ilpd_gguf.Reader(MODEL).kv
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    failed = 0
    for n, g in enumerate(golden):
        seq = g["prompt_ids"] + g["greedy_ids"]
        out = os.path.join(TMP, "demo-golden.f32")
        p = subprocess.run([ILPD, "logits", "-m", MODEL, "--tokens", ",".join(map(str, seq)), "-o", out],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print("not ok - demo golden %d (%s): ilpd logits failed: %s" % (n, g["task"], p.stderr.strip()[-200:]))
            failed += 1
            continue
        logits = np.fromfile(out, dtype=np.float32).reshape(len(seq), -1)
        np_ = len(g["prompt_ids"])
        got = np.argmax(logits[np_ - 1:-1], axis=1)
        bad = [i for i, (a, b) in enumerate(zip(got, g["greedy_ids"])) if a != b and g["margins"][i] >= 0.01]
        ties = sum(1 for i, (a, b) in enumerate(zip(got, g["greedy_ids"])) if a != b and g["margins"][i] < 0.01)
        if bad:
            failed += 1
            print("not ok - demo golden %d (%s): engine greedy differs from PyTorch at steps %s" % (n, g["task"], bad[:5]))
        else:
            print("ok - demo golden %d (%s): %d greedy ids equal PyTorch's%s" % (
                n, g["task"], len(g["greedy_ids"]), " (%d near-ties)" % ties if ties else ""))
        text = detok(tokens, types, g["prompt_ids"][1:])
        p = subprocess.run([ILPD, "tokenize", "-m", MODEL, text], capture_output=True, text=True)
        ids = [int(t) for t in p.stdout.split()] if p.returncode == 0 else None
        if ids == g["prompt_ids"]:
            print("ok - demo golden %d (%s): our tokenizer reproduces SentencePiece's prompt ids" % (n, g["task"]))
        else:
            failed += 1
            print("not ok - demo golden %d (%s): tokenizer ids differ: %s vs %s" % (n, g["task"], ids and ids[:12], g["prompt_ids"][:12]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
