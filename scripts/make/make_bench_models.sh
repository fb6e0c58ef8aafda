#!/bin/bash
# Generates the synthetic bench models into bench/models/ (git-ignored) when
# they are missing: a ~1B shape and a 32-layer shape, each in F32, F16, Q8_0,
# Q4_0 and Q4_K. Random weights; only their shapes and types matter for speed.
#   scripts/make/make_bench_models.sh [TYPE...]      (default: all five types;
#   any type scripts/model/make_synthetic.py writes: Q4_1, Q5_K, IQ4_XS, ...)
# With LLAMA_QUANTIZE=path/to/llama-quantize (llama.cpp, built outside this
# repository), also the files users download, made from the 32-layer F16
# model by llama.cpp's own presets: bench-l32-PRESET.gguf for each PRESET of
# QUANT_PRESETS (default: the mixes Q4_K_M, Q5_K_M, Q3_K_M and the pure
# Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, IQ4_NL, IQ4_XS, BF16; note that
# llama-quantize keeps some tensors in other types, e.g. a Q6_K output head).
set -eu
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-/usr/bin/python3}"
DIR="${BENCH_MODELS:-bench/models}"
LLAMA_QUANTIZE="${LLAMA_QUANTIZE:-}"
QUANT_PRESETS="${QUANT_PRESETS:-Q4_K_M Q5_K_M Q6_K Q8_0 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_M IQ4_NL IQ4_XS}"
mkdir -p "$DIR"
types=("$@")
[ ${#types[@]} -eq 0 ] && types=(F32 F16 Q8_0 Q4_0 Q4_K)
[ -n "$LLAMA_QUANTIZE" ] && types+=(F16)
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
[ -n "$LLAMA_QUANTIZE" ] || exit 0
for q in $QUANT_PRESETS; do
    out="$DIR/bench-l32-$q.gguf"
    [ -s "$out" ] && continue
    echo "make_bench_models: writing $out (llama-quantize $q)" >&2
    nice -n 5 "$LLAMA_QUANTIZE" "$DIR/bench-l32-F16.gguf" "$out.tmp" "$q" 2 > "$out.log" 2>&1 ||
        { echo "make_bench_models: llama-quantize $q failed (see $out.log)" >&2; rm -f "$out.tmp"; continue; }
    mv "$out.tmp" "$out"
    rm -f "$out.log"
done
