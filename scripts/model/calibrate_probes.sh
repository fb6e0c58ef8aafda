#!/bin/sh
# Re-creates the committed probes (config/probes/) and their evaluation:
#   scripts/model/calibrate_probes.sh [SHARED_DIR]
# stories260K: calibrated on TinyStories training openings, evaluated on the
# validation head. The demo model: calibrated on one half of its held-out task
# prompts, evaluated on the other half, with labels that keep whole answers
# identical (--exact-share: JSON answers must not change). Deterministic (seed 1).
# The evaluations measure the probe's masks alone (--gate 0); README, "Approximate
# mode's gate", has the same prompts with the gate.
set -eu
cd "$(dirname "$0")/../.."
SHARED=${1:-../shared}
OUT=${OUT:-build/probe-data}
ILPD=${ILPD:-./ilpd}
mkdir -p "$OUT/stories" "$OUT/demo" config/probes

if [ -f "$SHARED/models/stories260K/stories260K.gguf" ]; then
    /usr/bin/python3 scripts/model/probe_data.py stories "$SHARED" "$OUT/stories"
    "$ILPD" calibrate -m "$SHARED/models/stories260K/stories260K.gguf" --data "$OUT/stories/calibrate.jsonl" \
        -o config/probes/stories260K.json --target-agreement 0.99 -n 32 --seed 1
    "$ILPD" eval -m "$SHARED/models/stories260K/stories260K.gguf" --data "$OUT/stories/eval.jsonl" \
        --probe config/probes/stories260K.json -n 32 --gate 0 --json \
        --ppl-text "$SHARED/data/tinystories/tinystories_val_head.txt" > "$OUT/stories/eval.json"
fi
if [ -f models/ilpd-demo-F16.gguf ]; then
    /usr/bin/python3 scripts/model/probe_data.py demo "$OUT/demo"
    "$ILPD" calibrate -m models/ilpd-demo-F16.gguf --data "$OUT/demo/calibrate.jsonl" \
        -o config/probes/ilpd-demo-F16.json --target-agreement 0.99 --exact-share 0.97 -n 48 --seed 1
    # Perplexity on raw TinyStories text (no chat template), when ../shared has it.
    PPL=$SHARED/data/tinystories/tinystories_val_head.txt
    "$ILPD" eval -m models/ilpd-demo-F16.gguf --data "$OUT/demo/eval.jsonl" \
        --probe config/probes/ilpd-demo-F16.json -n 48 --gate 0 --json \
        $( [ -f "$PPL" ] && echo --ppl-text "$PPL" ) > "$OUT/demo/eval.json"
    /usr/bin/python3 scripts/model/plot_eval.py "$OUT/demo/eval.json" "$OUT/demo/eval.png" ||
        echo "calibrate_probes.sh: plotting to $OUT/demo/eval.png failed (python3-matplotlib?)" >&2
fi
