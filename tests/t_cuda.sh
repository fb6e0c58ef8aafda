#!/bin/sh
# The CUDA backend's kernels on the emulated GPU against the CPU backend, on
# synthetic models of every weight type (scripts/model/make_synthetic.py): the
# five architectures (qwen2 has q/k/v biases and NEOX rope; qwen3 per-head
# Q/K norms and here a head size of 96, not dim/heads; YaRN scales the rope;
# gemma3 a scaled embedding, post-norms, GeGLU and here a sliding window of 4
# on every other layer; phi3 fused QKV and gate-up tensors, LongRoPE and
# here 48 of 64 dimensions rotated),
# grouped-query attention, a tied head, row widths that fill whole K-quant blocks. For
# each: logits of a prompt through the cuBLAS path and decode steps through
# the own kernels within the tolerance test_cuda.c states, an F16 KV cache,
# a masked run equal to the masked CPU run, and that a skipped layer
# launches no kernel and gets no KV cache. (tests/t_unit.sh runs the same
# program without models: the operations one by one and stories260K.)
# On a machine with a GPU, test_cuda runs the same model checks on it.
# Environment: PYTHON, UNIT_DIR (default build/rel/tests), TESTS_TMP.
cd "$(dirname "$0")/.." || exit 1
PYTHON="${PYTHON:-/usr/bin/python3}"
dir="${UNIT_DIR:-build/rel/tests}"
prog="$dir/test_cuda_emu"
if [ ! -x "$prog" ]; then
    echo "not ok - CUDA emulation on synthetic models: $prog is not built (make $prog)"
    exit 1
fi
work=$(mktemp -d "${TESTS_TMP:-/tmp}/cuda-models.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
shape="--layers 3 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --vocab 320 --ctx 256 --seed 7"
models=""
for spec in llama:F32 llama:F16 llama:BF16 llama:Q8_0 llama:Q4_0 llama:Q4_K llama:Q6_K qwen2:Q8_0 qwen2:F16:tied \
        qwen3:Q8_0 qwen3:F16:tied qwen3:Q8_0:yarn gemma3:Q8_0:swa gemma3:F16:tied \
        phi3:Q8_0 phi3:F16:longrope; do
    arch=${spec%%:*}
    rest=${spec#*:}
    type=${rest%%:*}
    extra=""
    case "$rest" in
    *:tied) extra="--tied" ;;
    *:yarn) extra="--rope-scaling yarn --rope-orig-ctx 64" ;;
    *:swa) extra="--window 4 --swa-pattern 2" ;;
    *:longrope) extra="--longrope --rope-orig-ctx 64 --rot 48" ;;
    esac
    [ "$arch" = qwen3 ] && extra="$extra --head-dim 96"
    out="$work/synthetic-$arch-$type$(echo "${rest#"$type"}" | tr : -).gguf"
    # shellcheck disable=SC2086
    if ! "$PYTHON" scripts/model/make_synthetic.py -o "$out" --type "$type" --arch "$arch" $shape $extra 2>"$work/log"; then
        echo "not ok - make_synthetic.py $spec: $(tail -n 1 "$work/log")"
        exit 1
    fi
    models="$models${models:+,}$out"
done
echo "ok - synthetic models written: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K (llama), Q8_0 and tied F16 (qwen2, qwen3, gemma3), Q8_0 with YaRN (qwen3), Q8_0 with a sliding window (gemma3), Q8_0 and F16 with LongRoPE and partial rotary (phi3)"
"$prog" --models "$models"
if [ -x "$dir/test_cuda" ]; then
    # a real GPU: the same checks on the device; without one it only reports the skip
    "$dir/test_cuda" --models "$models" | grep -v '^ok - cuda: kb_cuda_create fails cleanly'
fi
