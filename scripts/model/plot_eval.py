#!/usr/bin/python3
"""Draws what `ilpd eval --json` measured: skip rate against greedy agreement,
one point per prompt, coloured by prompt class.

Usage:
  ./ilpd eval -m MODEL --data PROMPTS.jsonl --json > EVAL.json
  /usr/bin/python3 scripts/model/plot_eval.py EVAL.json OUT.png
"""
import json
import sys


def main(src, dst):
    import matplotlib  # python3-matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.load(open(src))
    rows = data["prompts"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for cls in sorted({r["class"] for r in rows}):
        pts = [r for r in rows if r["class"] == cls]
        summary = data["classes"].get(cls, {})
        label = "%s (n=%d, skip %.0f%%, agreement %.2f%%)" % (
            cls, len(pts), 100 * summary.get("skip_rate", 0), 100 * summary.get("agreement", 1))
        ax.scatter([r["layers_skipped"] for r in pts], [100 * r["agreement"] for r in pts], label=label, alpha=0.7)
    ax.set_xlabel("layers skipped by the probe")
    ax.set_ylabel("greedy token agreement with full depth (%)")
    ax.set_title("ilpd eval: layer skipping vs agreement per prompt")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip())
    main(sys.argv[1], sys.argv[2])
