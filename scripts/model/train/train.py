#!/usr/bin/python3
"""Train the ilpd demo model (CPU, bf16 autocast), resumably.

  nohup nice -n 19 /usr/bin/python3 scripts/model/train/train.py \\
      --ckpt-dir /work/ilpd-train --max-minutes 135 --max-tokens 30000000 \\
      > /work/ilpd-train/train.log 2>&1 &

Reads <data-dir>/train.bin and heldout.bin (uint16 token streams written by
make_data.py).  Sequences of --seq tokens are cut contiguously from the
packed stream (documents start with <s>; no cross-document masking).
The LR schedule (linear warmup, cosine to --min-lr) runs on
progress = max(tokens / max_tokens, train_seconds / (60 * max_minutes)),
so a wall-clock budget still ends with a decayed LR.  Checkpoints every
--ckpt-minutes to <ckpt-dir>/ckpt_<step>.pt (last 3 kept) and at the end;
re-running the same command resumes from the latest checkpoint (the model
shape comes from the checkpoint; the budgets and LR come from the command line).

--init-from CKPT --init-minutes M starts a continuation phase in an empty
--ckpt-dir from a checkpoint without optimizer state (e.g. one rebuilt from the
GGUF by ckpt_from_gguf.py): the weights and step/token counts come from CKPT,
M minutes count as already spent, the data position continues at the token
count, the optimizer starts fresh and the LR schedule restarts (warmup, then
cosine) over what is left of --max-tokens / --max-minutes. A --seq longer
than CKPT's context extends it (RoPE tables are not weights): this is how the
CPU recipe trains mostly at 512 and ends at 2,048.
Log: <ckpt-dir>/loss.csv (step, tokens, train_seconds, lr, train_loss,
heldout_loss, tok_per_s, copy_acc: eval_copy's induction check).

Skipping recipe (demo model v2; LayerSkip, Elhoushi et al. 2024):
  --layer-dropout P   layer i of L is dropped for a sequence with probability
                      P * i / (L - 1) (never layer 0), so the model learns to do
                      without its later layers; --dropout-layers A-B drops only
                      layers A..B, layer i with P * (i - A + 1) / (B - A + 1)
                      (the probe's candidates: the layers it can skip);
                      with --dropout-nested a sequence instead drops, with
                      probability P, the last k layers of that range, k
                      uniform in 1..B - A + 1: one fixed order (from the top)
                      that calibration's ranking can then follow;
  --early-exit E      adds E x the mean cross-entropy of early exits (the shared
                      final norm and head on the hidden state after layer i),
                      weighted by depth i / (L - 1); the exits taken in a step
                      rotate (--exit-rotation R: layers with (i + step) % R == 0,
                      from --exit-from), so each costs one head a step.
  Both draw from generators seeded by (--seed, step): a run is deterministic
  per seed on one device kind (--device auto: CUDA when present).

Copying (--induction F): a share F of the sequences is replaced by repeated
spans (random tokens, or spans of the training stream, 4-48 tokens, each
written twice in a row) with the loss on the second copies only. A small model
trained on the task data alone never learns to copy (the "induction heads"
of Olsson et al. 2022: a repeated random sequence is no easier the second
time), so it answers with typical values instead of the ones in the prompt;
these sequences teach the look-back-and-copy circuit directly.
--answer-loss counts only the targets inside assistant turns (after
meta.json's assistant_header, up to and including im_end: the stories and
the task answers), as instruction tuning does: the prompts' template text
no longer competes with the answers for a small model's capacity.
--until-copy A ends the run (with a checkpoint) at the first evaluation whose
copy accuracy reaches A: train_v2.sh copy uses it for its all-copy phase.
Data: train.bin, or train.bin.xz (decompressed into memory; this is how the
token stream travels to a GPU machine that has no SentencePiece).
"""
import argparse
import csv
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chat import answer_mask, turn_weights  # noqa: E402
from model import Config, Llama, latest_checkpoint, n_params  # noqa: E402


def get_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt-dir", default="/work/ilpd-train/")
    ap.add_argument("--data-dir", default=None, help="default: <ckpt-dir>/data")
    ap.add_argument("--max-tokens", type=float, default=30e6)
    ap.add_argument("--max-minutes", type=float, default=135.0,
                    help="total training wall-clock budget (summed over resumes)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    ap.add_argument("--micro", type=int, default=4, help="sequences per forward pass")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=2e-4)
    ap.add_argument("--warmup", type=float, default=0.02, help="fraction of progress")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-windows", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-from", default=None, help="continuation phase: weights from this checkpoint")
    ap.add_argument("--init-minutes", type=float, default=0.0,
                    help="training minutes --init-from's weights already took")
    # shape (fresh start only)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=384)
    ap.add_argument("--vocab", type=int, default=0, help="0: from tokenizer model")
    ap.add_argument("--device", default="auto", help="auto, cpu or cuda")
    ap.add_argument("--layer-dropout", type=float, default=0.0, help="drop rate of the last layer")
    ap.add_argument("--dropout-layers", default=None, metavar="A-B",
                    help="only layers A..B drop (default: 1 to the last)")
    ap.add_argument("--dropout-nested", action="store_true",
                    help="drop the last k layers of the range (k uniform), with probability --layer-dropout")
    ap.add_argument("--early-exit", type=float, default=0.0, help="weight of the early-exit loss")
    ap.add_argument("--distill", type=float, default=0.0,
                    help="weight of a second pass with --layer-dropout, trained toward the full model")
    ap.add_argument("--exit-rotation", type=int, default=4)
    ap.add_argument("--exit-from", type=int, default=1, help="first layer with an early exit")
    ap.add_argument("--induction", type=float, default=0.0,
                    help="share of sequences replaced by repeated spans (copy training)")
    ap.add_argument("--answer-loss", action="store_true",
                    help="loss on the assistant turns only (meta.json: assistant_header, im_end)")
    ap.add_argument("--turn-weight", type=float, default=0.0,
                    help="with --answer-loss: an answer's tokens weigh its length ** -W (1: every answer the same)")
    ap.add_argument("--until-copy", type=float, default=0.0,
                    help="end the run at the first evaluation whose copy accuracy reaches this")
    a = ap.parse_args()
    if a.turn_weight and not a.answer_loss:
        ap.error("--turn-weight weighs answers: it needs --answer-loss")
    if a.dropout_nested and not 0 < a.layer_dropout <= 1:
        ap.error("--dropout-nested drops with probability --layer-dropout: it needs 0 < P <= 1")
    if a.distill and a.layer_dropout <= 0:
        ap.error("--distill trains a pass with layers dropped: it needs --layer-dropout")
    a.dropout_range = None
    if a.dropout_layers:
        lo, _, hi = a.dropout_layers.partition("-")
        if not (lo.isdigit() and hi.isdigit() and 1 <= int(lo) <= int(hi)):
            ap.error(f"--dropout-layers {a.dropout_layers}: expected A-B with 1 <= A <= B")
        a.dropout_range = (int(lo), int(hi))
    return a


def lr_at(progress, a):
    if progress < a.warmup:
        return a.lr * progress / a.warmup
    p = min(1.0, (progress - a.warmup) / max(1e-9, 1 - a.warmup))
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * p))


def save(path, model, opt, state, cfg, args):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state,
                "config": cfg.to_dict(), "args": vars(args)}, tmp)
    os.replace(tmp, path)
    for old in sorted(glob.glob(os.path.join(os.path.dirname(path), "ckpt_*.pt")))[:-3]:
        os.remove(old)


def read_tokens(data_dir, name):
    """The uint16 token stream NAME (.bin, or .bin.xz read into memory)."""
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
        return np.memmap(path, dtype=np.uint16, mode="r")
    import lzma
    with lzma.open(path + ".xz") as f:
        return np.frombuffer(f.read(), dtype=np.uint16)


def layer_keep(a, L, B, step, device):
    """Layer dropout draw for one micro-batch: bool [L, B], or None."""
    if a.layer_dropout <= 0:
        return None
    g = torch.Generator().manual_seed(a.seed * 1000003 + step)
    lo, hi = a.dropout_range if a.dropout_range else (1, L - 1)
    if a.dropout_nested:  # sequence b keeps layers below hi + 1 - k[b]
        drops = torch.rand(B, generator=g) < a.layer_dropout
        k = torch.randint(1, hi - lo + 2, (B,), generator=g) * drops
        first = (hi + 1 - k)[None, :]
        i = torch.arange(L)[:, None]
        return ((i < first) | (i > hi)).to(device)
    p = torch.tensor([a.layer_dropout * (i - lo + 1) / (hi - lo + 1) if lo <= i <= hi else 0.0
                      for i in range(L)])
    return (torch.rand(L, B, generator=g) >= p[:, None]).to(device)


FIRST_TEXT_TOKEN = 261  # make_data.py's tokenizers: 5 control tokens, then 256 byte tokens


def repeat_sequence(data, n, vocab, rng):
    """N + 1 tokens of spans each written twice ([A A B B ...]) and the
    target mask [N] (False where the target is in a first copy)."""
    xs, mask = [], []
    while len(xs) < n + 1:
        k = int(rng.integers(4, 49))
        if rng.random() < 0.5:
            span = rng.integers(FIRST_TEXT_TOKEN, vocab, k)
        else:
            p = int(rng.integers(0, len(data) - k))
            span = np.asarray(data[p:p + k], dtype=np.int64)
        xs += list(span) * 2
        mask += [False] * k + [True] * k
    return np.asarray(xs[:n + 1], dtype=np.int64), np.asarray(mask[1:n + 1])


def skip_loss(model, xy, a, step, device, tweight=None):
    """Cross-entropy of the model on XY plus the weighted early-exit losses of
    this step's exits; TWEIGHT [B, T] (optional) weighs the targets (0: not
    counted; the loss is the weighted mean). Layer dropout applies to that
    pass, or with --distill D to a second pass (the student) that adds
    D x KL(full model || student) on the same weights, the full model's side
    held fixed."""
    L = model.c.n_layers
    keep = layer_keep(a, L, xy.shape[0], step, device)
    student_keep, keep = (keep, None) if a.distill > 0 else (None, keep)
    exits = [i for i in range(a.exit_from, L - 1) if (i + step) % a.exit_rotation == 0] if a.early_exit > 0 else []
    y = xy[:, 1:].reshape(-1)
    w = torch.ones_like(y, dtype=torch.float32) if tweight is None else tweight.reshape(-1).float()
    w = w / w.sum().clamp(min=1e-6)  # a micro-batch with no counted target adds 0, not NaN

    def rows(lg):
        return lg.float().reshape(-1, lg.shape[-1])

    def ce(r):
        return (F.cross_entropy(r, y, reduction="none") * w).sum()
    logits, hs = model(xy[:, :-1], keep=keep, return_hidden=True)
    full = rows(logits)
    loss = ce(full)
    if exits:
        ew = [i / (L - 1) for i in exits]
        ex = sum(wi * ce(rows(model.exit_logits(hs[i + 1]))) for i, wi in zip(exits, ew))
        loss = loss + a.early_exit * ex / sum(ew)
    if student_keep is not None:
        on = w > 0
        teacher = F.log_softmax(full.detach()[on], -1)
        student = F.log_softmax(rows(model(xy[:, :-1], keep=student_keep))[on], -1)
        kl = F.kl_div(student, teacher, log_target=True, reduction="none").sum(-1)
        loss = loss + a.distill * (kl * w[on]).sum()
    return loss


@torch.no_grad()
def eval_heldout(model, held, seq, nwin, device="cpu"):
    model.eval()
    n = (len(held) - 1) // seq
    idx = np.linspace(0, n - 1, min(nwin, n)).astype(int)
    tot, cnt = 0.0, 0
    for j in range(0, len(idx), 8):
        xs = [held[i * seq:(i * seq) + seq + 1].astype(np.int64) for i in idx[j:j + 8]]
        xy = torch.from_numpy(np.stack(xs)).to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                               xy[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += xy[:, 1:].numel()
    model.train()
    return tot / cnt


@torch.no_grad()
def eval_copy(model, device="cpu"):
    """Induction check: top-1 accuracy on the second copy of 8 fixed random
    sequences (40 tokens, fewer in a short context) written twice; about 0
    until the model can copy."""
    model.eval()
    n = min(40, model.c.max_seq_len // 2)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(FIRST_TEXT_TOKEN, model.c.vocab_size, (8, n), generator=g)
    xy = torch.cat([x, x], 1).to(device)
    logits = model(xy[:, :-1])
    acc = (logits[:, n:].argmax(-1) == xy[:, n + 1:]).float().mean().item()
    model.train()
    return acc


# glibc returns large freed blocks to the OS and this VM makes first-touch page
# faults very slow (observed 10x slowdowns); keep freed memory in the heap.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "100000000000",
              "MALLOC_TOP_PAD_": "1000000000"}


def main():
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        env = dict(os.environ, **MALLOC_ENV)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    a = get_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if device == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.use_deterministic_algorithms(True, warn_only=True)
    os.makedirs(a.ckpt_dir, exist_ok=True)
    data_dir = a.data_dir or os.path.join(a.ckpt_dir, "data")
    data = read_tokens(data_dir, "train.bin")
    held = np.asarray(read_tokens(data_dir, "heldout.bin"))
    aweight = None
    if a.answer_loss:
        meta = json.load(open(os.path.join(data_dir, "meta.json")))
        if "assistant_header" not in meta:
            sys.exit(f"train.py: --answer-loss: {data_dir}/meta.json has no assistant_header"
                     " (make_data.py writes it since 2026-12-07)")
        aweight = turn_weights(answer_mask(data, meta["assistant_header"], meta["im_end"]), a.turn_weight)
        print(f"--answer-loss: {(aweight > 0).mean():.3f} of the targets count", flush=True)

    ck_path = latest_checkpoint(a.ckpt_dir)
    if ck_path:
        ck = torch.load(ck_path, map_location="cpu")
        cfg = Config(**ck["config"])
        model = Llama(cfg)
        model.load_state_dict(ck["model"])
        state = ck["state"]
        print(f"resumed from {ck_path}: step {state['step']} tokens {state['tokens']}"
              f" train_seconds {state['train_seconds']:.0f}", flush=True)
    elif a.init_from:
        ck = torch.load(a.init_from, map_location="cpu")
        cfg = Config(**ck["config"])
        cfg.max_seq_len = max(cfg.max_seq_len, a.seq)  # a context-extension phase
        model = Llama(cfg)
        model.load_state_dict(ck["model"])
        tokens = int(ck["state"]["tokens"])
        state = {"step": int(ck["state"]["step"]), "tokens": tokens,
                 "train_seconds": 60.0 * a.init_minutes, "pos": tokens,
                 "phase_start": {"tokens": tokens, "train_seconds": 60.0 * a.init_minutes}}
        print(f"continuation phase from {a.init_from}: step {state['step']} tokens {tokens}"
              f" minutes {a.init_minutes:.1f}", flush=True)
        ck = None
    else:
        vocab = a.vocab
        if not vocab:
            import sentencepiece as spm
            here = os.path.dirname(os.path.abspath(__file__))
            vocab = spm.SentencePieceProcessor(
                model_file=os.path.join(here, "..", "..", "..", "models", "tokenizer.model")).get_piece_size()
        cfg = Config(vocab_size=vocab, dim=a.dim, n_layers=a.layers, n_heads=a.heads,
                     n_kv_heads=a.kv_heads, ffn_dim=a.ffn, max_seq_len=a.seq)
        model = Llama(cfg)
        state = {"step": 0, "tokens": 0, "train_seconds": 0.0, "pos": 0}
        ck = None
    if a.dropout_range and a.dropout_range[1] >= cfg.n_layers:
        sys.exit(f"train.py: --dropout-layers {a.dropout_layers}: the model has layers 0-{cfg.n_layers - 1}")
    model.to(device)
    print(f"config {cfg.to_dict()}  params {n_params(model)/1e6:.3f} M  data {len(data)} tokens"
          f"  device {device}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    if ck is not None:
        opt.load_state_dict(ck["opt"])
        del ck

    csv_path = os.path.join(a.ckpt_dir, "loss.csv")
    new_csv = not os.path.exists(csv_path)
    fcsv = open(csv_path, "a", newline="")
    w = csv.writer(fcsv)
    if new_csv:
        w.writerow(["step", "tokens", "train_seconds", "lr", "train_loss", "heldout_loss",
                    "tok_per_s", "copy_acc"])

    seq, B, mb = a.seq, a.batch, a.micro
    assert B % mb == 0
    step_tokens = B * seq
    last_ck = time.time()
    win_t, win_tok, win_loss, win_n = time.time(), 0, 0.0, 0
    model.train()

    # the schedule runs over the current phase: from phase_start (0 for a fresh run) to the budgets
    start = state.get("phase_start", {"tokens": 0, "train_seconds": 0.0})

    def progress():
        return max((state["tokens"] - start["tokens"]) / max(1.0, a.max_tokens - start["tokens"]),
                   (state["train_seconds"] - start["train_seconds"])
                   / max(1.0, 60 * a.max_minutes - start["train_seconds"]))

    while progress() < 1.0:
        t0 = time.time()
        lr = lr_at(progress(), a)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        tot_loss = 0.0
        rng = np.random.default_rng([a.seed, state["step"]])
        for m0 in range(0, B, mb):
            xs, ms = [], []
            for _ in range(mb):
                if a.induction > 0 and rng.random() < a.induction:
                    x, m = repeat_sequence(data, seq, cfg.vocab_size, rng)
                    xs.append(x)
                    ms.append(m)
                    continue
                p = state["pos"]
                if p + seq + 1 > len(data):
                    p = 0
                xs.append(np.asarray(data[p:p + seq + 1], dtype=np.int64))
                ms.append(aweight[p + 1:p + seq + 1] if aweight is not None else np.ones(seq, dtype=np.float32))
                state["pos"] = p + seq
            xy = torch.from_numpy(np.stack(xs)).to(device)
            tweight = (torch.from_numpy(np.stack(ms).astype(np.float32)).to(device)
                       if a.induction > 0 or aweight is not None else None)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = skip_loss(model, xy, a, state["step"] * (B // mb) + m0 // mb, device, tweight)
            (loss * (mb / B)).backward()
            tot_loss += loss.item() * mb / B
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        dt = time.time() - t0
        state["step"] += 1
        state["tokens"] += step_tokens
        state["train_seconds"] += dt
        win_tok += step_tokens
        win_loss += tot_loss
        win_n += 1
        if state["step"] % a.eval_every == 0 or state["step"] == 1 or progress() >= 1.0:
            tps = win_tok / max(1e-9, time.time() - win_t)
            hl = eval_heldout(model, held, seq, a.eval_windows, device)
            cp = eval_copy(model, device)
            tl = win_loss / win_n
            w.writerow([state["step"], state["tokens"], f"{state['train_seconds']:.1f}",
                        f"{lr:.3e}", f"{tl:.4f}", f"{hl:.4f}", f"{tps:.0f}", f"{cp:.3f}"])
            fcsv.flush()
            print(f"step {state['step']:5d} tok {state['tokens']/1e6:7.2f}M "
                  f"t {state['train_seconds']/60:6.1f}min lr {lr:.2e} train {tl:.4f} "
                  f"heldout {hl:.4f} copy {cp:.2f} {tps:.0f} tok/s progress {progress():.3f}", flush=True)
            win_t, win_tok, win_loss, win_n = time.time(), 0, 0.0, 0
            if 0 < a.until_copy <= cp:
                print(f"copy accuracy {cp:.2f} reached --until-copy {a.until_copy}", flush=True)
                break
        elif state["step"] % 10 == 0:
            print(f"step {state['step']:5d} loss {tot_loss:.4f} {step_tokens/dt:.0f} tok/s",
                  flush=True)
        if time.time() - last_ck > 60 * a.ckpt_minutes:
            save(os.path.join(a.ckpt_dir, f"ckpt_{state['step']:07d}.pt"), model, opt, state,
                 cfg, a)
            last_ck = time.time()
            print(f"checkpoint at step {state['step']}", flush=True)
    save(os.path.join(a.ckpt_dir, f"ckpt_{state['step']:07d}.pt"), model, opt, state, cfg, a)
    print(f"done: step {state['step']} tokens {state['tokens']} "
          f"train_minutes {state['train_seconds']/60:.1f}", flush=True)


if __name__ == "__main__":
    main()
