#!/bin/bash
# Runs each libFuzzer harness (built by `make fuzz`) for FUZZ_SECONDS from its
# seed corpus (tests/fuzz/NAME/corpus, read only; new inputs go to
# build/fuzz/corpus/NAME) and prints one line per harness: executions, speed,
# and whether it crashed. Exits 1 when any harness crashed (the input is kept
# in build/fuzz/artifacts/).
#   scripts/make/fuzz.sh NAME...     Environment: FUZZ_DIR, FUZZ_SECONDS, SHARED, PYTHON
set -u
cd "$(dirname "$0")/../.."
FUZZ_DIR="${FUZZ_DIR:-build/fuzz}"
SECONDS_EACH="${FUZZ_SECONDS:-60}"
SHARED="${SHARED:-../shared}"
PYTHON="${PYTHON:-/usr/bin/python3}"
mkdir -p "$FUZZ_DIR/artifacts"
# The tokenizer harness fuzzes SPM (stories260K, and Llama 2 when the shared
# vocabulary is there) and, when the shared Llama 3 tokenizer is there,
# byte-level BPE converted by our own tool.
export FUZZ_SPM_GGUF="${FUZZ_SPM_GGUF:-$SHARED/models/stories260K/stories260K.gguf}"
llama2="$SHARED/models/tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf"
[ -z "${FUZZ_SPM2_GGUF:-}" ] && [ -f "$llama2" ] && export FUZZ_SPM2_GGUF="$llama2"
llama3="$SHARED/models/tokenizers/llama3-bpe"
if [ -z "${FUZZ_BPE_GGUF:-}" ] && [ -f "$llama3/tokenizer.json" ]; then
    [ -s "$FUZZ_DIR/llama3-vocab.gguf" ] || "$PYTHON" scripts/model/tokenizer_to_gguf.py "$llama3/tokenizer.json" \
        --config "$llama3/tokenizer_config.json" -o "$FUZZ_DIR/llama3-vocab.gguf" 2>/dev/null
    [ -s "$FUZZ_DIR/llama3-vocab.gguf" ] && export FUZZ_BPE_GGUF="$FUZZ_DIR/llama3-vocab.gguf"
fi
failed=0
for name in "$@"; do
    if [ "$name" = tokenizer ] && [ ! -f "$FUZZ_SPM_GGUF" ]; then
        echo "skip - fuzz $name: $FUZZ_SPM_GGUF absent"
        continue
    fi
    work="$FUZZ_DIR/corpus/$name"
    mkdir -p "$work"
    log="$FUZZ_DIR/$name.log"
    max_len=4096
    [ "$name" = gguf ] && max_len=65536
    # -timeout: an input that takes 10 s is a hang, reported like a crash.
    "$FUZZ_DIR/fuzz_$name" -max_total_time="$SECONDS_EACH" -max_len="$max_len" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$FUZZ_DIR/artifacts/$name-" "$work" "tests/fuzz/$name/corpus" >"$log" 2>&1
    rc=$?
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    speed=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log")
    if [ $rc -eq 0 ]; then
        echo "ok - fuzz $name: ${execs:-?} executions in ${SECONDS_EACH} s (${speed:-?}/s), no crash"
    else
        echo "not ok - fuzz $name: crashed (exit $rc) after ${execs:-?} executions; see $log and $FUZZ_DIR/artifacts/"
        grep -m3 -E "ERROR|runtime error|SUMMARY" "$log"
        failed=1
    fi
done
exit $failed
