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
# files and threads), LLAMA_REPS (3), OUT (a folder to keep the JSON lines in),
# ISA (caps ilpd's kernels: ILPD_CPU_ISA=avx2|avx512|scalar), ROUNDS (1),
# MASKED (1: the masked runs below; 0 skips them).
#
# Side by side: with LLAMA_BENCH and ROUNDS=2 each model gets two rounds,
# ilpd then llama.cpp in each (interleaved, so that a noisy stretch of the
# machine hits both), and the table adds per model the ratios ilpd /
# llama.cpp of generation and prompt tok/s (medians of the rounds) with the
# spread of the rounds. To compare the AVX2 paths on an AVX-512 machine, give
# ISA=avx2 and a llama.cpp built with -DGGML_NATIVE=OFF -DGGML_AVX2=ON
# -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF (outside this repository).
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
ISA="${ISA:-}"
ROUNDS="${ROUNDS:-1}"
MASKED="${MASKED:-1}"
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
    for round in $(seq 1 "$ROUNDS"); do
        echo "bench.sh: $m${ISA:+ (ISA $ISA)}, round $round of $ROUNDS, load $(cut -d' ' -f1 /proc/loadavg)" >&2
        ILPD_CPU_ISA="$ISA" "$ILPD" bench -m "$m" -t "$THREADS" -p "$P" -n "$N" --reps "$REPS" "${KVOPT[@]}" --json |
            sed "s|^{|{\"file\":\"$m\",\"round\":$round,|" >> "$OUT/ilpd.jsonl"
        if [ -n "$LLAMA_BENCH" ]; then
            "$LLAMA_BENCH" -m "$m" -t "$THREADS" -p "$P" -n "$N" -r "$LLAMA_REPS" -o jsonl 2>/dev/null |
                sed "s|^{|{\"file\":\"$m\",\"round\":$round,|" >> "$OUT/llama.jsonl" || echo "bench.sh: llama-bench failed on $m" >&2
        fi
    done
done

# Masked runs: skip 8 of the 32 layers (never 0..2, the probe's, nor the last).
MASK_LAYERS="3 6 9 12 16 20 24 28"
MASK=$("$PYTHON" -c "import base64,sys; s=set(map(int,sys.argv[1:])); print(base64.b64encode(bytes(0 if i in s else 1 for i in range(32))).decode())" $MASK_LAYERS)
: > "$OUT/masked.jsonl"
for m in "${models[@]}"; do
    [ "$MASKED" = 1 ] || break
    case "$m" in *l32*) ;; *) continue ;; esac
    echo "bench.sh: $m with layers $MASK_LAYERS skipped" >&2
    ILPD_CPU_ISA="$ISA" "$ILPD" bench -m "$m" -t "$THREADS" -p "$P" -n "$N" --reps "$REPS" "${KVOPT[@]}" --layer-mask "$MASK" --json | sed "s|^{|{\"file\":\"$m\",|" >> "$OUT/masked.jsonl"
done

"$PYTHON" - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []
ilpd_runs, llama, masked = load("ilpd.jsonl"), load("llama.jsonl"), load("masked.jsonl")
def median(v):
    v = sorted(v)
    return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2 if v else 0.0
ll, runs = {}, {}
for r in llama:  # llama-bench: one line per test (pp or tg) per round
    key = "pp" if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0 else "tg"
    ll.setdefault(r["file"], {}).setdefault(key, []).append(r.get("avg_ts", 0.0))
ilpd = []
for r in ilpd_runs:  # one row per model: the median of its rounds
    if r["file"] not in runs:
        ilpd.append(r)
    runs.setdefault(r["file"], []).append(r)
for i, r in enumerate(ilpd):
    rr = dict(r)
    for k in ("pp_tok_s", "tg_tok_s", "pp_roofline_ratio", "tg_roofline_ratio", "pp_roofline_tok_s", "tg_roofline_tok_s",
              "ttft_ms"):
        rr[k] = median([x[k] for x in runs[r["file"]]])
    ilpd[i] = rr
base = lambda f: os.path.basename(f).replace(".gguf", "")
print()
hdr = "%-16s %8s %8s %6s %8s %8s %6s %8s %9s %9s" % ("model", "pp tok/s", "pp roof", "pp %", "tg tok/s", "tg roof", "tg %",
                                                    "ttft ms", "RSS MB", "KV MB")
if ll:
    hdr += " %10s %10s %8s %8s %12s" % ("llama pp", "llama tg", "pp x", "tg x", "tg x spread")
print(hdr)
for r in ilpd:
    line = "%-16s %8.1f %8.1f %5.0f%% %8.2f %8.2f %5.0f%% %8.1f %9.1f %9.1f" % (
        base(r["file"]), r["pp_tok_s"], r["pp_roofline_tok_s"], 100 * r["pp_roofline_ratio"], r["tg_tok_s"],
        r["tg_roofline_tok_s"], 100 * r["tg_roofline_ratio"], r["ttft_ms"], r["peak_rss_bytes"] / 1e6, r["kv_bytes"] / 1e6)
    if ll:
        l = ll.get(r["file"], {})
        lpp, ltg = median(l.get("pp", [])), median(l.get("tg", []))
        # the spread: each round's ilpd over that round's llama.cpp
        tgx = [x["tg_tok_s"] / y for x, y in zip(runs[r["file"]], l.get("tg", [])) if y > 0]
        line += " %10.1f %10.2f %7.2fx %7.2fx %12s" % (lpp, ltg, r["pp_tok_s"] / lpp if lpp else 0,
                                                       r["tg_tok_s"] / ltg if ltg else 0,
                                                       "..".join("%.2f" % v for v in (min(tgx), max(tgx))) if tgx else "-")
    print(line)
if ilpd:
    print("(read bandwidth measured per run: %s GB/s)" % ", ".join("%.1f" % r["bandwidth_gbs"] for r in ilpd_runs))
    if ll:
        print("(pp x, tg x: ilpd / llama.cpp, medians of %d round(s); spread: the per-round generation ratios)"
              % max(len(v) for v in runs.values()))
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
