#!/bin/sh
# Runs every C unit test program built from tests/unit/*.c, and test_kernels'
# backend tests again under each lower ILPD_CPU_ISA cap.
# First writes the small model some of them run on (scripts/model/make_synthetic.py,
# the shape of stories260K: 5 layers, dim 64, 8 heads, 4 KV heads, ffn 172,
# vocab 512), F32 and F16, so that they need nothing from ../shared:
# UNIT_MODEL and UNIT_MODEL_F16 name them.
# Environment: UNIT_DIR (the programs), PYTHON, TESTS_TMP.
PYTHON="${PYTHON:-/usr/bin/python3}"
work=$(mktemp -d "${TESTS_TMP:-/tmp}/unit-models.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
status=0
shape="--layers 5 --dim 64 --heads 8 --kv-heads 4 --ffn 172 --vocab 512 --ctx 512 --seed 260 --name synthetic-5l"
for type in F32 F16; do
    # shellcheck disable=SC2086
    if "$PYTHON" scripts/model/make_synthetic.py -o "$work/unit-$type.gguf" --type "$type" $shape 2>"$work/log"; then
        [ "$type" = F32 ] && export UNIT_MODEL="$work/unit-$type.gguf"
        [ "$type" = F16 ] && export UNIT_MODEL_F16="$work/unit-$type.gguf"
    else
        echo "not ok - make_synthetic.py writes the unit tests' $type model: $(tail -n 1 "$work/log")"
        status=1
    fi
done
for t in "$UNIT_DIR"/*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    case "$t" in *.d) continue ;; esac
    "$t" || status=1
done
# the backend's kernels again on the lower instruction sets (cpu_kern_best picks the highest)
for isa in avx2 avxvnni scalar; do
    ILPD_CPU_ISA=$isa "$UNIT_DIR/test_kernels" --backend || status=1
done
exit $status
