#!/usr/bin/python3
"""Per-layer redundancy of the demo model on held-out chats (Markdown table).

  /usr/bin/python3 scripts/model/train/redundancy.py [--ckpt PATH] [--per-task 8]

For held-out documents (<s> + full ChatML rendering incl. the answer),
teacher-forced, fp32:
  1-cos    mean over tokens of 1 - cos(residual before layer i, residual after it)
  top1     fraction of positions whose argmax equals the full-depth argmax when
           only layer i is skipped (all positions; "ans" = assistant-answer
           positions only)
  dNLL     increase of the mean next-token NLL on answer tokens when layer i
           is skipped.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)
from chat import Tokenizer, render  # noqa: E402
from gen import load_model  # noqa: E402


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train")
    ap.add_argument("--per-task", type=int, default=8)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    tok = Tokenizer(os.path.join(REPO, "models", "tokenizer.model"))
    model, ck, path = load_model(a.ckpt, a.ckpt_dir)
    L = model.c.n_layers
    docs = []
    for task in ("classify", "extract", "yesno", "story"):
        with open(os.path.join(REPO, "models", "heldout", f"{task}.jsonl")) as f:
            for line in f.readlines()[:a.per_task]:
                ex = json.loads(line)
                ids = ([tok.bos] + tok.encode_chat_text(render(ex)))[:model.c.max_seq_len + 1]
                npr = len(tok.prompt_ids(ex["system"], ex["user"]))
                docs.append((ids, npr))
    cos_sum = torch.zeros(L)
    agree = torch.zeros(L)
    agree_ans = torch.zeros(L)
    nll_skip = torch.zeros(L)
    n_tok = n_ans = 0
    nll_full = 0.0
    for ids, npr in docs:
        x = torch.tensor([ids[:-1]])
        y = torch.tensor(ids[1:])
        logits, hs = model(x, return_hidden=True)
        full = logits[0].argmax(-1)
        T = len(y)
        ans = torch.zeros(T, dtype=torch.bool)
        ans[npr - 1:] = True
        nll_full += F.cross_entropy(logits[0][ans], y[ans], reduction="sum").item()
        for i in range(L):
            c = F.cosine_similarity(hs[i][0], hs[i + 1][0], dim=-1)
            cos_sum[i] += (1 - c).sum()
            lg = model(x, skip=(i,))[0]
            am = lg.argmax(-1)
            agree[i] += (am == full).sum()
            agree_ans[i] += (am == full)[ans].sum()
            nll_skip[i] += F.cross_entropy(lg[ans], y[ans], reduction="sum").item()
        n_tok += T
        n_ans += int(ans.sum())
    rows = []
    print(f"Checkpoint step {ck['state']['step']} ({ck['state']['tokens']/1e6:.1f} M tokens); "
          f"{len(docs)} held-out chats ({a.per_task} per task), {n_tok} positions, "
          f"{n_ans} answer positions; full-depth answer NLL {nll_full/n_ans:.3f}.\n")
    print("| layer | 1 - cos(in, out) | top-1 agree (all) | top-1 agree (answer) | dNLL answer |")
    print("|---:|---:|---:|---:|---:|")
    for i in range(L):
        r = {"layer": i, "one_minus_cos": (cos_sum[i] / n_tok).item(),
             "top1_all": (agree[i] / n_tok).item(), "top1_answer": (agree_ans[i] / n_ans).item(),
             "dnll_answer": (nll_skip[i].item() - nll_full) / n_ans}
        rows.append(r)
        print(f"| {i} | {r['one_minus_cos']:.4f} | {r['top1_all']:.3f} | {r['top1_answer']:.3f} "
              f"| {r['dnll_answer']:+.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"checkpoint": path, "step": ck["state"]["step"], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
