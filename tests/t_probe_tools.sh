#!/bin/bash
# `ilpd calibrate` and `ilpd eval` on the demo model: a calibration is
# deterministic for a seed, writes a probe bound to the model within the
# parameter budget, keeps every class of its calibration split at the
# quality asked for, and eval reports per prompt and per class.
ILPD=${ILPD:-./ilpd}
PYTHON=${PYTHON:-/usr/bin/python3}
M=models/ilpd-demo-F16.gguf
T=${TESTS_TMP:-/tmp}/probe-tools
check() { # NAME CONDITION-RESULT DETAIL
    if [ "$2" = 0 ]; then echo "ok - $1"; else echo "not ok - $1: $3"; fi
}
mkdir -p "$T"
"$PYTHON" scripts/model/probe_data.py demo "$T" >/dev/null || { echo "not ok - scripts/model/probe_data.py demo failed"; exit 0; }
# 2 prompts of each class, 8 answer tokens and a narrow search keep the test short (ASan runs it too).
for c in classify yesno story; do grep "\"class\": \"$c\"" "$T/calibrate.jsonl" | head -2; done > "$T/cal.jsonl"

cal() { # OUT SEED [OPTION...]
    local out=$1 seed=$2
    shift 2
    "$ILPD" calibrate -m "$M" --data "$T/cal.jsonl" -o "$out" -n 8 --exact-share 1 --holdout 0.25 --beam 2 --seed "$seed" "$@" \
        2>"$out.log" >"$out.out"
}
cal "$T/a.json" 3; ra=$?
cal "$T/b.json" 3; rb=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] && cmp -s "$T/a.json" "$T/b.json"
check "calibrate is deterministic for a seed" $? "exit $ra/$rb; $(diff "$T/a.json" "$T/b.json" | head -5; tail -3 "$T/a.json.log")"

sha=$(sha256sum "$M" | cut -d' ' -f1)
out=$("$PYTHON" - "$T/a.json" "$sha" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
layers = [c["layer"] for c in p["candidates"]]
assert p["model_sha256"] == sys.argv[2], "hash"
assert p["parameters"] == len(layers) * (len(p["features"]) + 1) <= 256, "parameters"
assert all(p["k"] <= l < p["n_layers"] - 1 for l in layers) and len(set(layers)) == len(layers), "candidates"
ranks = p["calibration"]["rankings"]
assert sorted(r["class"] for r in ranks) == ["classify", "story", "yesno"], "a ranking per class"
assert all(sorted(r["layers"]) == sorted(layers) and 0 <= r["removed_within_target"] <= len(layers) for r in ranks), \
    "each ranking orders the candidates and says how deep its class goes"
assert p["calibration"]["identical_answers_calibration"] == 1, "exact share 1 kept on calibration"
print("ok")
EOF
)
[ "$out" = ok ]; check "the probe is bound to the model's SHA-256, within 256 parameters, never a fixed layer, ranked per class, exact on its calibration split" $? "$out"

# The probe serves as written: eval with it reports every prompt and class.
# (--gate 0: the mask alone, whose KV bytes the check below counts)
"$ILPD" eval -m "$M" --data "$T/cal.jsonl" --probe "$T/a.json" -n 8 --gate 0 --json >"$T/eval.json" 2>"$T/eval.log"; rc=$?
out=$("$PYTHON" - "$T/eval.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert len(r["prompts"]) == 6, len(r["prompts"])
for p in r["prompts"]:
    skipped = p["mask"].count("0")
    assert skipped == p["layers_skipped"], p
    assert p["mask"][:3] == "111" and p["mask"][-1] == "1", p
    assert (p["layer_status"] == "active") == (skipped > 0), p
    assert p["exact_match"] == (p["answer_full"] == p["answer_probe"]), p
    assert p["gated_at"] == -1, p
    if p["exact_match"]:
        assert p["kv_bytes_probe"] * 16 == p["kv_bytes_full"] * (16 - skipped), p
c = r["classes"]
assert set(c) == {"classify", "yesno", "story", "structured", "total"}, set(c)
assert c["structured"]["prompts"] == c["classify"]["prompts"] + c["yesno"]["prompts"] == 4, c["structured"]
for k in ("layers_skipped_mean", "exact_match"):  # structured: classify and yesno, not story
    want = (c["classify"][k] + c["yesno"][k]) / 2
    assert abs(c["structured"][k] - want) < 1e-9, (k, c["structured"][k], want)
print("ok")
EOF
)
[ $rc -eq 0 ] && [ "$out" = ok ]; check "eval --json: per prompt the mask, skipped layers, status, exact match and KV bytes agree; every class reported, and structured sums classify and yesno" $? "exit $rc: $out $(tail -3 "$T/eval.log")"

# K is the calibration's choice: the features come from layer K and the candidates start there.
cal "$T/k5.json" 3 -k 5; rc=$?
out=$("$PYTHON" -c 'import json, sys; p = json.load(open(sys.argv[1])); l = [c["layer"] for c in p["candidates"]]
print("ok" if p["k"] == 5 and l and min(l) >= 5 and max(l) <= 14 else (p["k"], l))' "$T/k5.json" 2>&1)
[ $rc -eq 0 ] && [ "$out" = ok ]; check "calibrate -k 5 writes a probe with K 5 whose candidates start at layer 5" $? "exit $rc: $out $(tail -2 "$T/k5.json.log")"
out=$("$ILPD" calibrate -m "$M" --data "$T/cal.jsonl" -o "$T/k15.json" -k 15 2>&1); rc=$?
[ $rc -ne 0 ] && [ ! -e "$T/k15.json" ] && grep -q "1\.\.14" <<<"$out"; check "calibrate refuses a K the model cannot have (16 layers: 1..14)" $? "exit $rc: $out"

out=$("$ILPD" calibrate -m "$M" --data "$T/cal.jsonl" -o "$T/c.json" --exact-share 2 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "exact-share" <<<"$out"; check "calibrate refuses an out-of-range option" $? "exit $rc: $out"
exit 0
