#!/bin/bash
# The GPU check, in one go on a machine with an NVIDIA GPU (sized for an
# H200: about 5 minutes before the BEFORE runs were added, which add about
# a minute, estimated; llama.cpp's build runs beside it; no network needed):
#   1. builds everything (make -j16; nvcc is required), or takes the
#      binaries scripts/make/gpu-pack.sh put in .gpu-bin (a GPU machine
#      without the libraries' headers: carry .gpu-bin);
#   2. runs the CUDA tests: build/rel/tests/test_cuda (every backend
#      operation and stories260K on the device against the CPU backend) and
#      tests/t_cuda.sh (synthetic models of every weight type, on the
#      emulated GPU and on the device);
#   3. writes a synthetic Llama-3-8B-shaped model (32 layers, dim 4096, 32
#      heads, 8 KV heads, FFN 14336, vocab 128256) in F16, then in Q8_0
#      (scripts/model/make_gpu_model.py), and on each runs `test_cuda --bench`:
#      device bandwidth measured in the same process (a read kernel and a
#      device-to-device copy), then a 2048-token prompt and 128 greedy
#      tokens at full depth and with a mask skipping 25% of the layers;
#   4. runs the Q8_0 model once through `ilpd generate --device cuda` with
#      that mask (the whole program on the GPU), and prints lossless mode's
#      verify(k) / decode(1) table for k = 1..8 on it (`ilpd bench --verify
#      --device cuda`);
#   5. checks approximate mode's gate on the GPU (the demo model: a gate
#      every token falls below answers as full depth);
#   6. prints a table: generation tok/s, time to first token of the 2048-
#      token prompt, device memory in use, bandwidth, the generation
#      roofline (bandwidth / bytes a token reads) and the ratio reached;
#   with LLAMA_CPP (a llama.cpp source tree, built beside the project and
#   never committed) or LLAMA_BENCH (a llama-bench already built): the
#   same files through `llama-bench -p PROMPT -n GEN -d 0,PROMPT -fa 1
#   -ngl 99`, in the same run, and ilpd's ratios to it. LLAMA_CPP is built
#   in $WORK/llama-build while ilpd builds and benchmarks (Ninja,
#   -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   -DGGML_CUDA_FA_ALL_QUANTS=OFF, the llama-bench target only: about 5
#   minutes on 16 cores; the tree needs ggml/, src/, include/, common/,
#   vendor/, cmake/ and tools/llama-bench).
#   with SANITIZER=1, instead of steps 3-6: test_cuda under compute-sanitizer
#   (SAN_TOOLS, default "memcheck racecheck"; SAN_TIMEOUT seconds each,
#   default 150), for races and out-of-bounds accesses of the kernels.
# Usage (from the repository root): bash scripts/make/gpu-check.sh
# Environment: WORK (model folder, default bench/models/gpu-check, git-ignored; about 17 GB free
# needed, each model is deleted after its run unless KEEP=1), PROMPT (2048),
# GEN (128), TYPES ("F16 Q8_0"; also Q4_K, Q4_0, Q6_K, BF16), JOBS (16), PYTHON (/usr/bin/python3 if
# it has numpy, else python3), REBUILD (1: build even with .gpu-bin),
# LLAMA_CPP, LLAMA_BENCH, BEFORE (1: each file also at full depth with the kernels of before
# 2026-12-07, switched back by ILPD_CUDA_ATTN_BASIC=1 ILPD_CUDA_MV_WARPS=1 ILPD_CUDA_SETS=0
# ILPD_CUDA_PROMPT_ROWS=64 ILPD_CUDA_GRAPHS=0 ILPD_CUDA_PICK=0 (the residual additions fused with
# the RMSNorms stay), for the gain of each run's kernels on the same GPU; 0: not).
set -u
cd "$(dirname "$0")/../.." || exit 1
START=$(date +%s)
if [ -z "${PYTHON:-}" ]; then # the first python3 with numpy (the synthetic models need it)
    PYTHON=/usr/bin/python3
    "$PYTHON" -c 'import numpy' 2>/dev/null || PYTHON=$(command -v python3 || echo /usr/bin/python3)
fi
WORK="${WORK:-bench/models/gpu-check}"
PROMPT="${PROMPT:-2048}"
GEN="${GEN:-128}"
TYPES="${TYPES:-F16 Q8_0}"
JOBS="${JOBS:-16}"
KEEP="${KEEP:-0}"
BEFORE="${BEFORE:-1}"
mkdir -p "$WORK" || exit 1
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"
status=0
say() { echo "== [$(( $(date +%s) - START ))s] $*"; }

LLAMA_BENCH="${LLAMA_BENCH:-}"
llama_pid=""
if [ -z "$LLAMA_BENCH" ] && [ -n "${LLAMA_CPP:-}" ]; then
    say "build llama.cpp's llama-bench from $LLAMA_CPP in the background ($WORK/llama-build)"
    LLAMA_BENCH="$PWD/$WORK/llama-build/bin/llama-bench"
    ( cmake -S "$LLAMA_CPP" -B "$WORK/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_FA_ALL_QUANTS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
          -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF &&
      nice cmake --build "$WORK/llama-build" --target llama-bench -j "$JOBS" ) >"$WORK/llama-build.log" 2>&1 &
    llama_pid=$!
fi

if [ -x .gpu-bin/ilpd ] && [ "${REBUILD:-0}" != 1 ]; then
    say "prebuilt binaries from .gpu-bin (scripts/make/gpu-pack.sh; REBUILD=1 builds here instead)"
    mkdir -p build/rel/tests
    cp -p .gpu-bin/ilpd ./ilpd
    cp -p .gpu-bin/build/rel/tests/test_cuda .gpu-bin/build/rel/tests/test_cuda_emu build/rel/tests/
    export LD_LIBRARY_PATH="$PWD/.gpu-bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    [ -d .gpu-bin/shared ] && export SHARED="$PWD/.gpu-bin/shared"
    if ldd ./ilpd build/rel/tests/test_cuda | grep 'not found'; then
        echo "gpu-check: the prebuilt binaries lack the libraries above here"
        exit 1
    fi
else
    say "build (make -j$JOBS)"
    if ! make -j"$JOBS" >"$WORK/build.log" 2>&1 ||
       ! make -j"$JOBS" build/rel/tests/test_cuda build/rel/tests/test_cuda_emu >>"$WORK/build.log" 2>&1; then
        tail -n 30 "$WORK/build.log"
        echo "gpu-check: the build failed (log: $WORK/build.log); without the libraries' headers, run"
        echo "scripts/make/gpu-pack.sh where they are and carry .gpu-bin"
        exit 1
    fi
    if [ ! -f build/rel/kernels/cuda/cuda_backend.o ]; then
        echo "gpu-check: the CUDA backend was not built: is nvcc installed (PATH or /usr/local/cuda/bin)?"
        exit 1
    fi
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

say "CUDA tests"
tests_out="$WORK/tests.log"
{
    build/rel/tests/test_cuda
    UNIT_DIR="$PWD/build/rel/tests" tests/t_cuda.sh
} >"$tests_out" 2>&1
p=$(grep -c '^ok - ' "$tests_out"); f=$(grep -c '^not ok - ' "$tests_out"); s=$(grep -c '^skip - ' "$tests_out")
grep -E '^(not ok|skip) - |^# ' "$tests_out"
echo "CUDA tests: $p passed, $f failed, $s skipped (log: $tests_out)"
[ "$f" -eq 0 ] || status=1
if grep -q '^skip - cuda: no usable GPU' "$tests_out"; then
    echo "gpu-check: no usable GPU: nothing to benchmark"
    exit 1
fi

if [ "${SANITIZER:-0}" = 1 ]; then # instead of the benchmarks: test_cuda under compute-sanitizer
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if [ ! -x "$cs" ]; then
        echo "gpu-check: no compute-sanitizer on this machine"
        exit 1
    fi
    for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        say "compute-sanitizer --tool $tool build/rel/tests/test_cuda (at most ${SAN_TIMEOUT:-150} s)"
        timeout "${SAN_TIMEOUT:-150}" "$cs" --tool "$tool" --error-exitcode 99 build/rel/tests/test_cuda \
            > "$WORK/sanitizer-$tool.log" 2>&1
        rc=$?
        grep -m 20 -E '^========= +(Invalid|Race|Error|Barrier|Uninitialized|Out of|Program hit)' "$WORK/sanitizer-$tool.log"
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$WORK/sanitizer-$tool.log" | tail -n 2
        case $rc in
        0) echo "$tool: clean" ;;
        124) echo "$tool: stopped after ${SAN_TIMEOUT:-150} s (log: $WORK/sanitizer-$tool.log)" ;;
        *) echo "$tool: exit status $rc (log: $WORK/sanitizer-$tool.log)"; status=1 ;;
        esac
    done
    say "done (status $status)"
    exit $status
fi

# The 25% mask: layers 2, 6, 10, ..., 30 skipped (8 of 32); base64 of 32 bytes, 1 = computed.
MASK=$("$PYTHON" -c 'import base64; print(base64.b64encode(bytes(0 if l % 4 == 2 else 1 for l in range(32))).decode())')
echo "mask skipping 25% of the layers: $MASK"

for t in $TYPES; do
    model="$WORK/llama3-8b-shape-$t.gguf"
    if [ ! -s "$model" ]; then
        say "write $model"
        if ! "$PYTHON" scripts/model/make_gpu_model.py -o "$model" --type "$t"; then
            echo "gpu-check: could not write $model"
            status=1
            continue
        fi
    fi
    say "bench $t: prompt $PROMPT tokens, $GEN generated, full depth and 25% skipped"
    if ! build/rel/tests/test_cuda --bench "$model" --prompt "$PROMPT" --gen "$GEN" --kv-f16 --mask "$MASK" \
            > "$WORK/bench-$t.jsonl" 2> "$WORK/bench-$t.err"; then
        cat "$WORK/bench-$t.err"
        echo "gpu-check: the $t bench failed"
        status=1
    fi
    sed "s/^{/{\"type\":\"$t\",/" "$WORK/bench-$t.jsonl" >> "$RESULTS"
    if [ "$BEFORE" = 1 ]; then
        say "bench $t with the kernels of before 2026-12-07 (basic attention, a warp a matvec row, a launch a weight, prompt passes of 64, no graphs, logits to the host)"
        if ILPD_CUDA_ATTN_BASIC=1 ILPD_CUDA_MV_WARPS=1 ILPD_CUDA_SETS=0 ILPD_CUDA_PROMPT_ROWS=64 ILPD_CUDA_GRAPHS=0 \
                ILPD_CUDA_PICK=0 \
                build/rel/tests/test_cuda --bench "$model" --prompt "$PROMPT" --gen "$GEN" --kv-f16 \
                > "$WORK/before-$t.jsonl" 2> "$WORK/before-$t.err"; then
            grep '"what":"run"' "$WORK/before-$t.jsonl" | sed "s/^{/{\"type\":\"$t\",\"before\":1,/" >> "$RESULTS"
        else
            cat "$WORK/before-$t.err"
            echo "gpu-check: the $t bench with the earlier kernels failed"
        fi
    fi
    if [ "$t" = Q8_0 ] || [ "$t" = "${TYPES##* }" ]; then
        say "ilpd generate --device cuda on $t with the mask"
        words=$("$PYTHON" -c 'print(" ".join(["once upon a time there was a little dog"] * 20))')
        if ./ilpd generate --device cuda -m "$model" -p "$words" -n 32 --temp 0 --kv-f16 --layer-mask "$MASK" \
                > "$WORK/generate-$t.out" 2> "$WORK/generate-$t.err"; then
            grep -E '"backend"|backend|generated' "$WORK/generate-$t.err" | tail -n 3
        else
            tail -n 5 "$WORK/generate-$t.err"
            echo "gpu-check: ilpd generate --device cuda failed"
            status=1
        fi
        say "lossless mode's verification cost on the GPU: verify(k) / decode(1) after 512 tokens"
        if ! ./ilpd bench --device cuda --verify -m "$model" -p 512 --kv-f16 > "$WORK/verify-$t.out" 2>&1; then
            echo "gpu-check: ilpd bench --verify --device cuda failed"
            status=1
        fi
        cat "$WORK/verify-$t.out"
    fi
    if [ -n "$llama_pid" ]; then
        say "waiting for the llama.cpp build"
        wait "$llama_pid" || { tail -n 20 "$WORK/llama-build.log"; echo "gpu-check: the llama.cpp build failed"; }
        llama_pid=""
    fi
    if [ -n "$LLAMA_BENCH" ] && [ -x "$LLAMA_BENCH" ]; then
        say "llama-bench $t: pp$PROMPT and tg$GEN at depths 0 and $PROMPT, flash attention on"
        if "$LLAMA_BENCH" -m "$model" -p "$PROMPT" -n "$GEN" -d "0,$PROMPT" -fa 1 -ngl 99 -r 3 -o json \
                > "$WORK/llama-$t.json" 2> "$WORK/llama-$t.err"; then
            "$PYTHON" -c 'import json, sys
for r in json.load(open(sys.argv[1])):
    r.update(what="llama", type=sys.argv[2])
    print(json.dumps(r))' "$WORK/llama-$t.json" "$t" >> "$RESULTS"
        else
            tail -n 5 "$WORK/llama-$t.err"
            echo "gpu-check: llama-bench failed on $t"
            status=1
        fi
    elif [ -n "$LLAMA_BENCH" ]; then
        echo "gpu-check: no llama-bench at $LLAMA_BENCH"
        status=1
    fi
    [ "$KEEP" = 1 ] || rm -f "$model"
done

say "approximate mode's gate on the GPU: the demo model, half its candidate layers skipped, a gate every token falls below"
gate_args=(--device cuda -m models/ilpd-demo-F16.gguf --chat --temp 0 -n 40
           --system "You are a customer support assistant. Classify the message. Reply only with JSON."
           -p "Classify this customer message as shipping, returns, product or payment. Message: My card was charged twice.")
if ./ilpd generate "${gate_args[@]}" --skip-mode off > "$WORK/gate-off.out" 2> "$WORK/gate-off.err" &&
        ./ilpd generate "${gate_args[@]}" --skip-mode approximate --mask 1,1,1,1,0,1,0,1,0,1,0,1,0,1,0,1 --skip-gate 100 \
            > "$WORK/gate.out" 2> "$WORK/gate.err" && grep -q "gated at 0" "$WORK/gate.err" &&
        cmp -s "$WORK/gate-off.out" "$WORK/gate.out"; then
    echo "gated at the first token, answer identical to full depth: $(cat "$WORK/gate.out")"
else
    tail -n 3 "$WORK/gate.err"
    echo "gpu-check: the gated answer on the GPU is not full depth's ($(cat "$WORK/gate-off.out") / $(cat "$WORK/gate.out"))"
    status=1
fi

say "results ($RESULTS)"
"$PYTHON" - "$RESULTS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bw = {r["type"]: r for r in rows if r["what"] == "bandwidth"}
load = {r["type"]: r for r in rows if r["what"] == "load"}
print("%-5s %-7s %6s %10s %9s %10s %9s %8s %8s %9s %6s" % (
    "type", "mask", "layers", "gen tok/s", "TTFT ms", "prefill/s", "mem GiB", "read GB/s", "copy", "roof t/s", "ratio"))
for r in rows:
    if r["what"] != "run" or r["mask"] == "warm-up" or r.get("before"):
        continue
    b = bw.get(r["type"], {})
    print("%-5s %-7s %6s %10.1f %9.0f %10.0f %9.1f %8.0f %8.0f %9.1f %6.2f" % (
        r["type"], "full" if r["mask"] == "full" else "skip25", "%d/%d" % (r["layers"], r["n_layers"]),
        r["gen_tok_s"], r["ttft_ms"], r["prefill_tok_s"], r["mem_used_bytes"] / 2**30,
        b.get("read_gbs", 0), b.get("copy_gbs", 0), r["roofline_tok_s"], r["roofline_ratio"]))
for r in rows:
    if r["what"] == "run" and r["mask"] != "warm-up" and not r.get("before") and "graph_replays" in r:
        print("%s %s: %d of %d generated tokens replayed a CUDA graph (%d captured)" % (
            r["type"], "full" if r["mask"] == "full" else "skip25", r["graph_replays"], r["gen_tokens"],
            r["graphs_captured"]))
for t, l in load.items():
    print("%s: %.2f GB of weights loaded in %.1f s on %s; device memory after load %.1f GiB" % (
        t, l["weight_bytes"] / 1e9, l["load_s"], l["device"], l["mem_used_bytes"] / 2**30))
runs = {(r["type"], r["mask"] == "full"): r for r in rows
        if r["what"] == "run" and r["mask"] != "warm-up" and not r.get("before")}
before = {r["type"]: r for r in rows if r["what"] == "run" and r["mask"] == "full" and r.get("before")}
for t, b in before.items():
    full = runs.get((t, True))
    if full:
        print("%s, full depth, these kernels against those before 2026-12-07: generation %.1f against %.1f tok/s "
              "(%.2fx), prefill %.0f against %.0f tok/s (%.2fx)" % (
                  t, full["gen_tok_s"], b["gen_tok_s"], full["gen_tok_s"] / b["gen_tok_s"], full["prefill_tok_s"],
                  b["prefill_tok_s"], full["prefill_tok_s"] / b["prefill_tok_s"]))
for t in bw:
    full, skip = runs.get((t, True)), runs.get((t, False))
    if full and skip:
        print("%s: skipping 25%% of the layers: %.2fx the generation speed, %.2fx the TTFT, KV %.0f%% of full" % (
            t, skip["gen_tok_s"] / full["gen_tok_s"], skip["ttft_ms"] / full["ttft_ms"],
            100.0 * skip["kv_bytes"] / max(full["kv_bytes"], 1)))
print("roofline = measured read bandwidth / bytes one generated token reads (computed layers' weights, "
      "output head, KV cache at the mean position); ratio = gen tok/s / roofline")
llama = [r for r in rows if r["what"] == "llama"]
if llama:
    print()
    print("%-5s %-20s %10s %10s %7s %12s %7s" % ("type", "test", "llama.cpp", "ilpd full", "ratio", "ilpd skip25",
                                                 "ratio"))
    key = {True: "gen_tok_s", False: "prefill_tok_s"}
    for t in bw:
        full, skip = runs.get((t, True)), runs.get((t, False))
        for r in llama:
            if r["type"] != t:
                continue
            depth, gen = int(r.get("n_depth", 0)), int(r.get("n_gen", 0)) > 0
            test = "tg%d after %d" % (r["n_gen"], depth) if gen else "pp%d at depth %d" % (r["n_prompt"], depth)
            comparable = depth > 0 if gen else depth == 0
            cells = []
            for run in (full, skip):
                v = run[key[gen]] if run and comparable else 0
                cells += ["%.1f" % v if v else "-", "%.2fx" % (v / r["avg_ts"]) if v else "-"]
            roof = " (llama.cpp: %.0f%% of roofline)" % (100.0 * r["avg_ts"] / full["roofline_tok_s"]) if gen and full else ""
            print("%-5s %-20s %10.1f %10s %7s %12s %7s%s" % (t, test, r["avg_ts"], *cells, roof))
    print("ratio = ilpd / llama.cpp on the same file in the same run (ilpd decodes GEN tokens after the PROMPT-token "
          "prompt, so it compares with tg after PROMPT; its prefill with pp at depth 0)")
EOF
say "done (status $status)"
exit $status
