"""Greedy decoding helpers (PyTorch, fp32, no autocast, full recompute)."""
import os

import torch

from model import forward_cached, latest_checkpoint, load_checkpoint


def load_model(ckpt=None, ckpt_dir="/work/ilpd-train", round_f16=False):
    """Load a checkpoint in fp32 eval mode.  round_f16: round every 2-D weight to
    float16 precision, i.e. exactly the values stored in the F16 GGUF (norm
    weights stay f32 there too)."""
    path = ckpt or latest_checkpoint(ckpt_dir)
    if path is None:
        raise SystemExit(f"no checkpoint in {ckpt_dir}")
    model, ck = load_checkpoint(path)
    model.eval()
    if round_f16:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.copy_(p.half().float())
    return model, ck, path


@torch.no_grad()
def greedy(model, prompt_ids, max_new, stop_id=None):
    """Returns (new_ids, margins) where margins[i] = top1 - top2 logit at step i."""
    ids = list(prompt_ids)
    out, margins = [], []
    limit = model.c.max_seq_len
    for _ in range(max_new):
        if len(ids) >= limit:
            break
        logits = model(torch.tensor([ids]))[0, -1]
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        out.append(nxt)
        ids.append(nxt)
        if stop_id is not None and nxt == stop_id:
            break
    return out, margins


@torch.no_grad()
def greedy_cached(model, prompt_ids, max_new, stop_id=None, skip=()):
    """Like greedy() but with a KV cache (faster; tiny float differences
    possible); skip: layer indices to bypass."""
    caches = [dict() for _ in model.layers]
    logits = forward_cached(model, torch.tensor([list(prompt_ids)]), caches, skip)[0, -1]
    out, margins = [], []
    n = len(prompt_ids)
    for _ in range(max_new):
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        out.append(nxt)
        n += 1
        if (stop_id is not None and nxt == stop_id) or n >= model.c.max_seq_len:
            break
        logits = forward_cached(model, torch.tensor([[nxt]]), caches, skip)[0, -1]
    return out, margins
