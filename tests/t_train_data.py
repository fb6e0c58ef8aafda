#!/usr/bin/python3
"""The demo model's training data helpers (scripts/model/train/).

1. chat.answer_mask marks exactly the assistant turns of a token stream
   (after the header, up to and including <|im_end|>), which is what
   train.py --answer-loss trains on: multi-turn documents, a stream that
   starts or ends inside a turn, no turn at all;
2. tasks_v2's classify phrase bank trains only: the held-out split draws the
   same examples whatever the bank's share, and no bank clause is a held-out
   template, so the held-out templates stay unseen.
"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "model", "train"))
try:
    import numpy as np  # noqa: E402
    import tasks_v2  # noqa: E402
    from chat import answer_mask  # noqa: E402
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
print(f"{failed} failed")
sys.exit(1 if failed else 0)
