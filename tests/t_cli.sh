#!/bin/bash
# Command-line behaviour that users rely on: errors are clear, exit codes right.
ILPD=${ILPD:-./ilpd}
check() { # NAME CONDITION-RESULT DETAIL
    if [ "$2" = 0 ]; then echo "ok - $1"; else echo "not ok - $1: $3"; fi
}

# Every subcommand answers --help (and -h) with its usage on stdout and status 0; no model needed.
for cmd in generate tokenize inspect logits serve bench calibrate eval; do
    for h in --help -h; do
        out=$("$ILPD" $cmd $h 2>"${TESTS_TMP:-/tmp}/cli-help.err"); rc=$?
        err=$(cat "${TESTS_TMP:-/tmp}/cli-help.err")
        [ $rc -eq 0 ] && grep -q "^usage:" <<<"$out" && grep -q "ilpd $cmd " <<<"$out" && [ -z "$err" ]
        check "ilpd $cmd $h prints its usage on stdout, exit 0" $? "exit $rc: out '$out' err '$err'"
    done
done
out=$("$ILPD" --help 2>/dev/null); rc=$?
n=$(grep -cE "^  ilpd (generate|tokenize|inspect|logits|serve|bench|calibrate|eval) " <<<"$out")
[ $rc -eq 0 ] && [ "$n" -eq 8 ]; check "ilpd --help lists every subcommand on stdout, exit 0" $? "exit $rc, $n listed: $out"
for cmd in bench calibrate eval generate; do
    out=$("$ILPD" $cmd --bogus 1 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && grep -q "'--bogus'" <<<"$out"; check "ilpd $cmd: an unknown option stays a usage error (exit 2)" $? "exit $rc: $out"
done
out=$("$ILPD" eval -m x --data y --plot out.png 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown option '--plot'" <<<"$out"; check "ilpd eval has no --plot (scripts/model/plot_eval.py draws eval --json)" $? "exit $rc: $out"

M="$SHARED/models/stories260K/stories260K.gguf"
if [ ! -f "$M" ]; then echo "skip - cli: $M absent"; exit 0; fi
long=$(printf 'Once upon a time there was a cat. %.0s' $(seq 1 40))
out=$("$ILPD" generate -m "$M" -c 64 -p "$long" -n 4 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "does not fit the context of 64 tokens" <<<"$out"; check "a prompt longer than the context is a clear error" $? "exit $rc: $out"

out=$("$ILPD" generate -m "$M" -p "Once" -n 3 --bogus 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "unknown option '--bogus'" <<<"$out"; check "an unknown option is a usage error" $? "exit $rc: $out"

out=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 40 --temp 0 --stop "Lily" 2>/dev/null); rc=$?
[ $rc -eq 0 ] && [ "$out" = ", there was a little girl named " ]; check "--stop ends the text before the stop string" $? "exit $rc: '$out'"

a=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 30 --temp 0.9 --seed 7 2>/dev/null)
b=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 30 --temp 0.9 --seed 7 2>/dev/null)
c=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 30 --temp 0.9 --seed 8 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]; check "sampling is reproducible for a seed and differs across seeds" $? "'$a' / '$b' / '$c'"

out=$("$ILPD" inspect -m "$M" 2>/dev/null); rc=$?
[ $rc -eq 0 ] && grep -q "architecture:  llama" <<<"$out" && grep -q "layers:        5" <<<"$out" && grep -q "tokenizer:     llama" <<<"$out" \
  && grep -q "chat template: plain" <<<"$out" && grep -q "F32 x" <<<"$out"
check "inspect prints architecture, shapes, tensor types, tokenizer and template" $? "$out"

# A mask given as base64: all ones (full depth) gives the golden text; skipping layer 2 changes it.
full=$(printf '\1\1\1\1\1' | cat - <(head -c 27 /dev/zero) | base64 -w0)
skip=$(printf '\1\1\0\1\1' | cat - <(head -c 27 /dev/zero) | base64 -w0)
a=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 20 --temp 0 2>/dev/null)
b=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 20 --temp 0 --layer-mask "$full" 2>/dev/null)
c=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 20 --temp 0 --layer-mask "$skip" --skip-mode approximate --skip-gate 0 2>/dev/null)
[ "$a" = "$b" ] && [ "$a" != "$c" ] && [ -n "$c" ]; check "--layer-mask: full mask = default, a skipped layer changes the output (approximate, no gate)" $? "'$a' / '$b' / '$c'"
g=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 20 --temp 0 --layer-mask "$skip" --skip-mode approximate --skip-gate 100 2>"${TESTS_TMP:-/tmp}/cli-gate.err")
[ "$g" = "$a" ] && grep -q "gated at 0" "${TESTS_TMP:-/tmp}/cli-gate.err"; check "--skip-gate 100: the gate sends the masked answer to full depth at its first token (info: gated at 0)" $? "'$g' / $(tail -c 300 "${TESTS_TMP:-/tmp}/cli-gate.err")"
d=$("$ILPD" generate -m "$M" -p "Once upon a time" -n 20 --temp 0 --layer-mask "$skip" 2>"${TESTS_TMP:-/tmp}/cli-lossless.err")
[ "$a" = "$d" ] && grep -q "mode lossless, draft [0-9]*/[0-9]* in" "${TESTS_TMP:-/tmp}/cli-lossless.err"
check "--skip-mode lossless (the default): the skipped layer only drafts, the output stays the full model's; info: counts the drafts" $? "'$a' / '$d' / $(cat "${TESTS_TMP:-/tmp}/cli-lossless.err")"
out=$("$ILPD" generate -m "$M" -p "Once" -n 2 --skip-mode fast 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "skip-mode" <<<"$out"; check "an unknown --skip-mode is refused" $? "exit $rc: $out"
out=$("$ILPD" generate -m "$M" -p "Once" -n 2 --layer-mask "not-base64!" 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "layer-mask" <<<"$out"; check "an invalid --layer-mask is refused" $? "exit $rc: $out"
exit 0
