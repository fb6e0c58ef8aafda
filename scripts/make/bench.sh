#!/bin/bash
# Speed benchmarks: `ilpd bench` on every bench model (scripts/make/make_bench_models.sh
# makes them), one table row each; then, on the 32-layer models, a run that
# skips 25% of the layers against the full-depth run: time per token should
# fall with the skipped layers' share of the weight bytes, KV bytes exactly
# with the skipped fraction.
#
#   scripts/make/bench.sh [MODEL.gguf ...]       (default: bench/models/*.gguf)
# Environment: ILPD (./ilpd), THREADS (2), P (128 prompt tokens), N (128
# generated), REPS (1: measured runs per model, the best counts), KV (f16, as
# llama.cpp's default, or f32: the KV cache type),
# LLAMA_BENCH (path to llama.cpp's llama-bench: adds its numbers on the same
# files and threads), LLAMA_REPS (3), OUT (a folder to keep the JSON lines in).
set -eu
cd "$(dirname "$0")/../.."
ILPD="${ILPD:-./ilpd}"
THREADS="${THREADS:-2}"
P="${P:-128}"
N="${N:-128}"
REPS="${REPS:-1}"
KV="${KV:-f16}"
KVOPT=()
[ "$KV" = f16 ] && KVOPT=(--kv-f16)
LLAMA_BENCH="${LLAMA_BENCH:-}"
LLAMA_REPS="${LLAMA_REPS:-3}"
PYTHON="${PYTHON:-/usr/bin/python3}"
OUT="${OUT:-$(mktemp -d /tmp/ilpd-bench.XXXXXX)}"
mkdir -p "$OUT"

models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    shopt -s nullglob
    models=(bench/models/*.gguf)
fi
if [ ${#models[@]} -eq 0 ]; then
    echo "bench.sh: no models (run scripts/make/make_bench_models.sh)" >&2
    exit 1
fi

: > "$OUT/ilpd.jsonl"
: > "$OUT/llama.jsonl"
for m in "${models[@]}"; do
    echo "bench.sh: $m" >&2
    "$ILPD" bench -m "$m" -t "$THREADS" -p "$P" -n "$N" --reps "$REPS" "${KVOPT[@]}" --json | sed "s|^{|{\"file\":\"$m\",|" >> "$OUT/ilpd.jsonl"
    if [ -n "$LLAMA_BENCH" ]; then
        "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$P" -n "$N" -r "$LLAMA_REPS" -o jsonl 2>/dev/null |
            sed "s|^{|{\"file\":\"$m\",|" >> "$OUT/llama.jsonl" || echo "bench.sh: llama-bench failed on $m" >&2
    fi
done

# Masked runs: skip 8 of the 32 layers (never 0..2, the probe's, nor the last).
MASK_LAYERS="3 6 9 12 16 20 24 28"
MASK=$("$PYTHON" -c "import base64,sys; s=set(map(int,sys.argv[1:])); print(base64.b64encode(bytes(0 if i in s else 1 for i in range(32))).decode())" $MASK_LAYERS)
: > "$OUT/masked.jsonl"
for m in "${models[@]}"; do
    case "$m" in *l32*) ;; *) continue ;; esac
    echo "bench.sh: $m with layers $MASK_LAYERS skipped" >&2
    "$ILPD" bench -m "$m" -t "$THREADS" -p "$P" -n "$N" --reps "$REPS" "${KVOPT[@]}" --layer-mask "$MASK" --json | sed "s|^{|{\"file\":\"$m\",|" >> "$OUT/masked.jsonl"
done

"$PYTHON" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
ilpd, llama, masked = load("ilpd.jsonl"), load("llama.jsonl"), load("masked.jsonl")
ll = {}
for r in llama:
    key = "pp" if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0 else "tg"
    ll.setdefault(r["file"], {})[key] = r.get("avg_ts", 0.0)
base = lambda f: os.path.basename(f).replace(".gguf", "")
print()
hdr = "%-16s %8s %8s %6s %8s %8s %6s %8s %9s %9s" % ("model", "pp tok/s", "pp roof", "pp %", "tg tok/s", "tg roof", "tg %",
                                                    "ttft ms", "RSS MB", "KV MB")
if ll:
    hdr += " %10s %10s" % ("llama pp", "llama tg")
print(hdr)
for r in ilpd:
    line = "%-16s %8.1f %8.1f %5.0f%% %8.2f %8.2f %5.0f%% %8.1f %9.1f %9.1f" % (
        base(r["file"]), r["pp_tok_s"], r["pp_roofline_tok_s"], 100 * r["pp_roofline_ratio"], r["tg_tok_s"],
        r["tg_roofline_tok_s"], 100 * r["tg_roofline_ratio"], r["ttft_ms"], r["peak_rss_bytes"] / 1e6, r["kv_bytes"] / 1e6)
    if ll:
        l = ll.get(r["file"], {})
        line += " %10.1f %10.2f" % (l.get("pp", 0), l.get("tg", 0))
    print(line)
if ilpd:
    print("(read bandwidth measured per run: %s GB/s)" % ", ".join("%.1f" % r["bandwidth_gbs"] for r in ilpd))
if masked:
    print()
    print("%-16s %8s %8s %10s %10s %9s %9s %8s" % ("masked model", "layers", "tg full", "tg masked", "t/tok ratio",
                                                  "expected", "KV ratio", "verdict"))
    full = {r["file"]: r for r in ilpd}
    for r in masked:
        f = full.get(r["file"])
        if not f:
            continue
        ratio = f["tg_tok_s"] / r["tg_tok_s"]           # time per token, masked / full
        expect = r["weight_bytes_per_token"] / r["weight_bytes_per_token_full"]
        kv = r["kv_bytes"] / f["kv_bytes"]
        ok = ratio <= expect * 1.05
        print("%-16s %4d/%-3d %8.2f %10.2f %10.3f %9.3f %9.3f %8s" % (
            base(r["file"]), r["layers_computed"], r["layers"], f["tg_tok_s"], r["tg_tok_s"], ratio, expect, kv,
            "ok" if ok else "slow"))
EOF
echo "bench.sh: JSON lines in $OUT" >&2
