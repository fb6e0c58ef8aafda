#!/usr/bin/python3
"""Write models/demo.golden.json: greedy continuations of held-out chat prompts.

  /usr/bin/python3 scripts/model/train/golden.py [--ckpt PATH] [--n-new 48]

The model runs in fp32 without autocast (KV-cached greedy decoding) and with its 2-D weights rounded to
float16 (--no-round-f16 to disable), i.e. the exact values in
models/ilpd-demo-F16.gguf, so an engine running that file in fp32 should
reproduce greedy_ids.  Prompts: 2 held-out examples per task (classify,
extract, yesno, story), rendered with the ChatML template up to
"<|im_start|>assistant\\n", with <s> first.  Exactly --n-new tokens are
generated, WITHOUT stopping at <|im_end|> (eot_index gives its first
position, -1 if absent).  margins[i] = top-1 minus top-2 logit at step i: a
mismatch where the margin is tiny (< ~0.05) is a near-tie, not a bug.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from chat import Tokenizer  # noqa: E402
from gen import greedy_cached as greedy, load_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train")
    ap.add_argument("--n-new", type=int, default=48)
    ap.add_argument("--per-task", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=4,
                    help="per task, try this many held-out prompts and keep the --per-task "
                         "ones with the largest minimum margin (fewest near-ties)")
    ap.add_argument("--no-round-f16", action="store_true")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "demo.golden.json"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    tok = Tokenizer(os.path.join(REPO, "models", "tokenizer.model"))
    model, ck, path = load_model(a.ckpt, a.ckpt_dir, round_f16=not a.no_round_f16)
    res = []
    for task in ("classify", "extract", "yesno", "story"):
        lines = open(os.path.join(REPO, "models", "heldout", f"{task}.jsonl")).readlines()
        cands, seen = [], set()
        for line in lines:
            if len(cands) >= max(a.candidates, a.per_task):
                break
            ex = json.loads(line)
            pids = tok.prompt_ids(ex["system"], ex["user"])
            if tuple(pids) in seen:  # several held-out stories share a topic prompt
                continue
            seen.add(tuple(pids))
            out, margins = greedy(model, pids, a.n_new)
            eot = out.index(tok.im_end) if tok.im_end in out else -1
            cands.append({"task": task, "prompt_ids": pids, "greedy_ids": out, "eot_index": eot,
                          "margins": [round(m, 4) for m in margins],
                          "text": tok.decode(out[:eot] if eot >= 0 else out)})
        cands.sort(key=lambda r: -min(r["margins"]))
        for r in cands[:a.per_task]:
            res.append(r)
            print(f"[{task}] {tok.decode(r['prompt_ids'])[-60:]!r} -> {r['text'][:100]!r}  "
                  f"(min margin {min(r['margins']):.3f})", flush=True)
    with open(a.out, "w") as f:
        json.dump(res, f)
        f.write("\n")
    print(f"wrote {a.out} from {path} (step {ck['state']['step']})")


if __name__ == "__main__":
    main()
