#!/usr/bin/python3
"""Plot <ckpt-dir>/loss.csv (train + held-out loss vs tokens) to models/loss.png.

  /usr/bin/python3 scripts/model/train/plot_loss.py [--csv /work/ilpd-train/loss.csv] [--out models/loss.png]
"""
import argparse
import csv
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default="/work/ilpd-train/loss.csv")
    ap.add_argument("--out", default=os.path.join(REPO, "models", "loss.png"))
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    # a resumed run may repeat steps: keep the last row per step
    by_step = {int(r["step"]): r for r in rows}
    rows = [by_step[s] for s in sorted(by_step)]
    tok = [int(r["tokens"]) / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.plot(tok, [float(r["train_loss"]) for r in rows], label="train (window mean)")
    ax.plot(tok, [float(r["heldout_loss"]) for r in rows], label="held-out")
    ax.set_xlabel("training tokens (M)")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(0, max(4.0, min(8.5, float(rows[0]["heldout_loss"]) if rows else 4)))
    ax.set_title("ilpd-demo training loss")
    ax.grid(alpha=0.3)
    ax.legend()
    ax2 = ax.twinx()
    ax2.plot(tok, [float(r["lr"]) for r in rows], color="grey", lw=0.8, ls=":", label="lr")
    ax2.set_ylabel("learning rate", color="grey")
    fig.tight_layout()
    fig.savefig(a.out)
    print(f"wrote {a.out} ({len(rows)} points, last: step {rows[-1]['step']}, "
          f"train {rows[-1]['train_loss']}, held-out {rows[-1]['heldout_loss']})")


if __name__ == "__main__":
    main()
