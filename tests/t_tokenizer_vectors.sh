#!/bin/sh
# Llama 3 byte-level BPE against llama.cpp's test vectors: turns the Llama 3
# tokenizer.json from $SHARED into a vocabulary GGUF with
# scripts/model/tokenizer_to_gguf.py, then runs the unit program
# test_tokenizer_vectors with LLAMA3_VOCAB set to it. (Run without that
# variable, by tests/t_unit.sh, the same program checks the Llama 2 vectors.)
# Environment: SHARED, PYTHON, UNIT_DIR (default build/rel/tests), TESTS_TMP.
cd "$(dirname "$0")/.." || exit 1
SHARED="${SHARED:-../shared}"
PYTHON="${PYTHON:-/usr/bin/python3}"
dir="$SHARED/models/tokenizers/llama3-bpe"
if [ ! -f "$dir/tokenizer.json" ] || [ ! -f "$dir/ggml-vocab-llama-bpe.gguf.inp" ]; then
    echo "skip - Llama 3 tokenizer vectors: ../shared absent"
    exit 0
fi
prog="${UNIT_DIR:-build/rel/tests}/test_tokenizer_vectors"
if [ ! -x "$prog" ]; then
    echo "not ok - Llama 3 tokenizer vectors: $prog is not built (make $prog)"
    exit 1
fi
work=$(mktemp -d "${TESTS_TMP:-/tmp}/llama3-vocab.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
if "$PYTHON" scripts/model/tokenizer_to_gguf.py "$dir/tokenizer.json" --config "$dir/tokenizer_config.json" \
        -o "$work/llama3-vocab.gguf" 2>"$work/log"; then
    echo "ok - scripts/model/tokenizer_to_gguf.py converts the Llama 3 tokenizer.json"
else
    echo "not ok - scripts/model/tokenizer_to_gguf.py converts the Llama 3 tokenizer.json: $(tail -n 1 "$work/log")"
    exit 1
fi
LLAMA3_VOCAB="$work/llama3-vocab.gguf" "$prog"
