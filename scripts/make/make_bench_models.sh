#!/bin/bash
# Generates the synthetic bench models into bench/models/ (git-ignored) when
# they are missing: a ~1B shape and a 32-layer shape, each in F32, F16, Q8_0,
# Q4_0 and Q4_K. Random weights; only their shapes and types matter for speed.
#   scripts/make/make_bench_models.sh [TYPE...]      (default: all five types)
set -eu
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-/usr/bin/python3}"
DIR="${BENCH_MODELS:-bench/models}"
mkdir -p "$DIR"
types=("$@")
[ ${#types[@]} -eq 0 ] && types=(F32 F16 Q8_0 Q4_0 Q4_K)
# name: make_synthetic arguments (2816 = 11 x 256, so K-quants fill whole blocks)
declare -A SHAPES=(
    [1b]="--dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32000 --ctx 4096"
    [l32]="--dim 1024 --layers 32 --heads 16 --kv-heads 8 --ffn 2816 --vocab 32000 --ctx 4096"
)
for shape in 1b l32; do
    for t in "${types[@]}"; do
        out="$DIR/bench-$shape-$t.gguf"
        [ -s "$out" ] && continue
        echo "make_bench_models: writing $out" >&2
        # shellcheck disable=SC2086
        nice -n 5 "$PYTHON" scripts/model/make_synthetic.py -o "$out.tmp" --type "$t" ${SHAPES[$shape]} --seed 1 \
            --name "bench-$shape-$t"
        mv "$out.tmp" "$out"
    done
done
