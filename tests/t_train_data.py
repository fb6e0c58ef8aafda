#!/usr/bin/python3
"""The demo model's training data helpers (scripts/model/train/).

1. chat.answer_mask marks exactly the assistant turns of a token stream
   (after the header, up to and including <|im_end|>), which is what
   train.py --answer-loss trains on: multi-turn documents, a stream that
   starts or ends inside a turn, no turn at all;
   chat.turn_weights spreads a weight over each answer's tokens
   (train.py --turn-weight);
2. tasks_v2's classify phrase bank trains only: the held-out split draws the
   same examples whatever the bank's share, no bank clause is a held-out
   template and none uses a word that only the held-out templates use, so
   the held-out templates stay unseen;
3. make_data.py --mix changes only the weights it names and refuses a task
   it does not know or a weight that is not a number >= 0;
4. where PyTorch imports: train.py --distill adds nothing when no layer is
   dropped and a positive KL term when layers are; --dropout-layers A-B
   drops only layers A..B, the last with --layer-dropout's rate, and with
   --dropout-nested the last k of them (k uniform) in each sequence; the flags
   that would do nothing (--turn-weight without --answer-loss, --distill
   without --layer-dropout) and a bad range or nested rate are refused;
   model.forward_cached with layers skipped (the first among them, whose
   cache stays empty) gives the logits of the full recompute with the same
   layers skipped, for the prompt and for each token after it
   (redundancy.py --nested decodes that way).
"""
import argparse
import contextlib
import io
import os
import random
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "model", "train"))
try:
    import numpy as np  # noqa: E402
    import tasks_v2  # noqa: E402
    from chat import answer_mask, turn_weights  # noqa: E402
    import make_data  # noqa: E402
except ImportError as e:  # make_data needs numpy
    print(f"skip - the training scripts do not import here: {e}")
    sys.exit(0)

failed = 0


def check(name, ok, why=""):
    global failed
    print(f"ok - {name}" if ok else f"not ok - {name}: {why}")
    failed += not ok


H, E = [3, 313, 15], 4  # "<|im_start|>assistant\n", "<|im_end|>"
U = [3, 311, 15]       # "<|im_start|>user\n"
cases = {
    # BOS, system/user turn, assistant answer 8 8, im_end; a second document
    "two documents": ([1] + U + [7, 7, E] + H + [8, 8, E, 1] + U + [6, E] + H + [5, E],
                      [0] * 7 + [0, 0, 0, 1, 1, 1, 0] + [0] * 5 + [0, 0, 0, 1, 1]),
    "multi-turn": (U + [7, E] + H + [8, E] + U + [6, E] + H + [5, 5, E],
                   [0] * 5 + [0, 0, 0, 1, 1] + [0] * 5 + [0, 0, 0, 1, 1, 1]),
    "cut off at the end": (U + [7, E] + H + [8, 8], [0] * 5 + [0, 0, 0, 1, 1]),
    "starts inside an answer": ([8, 8, E] + H + [9, E], [0, 0, 0, 0, 0, 0, 1, 1]),
    "a header alone at the end": (U + [7, E] + H, [0] * 8),
    "a user turn is not an answer": (U + [7, 7, E, 1] + U + [6, E], [0] * 12),
    "empty": ([], []),
}
for name, (toks, want) in cases.items():
    got = answer_mask(toks, H, E).astype(int).tolist()
    check(f"answer_mask: {name}", got == want, f"{got} != {want}")

tw = turn_weights(np.array([0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1], dtype=bool), 1.0).tolist()
check("turn_weights 1: every answer weighs 1 in all", tw == [0, .25, .25, .25, .25, 0, 0, 1, 0, .5, .5], str(tw))
tw = turn_weights(np.array([1, 1, 1, 1, 0, 1], dtype=bool), 0.5).tolist()
check("turn_weights 0.5: len ** -0.5 a token", tw == [.5, .5, .5, .5, 0, 1], str(tw))
check("turn_weights 0: the mask itself", turn_weights(np.array([0, 1, 1], dtype=bool), 0.0).tolist() == [0, 1, 1])
check("turn_weights: no answer", turn_weights(np.zeros(3, dtype=bool), 1.0).tolist() == [0, 0, 0]
      and turn_weights(np.zeros(0, dtype=bool), 1.0).tolist() == [])


def held_classify(share, n=300):
    tasks_v2.CLASSIFY_BANK_SHARE = share
    rng = random.Random(7)
    return [tasks_v2.gen_classify(rng, "held") for _ in range(n)]


saved = tasks_v2.CLASSIFY_BANK_SHARE
same = held_classify(0.0) == held_classify(1.0)
tasks_v2.CLASSIFY_BANK_SHARE = 1.0
rng = random.Random(7)
train = [tasks_v2.gen_classify(rng, "train") for _ in range(400)]
tasks_v2.CLASSIFY_BANK_SHARE = saved
check("classify bank: the held-out split does not depend on it", same)
check("classify bank: every category is drawn in training",
      {ex["meta"]["category"] for ex in train} == set(tasks_v2.CLASSIFY_BANK), str({ex["meta"]["category"] for ex in train}))
held_t = {t.lower().rstrip(".?!") for _, _, t in tasks_v2.held_split(tasks_v2.CLASSIFY_T2, "held")}
clash = [c for v in tasks_v2.CLASSIFY_BANK.values() for c in v if c.lower() in held_t]
check("classify bank: no clause is a held-out template", not clash, str(clash))
# The words the held-out templates use and no training template, context
# sentence or bank clause did when the bank was last widened (2026-12-07):
# the bank must not bring them into training.
HELD_ONLY = {"apartment", "are", "check", "dimensions", "drop", "expected", "handed", "hey", "it's", "lost",
             "nothing", "off", "product", "recognize", "recommend", "site", "small", "statement", "status",
             "stuff", "swap", "that", "through", "unpaid", "usually", "watts", "where's", "which"}
used = sorted({w for v in tasks_v2.CLASSIFY_BANK.values() for c in v
               for w in re.findall(r"[a-z']+", re.sub(r"\{\w+\}", " ", c.lower())) if w in HELD_ONLY})
check("classify bank: no word only the held-out templates use", not used, str(used))

mix = make_data.parse_mix("yesno=6,copy=0")
check("--mix: names replaced, the rest kept",
      mix == dict(make_data.V2_MIX, yesno=6.0, copy=0.0) and make_data.parse_mix("") == make_data.V2_MIX, str(mix))
for bad in ("poems=1", "yesno", "yesno=-1", "yesno=lots"):
    try:
        make_data.parse_mix(bad)
        refused = ""
    except SystemExit as e:
        refused = str(e)
    check(f"--mix {bad}: refused, naming the item", repr(bad) in refused, refused or "accepted")


def distill_terms():
    """train.skip_loss on a 4-layer model: (loss without dropping, loss with
    --distill 1 but no layer dropped, loss with the later layers dropped)."""
    torch.manual_seed(0)
    model = Llama(Config(vocab_size=300, dim=32, n_layers=4, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16))
    xy = torch.randint(0, 300, (2, 17))
    base = dict(seed=0, early_exit=0.0, exit_from=1, exit_rotation=4, layer_dropout=0.0, distill=0.0,
                dropout_range=None, dropout_nested=False)
    out = []
    for kw in ({}, {"distill": 1.0, "layer_dropout": 1e-9}, {"distill": 1.0, "layer_dropout": 1.0}):
        a = argparse.Namespace(**dict(base, **kw))
        out.append(float(train.skip_loss(model, xy, a, 0, "cpu")))
    return out


try:
    import torch
    import train
    from model import Config, Llama
    full, none_dropped, dropped = distill_terms()
    check("--distill: no layer dropped adds nothing", abs(none_dropped - full) < 1e-6, f"{none_dropped} != {full}")
    check("--distill: dropped layers add a KL term", dropped > full + 1e-4, f"{dropped} <= {full}")
    a = argparse.Namespace(seed=0, layer_dropout=1.0, dropout_range=(3, 14), dropout_nested=False)
    keep = train.layer_keep(a, 16, 4000, 0, "cpu")
    kept = keep.float().mean(1).tolist()
    check("--dropout-layers 3-14: layers 0-2 and 15 always run", all(kept[i] == 1.0 for i in (0, 1, 2, 15)), str(kept))
    check("--dropout-layers 3-14: layer 14 drops at the full rate, 3 at 1/12",
          kept[14] == 0.0 and abs(kept[3] - 11 / 12) < 0.02, f"{kept[3]:.3f} {kept[14]:.3f}")
    a = argparse.Namespace(seed=0, layer_dropout=0.5, dropout_range=(3, 14), dropout_nested=True)
    keep = train.layer_keep(a, 16, 4000, 0, "cpu").long()
    n_run = keep[3:15].sum(0)  # candidate layers each sequence runs
    nested = bool((keep[3:15] == (torch.arange(3, 15)[:, None] < 3 + n_run[None, :]).long()).all())
    check("--dropout-nested: each sequence drops the last k of 3-14 and runs 0-2 and 15",
          nested and bool(keep[[0, 1, 2, 15]].all()), str(keep[:, :4].T.tolist()))
    counts = torch.bincount(12 - n_run, minlength=13).tolist()
    check("--dropout-nested 0.5: half the sequences drop nothing, k = 1..12 about equally often",
          abs(counts[0] - 2000) < 150 and all(abs(c - 2000 / 12) < 60 for c in counts[1:]), str(counts))

    from model import forward_cached
    torch.manual_seed(1)
    tiny = Llama(Config(vocab_size=300, dim=32, n_layers=4, n_heads=2, n_kv_heads=1, ffn_dim=64, max_seq_len=16)).eval()
    ids = torch.randint(0, 300, (1, 12))
    with torch.no_grad():
        caches = [dict() for _ in tiny.layers]
        steps = [forward_cached(tiny, ids[:, :9], caches, (0, 2))[0, -1]]
        steps += [forward_cached(tiny, ids[:, t:t + 1], caches, (0, 2))[0, -1] for t in range(9, 12)]
        want = tiny(ids, skip=(0, 2))[0, 8:]
        unskipped = tiny(ids)[0, 8:]
    err = max(float((got - w).abs().max()) for got, w in zip(steps, want))
    check("forward_cached, layers 0 and 2 skipped: the full recompute's logits, prompt and 3 steps after",
          err < 1e-4 and float((want - unskipped).abs().max()) > 1e-3 and not caches[0] and not caches[2],
          f"max error {err}")

    def refused(argv):
        """get_args on ARGV: its error message, or '' when accepted."""
        old, err = sys.argv, io.StringIO()
        sys.argv = ["train.py"] + argv
        try:
            with contextlib.redirect_stderr(err):
                train.get_args()
            return ""
        except SystemExit:
            return err.getvalue()
        finally:
            sys.argv = old
    for argv, word in ((["--turn-weight", "0.5"], "--answer-loss"), (["--distill", "1"], "--layer-dropout"),
                       (["--layer-dropout", "0.4", "--dropout-layers", "5-3"], "--dropout-layers 5-3:"),
                       (["--layer-dropout", "0.4", "--dropout-layers", "x"], "--dropout-layers x:"),
                       (["--dropout-nested"], "--layer-dropout"),
                       (["--dropout-nested", "--layer-dropout", "2"], "P <= 1")):
        msg = refused(argv)
        check(f"train.py {' '.join(argv)}: refused, naming {word}", word in msg, msg or "accepted")
    check("train.py --answer-loss --turn-weight 0.5 --distill 1 --layer-dropout 0.4 --dropout-layers 3-14: accepted",
          refused(["--answer-loss", "--turn-weight", "0.5", "--distill", "1", "--layer-dropout", "0.4",
                   "--dropout-layers", "3-14"]) == "")
except ImportError as e:
    print(f"skip - --distill: {e}")
print(f"{failed} failed")
sys.exit(1 if failed else 0)
