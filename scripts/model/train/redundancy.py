#!/usr/bin/python3
"""Per-layer redundancy of the demo model on held-out chats (Markdown tables).

  /usr/bin/python3 scripts/model/train/redundancy.py [--ckpt PATH] [--per-task 8] [--threads 2]
      [--nested A-B [--n 100]] [--heldout DIR] [--tokenizer MODEL]

For held-out documents (<s> + full ChatML rendering incl. the answer),
teacher-forced, fp32:
  1-cos    mean over tokens of 1 - cos(residual before layer i, residual after it)
  top1     fraction of positions whose argmax equals the full-depth argmax when
           only layer i is skipped (all positions; "ans" = assistant-answer
           positions only)
  dNLL     increase of the mean next-token NLL on answer tokens when layer i
           is skipped.
--nested A-B adds, for k = 1 .. B-A+1, the share of greedy answers (64 new
tokens at most) to the first N held-out classify, extract and yes/no prompts
that stay identical to full depth with the top k layers of A-B removed: the
order `train.py --dropout-nested` trains, measured without a probe or its
calibration split. --heldout and --tokenizer point at a v2 data run, as in
eval.py.
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
from gen import greedy_cached, load_model  # noqa: E402

STRUCTURED = ("classify", "extract", "yesno")


def load_heldout(folder, task, n):
    with open(os.path.join(folder, f"{task}.jsonl")) as f:
        return [json.loads(line) for line in f.readlines()[:n]]


@torch.no_grad()
def layer_rows(model, tok, folder, per_task):
    """One row per layer (1-cos, top-1 agreement, dNLL) over PER_TASK held-out
    chats of each task; returns (rows, header line)."""
    L = model.c.n_layers
    docs = []
    for task in STRUCTURED + ("story",):
        for ex in load_heldout(folder, task, per_task):
            ids = ([tok.bos] + tok.encode_chat_text(render(ex)))[:model.c.max_seq_len + 1]
            docs.append((ids, len(tok.prompt_ids(ex["system"], ex["user"]))))
    cos_sum, agree, agree_ans, nll_skip = (torch.zeros(L) for _ in range(4))
    n_tok = n_ans = 0
    nll_full = 0.0
    for ids, npr in docs:
        x = torch.tensor([ids[:-1]])
        y = torch.tensor(ids[1:])
        logits, hs = model(x, return_hidden=True)
        full = logits[0].argmax(-1)
        ans = torch.zeros(len(y), dtype=torch.bool)
        ans[npr - 1:] = True
        nll_full += F.cross_entropy(logits[0][ans], y[ans], reduction="sum").item()
        for i in range(L):
            cos_sum[i] += (1 - F.cosine_similarity(hs[i][0], hs[i + 1][0], dim=-1)).sum()
            lg = model(x, skip=(i,))[0]
            same = lg.argmax(-1) == full
            agree[i] += same.sum()
            agree_ans[i] += same[ans].sum()
            nll_skip[i] += F.cross_entropy(lg[ans], y[ans], reduction="sum").item()
        n_tok += len(y)
        n_ans += int(ans.sum())
    rows = [{"layer": i, "one_minus_cos": (cos_sum[i] / n_tok).item(),
             "top1_all": (agree[i] / n_tok).item(), "top1_answer": (agree_ans[i] / n_ans).item(),
             "dnll_answer": (nll_skip[i].item() - nll_full) / n_ans} for i in range(L)]
    head = (f"{len(docs)} held-out chats ({per_task} per task), {n_tok} positions, "
            f"{n_ans} answer positions; full-depth answer NLL {nll_full/n_ans:.3f}.")
    return rows, head


@torch.no_grad()
def nested_rows(model, tok, folder, n, lo, hi):
    """For k = 1 .. hi-lo+1: the share of greedy answers to N held-out prompts
    of each structured task identical to full depth with layers hi-k+1 .. hi
    removed; returns one dict a k."""
    prompts = {t: [tok.prompt_ids(ex["system"], ex["user"], ex.get("history", ()))
                   for ex in load_heldout(folder, t, n)] for t in STRUCTURED}

    def answers(skip):
        return {t: [greedy_cached(model, p, 64, tok.im_end, skip)[0] for p in ps]
                for t, ps in prompts.items()}
    full = answers(())
    rows = []
    for k in range(1, hi - lo + 2):
        got = answers(tuple(range(hi - k + 1, hi + 1)))
        same = {t: sum(a == b for a, b in zip(got[t], full[t])) for t in STRUCTURED}
        row = {"removed": k, "first": hi - k + 1}
        row.update({t: same[t] / len(full[t]) for t in STRUCTURED})
        row["structured"] = sum(same.values()) / sum(len(v) for v in full.values())
        rows.append(row)
    return rows


def print_table(caption, columns, rows):
    """CAPTION, then a Markdown table of COLUMNS and ROWS (cells), numbers right-aligned."""
    print(f"\n{caption}\n")
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", default=None)
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train")
    ap.add_argument("--per-task", type=int, default=8, help="chats a task for the layer table (0: none)")
    ap.add_argument("--nested", default=None, metavar="A-B", help="also remove the top k layers of A-B")
    ap.add_argument("--n", type=int, default=100, help="with --nested: held-out prompts per task")
    ap.add_argument("--heldout", default=os.path.join(REPO, "models", "heldout"))
    ap.add_argument("--tokenizer", default=os.path.join(REPO, "models", "tokenizer.model"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = Tokenizer(a.tokenizer)
    model, ck, path = load_model(a.ckpt, a.ckpt_dir)
    lo, _, hi = (a.nested or "").partition("-")
    if a.nested and not (lo.isdigit() and hi.isdigit() and 0 <= int(lo) <= int(hi) < model.c.n_layers):
        ap.error(f"--nested {a.nested}: want A-B, 0 <= A <= B < {model.c.n_layers}")
    print(f"Checkpoint step {ck['state']['step']} ({ck['state']['tokens']/1e6:.1f} M tokens).")
    out = {"checkpoint": path, "step": ck["state"]["step"]}
    if a.per_task > 0:
        out["rows"], head = layer_rows(model, tok, a.heldout, a.per_task)
        print_table(head, ("layer", "1 - cos(in, out)", "top-1 agree (all)", "top-1 agree (answer)", "dNLL answer"),
                    [(r["layer"], f"{r['one_minus_cos']:.4f}", f"{r['top1_all']:.3f}", f"{r['top1_answer']:.3f}",
                      f"{r['dnll_answer']:+.3f}") for r in out["rows"]])
    if a.nested:
        out["nested"] = nested_rows(model, tok, a.heldout, a.n, int(lo), int(hi))
        print_table(f"Greedy answers identical to full depth, top layers of {a.nested} removed "
                    f"({a.n} held-out prompts a task):", ("removed", "classify", "extract", "yes/no", "structured"),
                    [(f"{r['first']}-{hi} ({r['removed']})", f"{r['classify']:.2f}", f"{r['extract']:.2f}",
                      f"{r['yesno']:.2f}", f"{r['structured']:.3f}") for r in out["nested"]])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
