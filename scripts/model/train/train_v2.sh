#!/bin/sh
# Demo model v2 (issue 22): the data, then training on a GPU or on this CPU.
#
#   sh scripts/model/train/train_v2.sh prepare        # here: data, tokenizer, xz'd token stream
#   (device) sh scripts/model/train/train_v2.sh gpu   # there: train, write the weights to $OUT
#   sh scripts/model/train/train_v2.sh finish DIR     # here: DIR = the run's files_at
#   sh scripts/model/train/train_v2.sh cpu            # or: train here, on 2 cores, in two phases
#   FROM_V1=1 sh scripts/model/train/train_v2.sh cpu  # the same, continuing the v1 model
#   sh scripts/model/train/train_v2.sh copy CKPT DATA # teach a trained checkpoint to copy
#   sh scripts/model/train/train_v2.sh tune CKPT TOK  # tune a CPU checkpoint on the answers
#   sh scripts/model/train/train_v2.sh skip CKPT TOK  # then train it to be skipped
#
# GPU: the machine has PyTorch but no SentencePiece and no package access, and
# at most 64 MiB travels each way (16 MiB a file back), so the token stream is
# made here and travels xz-compressed in .gpu-train/ (git-ignored, named in the
# run's carry), and the weights come back as 15 MiB parts of a model-only
# checkpoint. The GPU recipe is 24 x 192 on 100 M tokens at a 2,048 context,
# a fifth of the sequences repeated spans (--induction 0.2: models/README.md,
# "Copying needs induction heads"); train.log's "copy" column shows whether
# the model learned to copy. It ends with the tune phase (below), whose data
# travels in .gpu-train/tune.
#
# CPU: 16 x 128 (the v1 shape), phase A at a 512 context for CPU_MINUTES_A
# (about 4,000 tok/s on 2 cores), then phase B extends the context to 2,048
# for CPU_MINUTES_B (attention over 2,048 positions makes it about 5x slower
# a token). Both phases use the LayerSkip recipe. With FROM_V1=1 phase A
# starts from the published model (its tokenizer and weights) instead of
# from scratch, which saves the hours v1 already trained. Checkpoints go to
# $V2CPU/a and $V2CPU/b; re-running `cpu` resumes a phase that was cut off.
#
# copy: a checkpoint whose train.log shows copy near 0 learns to copy in three
# continuation phases on this CPU (models/README.md, "Copying needs induction
# heads"): C trains on repeated spans only (--induction 1.0, a 128 context)
# until the copy check reaches 0.95 (the phase change came after 860 steps,
# 16 minutes, for the CPU v2 model), which costs the model its language
# (held-out loss 1.2 -> 4); D goes back to the data with a fifth repeated
# spans and the LayerSkip recipe at a 512 context for COPY_MINUTES (70), which
# brings the language back and keeps the copying; E is phase B of `cpu`
# (a 2,048 context, CPU_MINUTES_B) with the same fifth of spans. Checkpoints
# go to $V2CPU/copy-{c,d,e}; re-running `copy` resumes where it was cut off.
# tune: instruction tuning of a trained checkpoint (TOK: its tokenizer.model)
# on data with more tasks (tune_data: --task-frac 0.85, 4 epochs, 19 M tokens,
# tasks_v2's classify phrase bank, a third of the copy documents), the loss on
# the assistant turns only (--answer-loss), no repeated spans (with them and
# all the copy documents the model ended up copying the instruction into its
# answers), the LayerSkip recipe; on the CPU at a 512 context for TUNE_MINUTES
# (40), data and checkpoints in $V2CPU/tune (re-running `tune` resumes);
# skip: after tune, five phases on data with three times the yes/no questions
# (SKIP_MIX) that train the model with layers dropped toward the full model's
# answers (--distill; a second pass, so half the tokens a minute): I, 45
# minutes (SKIP_MINUTES_I) with SKIP (layer i dropped with probability
# 0.4 i/15); J, 35 (SKIP_MINUTES_J), also --turn-weight 0.5; K, 45
# (SKIP_MINUTES_K), with SKIP_CPU instead (only the probe's candidate layers
# drop, 3-14, layer 14 at 0.5; twice the KL weight); L, 40 more
# (SKIP_MINUTES_L) the same; N, 40 (SKIP_MINUTES_N), with SKIP_NESTED (every
# student pass drops the top 1-8 of layers 7-14); checkpoints in
# $V2CPU/skip/{i,j,k,l,n}; re-running `skip` resumes. `gpu` ends with one
# phase of K's recipe (SKIP_GPU, the 24 layers' candidates) at 2,048 for 1.5
# minutes (TUNE_GPU_ARGS) on the SKIP_MIX data.
# TRAIN_ARGS (GPU) and CPU_ARGS (CPU) override the recipes; models/README.md
# gives the runs.
set -eu
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
T=$REPO/scripts/model/train
G=$REPO/.gpu-train
PY=${PYTHON:-python3}
RECIPE="--layer-dropout 0.2 --early-exit 0.3 --exit-from 4"
SHAPE="--layers 24 --dim 192 --heads 6 --kv-heads 2 --ffn 512 --seq 2048"
TRAIN_ARGS=${TRAIN_ARGS:-"$SHAPE $RECIPE --induction 0.2 --exit-rotation 4 --batch 64 --micro 16 --lr 2e-3 --min-lr 2e-4 --max-tokens 100e6 --max-minutes 7 --threads 16 --seed 0"}
TUNE="--answer-loss --induction 0 --lr 5e-4 --min-lr 5e-5 --max-tokens 1e9"
SKIP_MIX="yesno=6,copy=1"
SKIP="--layer-dropout 0.4 --distill 1"
SKIP_CPU="--layer-dropout 0.5 --dropout-layers 3-14 --distill 2"  # 16 layers: the probe's candidates 3-14
SKIP_NESTED="--layer-dropout 1 --dropout-layers 7-14 --dropout-nested --distill 1"  # 16 layers: N
SKIP_GPU="--layer-dropout 0.5 --dropout-layers 3-22 --distill 2"  # 24 layers: 3-22
TUNE_GPU_ARGS=${TUNE_GPU_ARGS:-"$TUNE $RECIPE $SKIP_GPU --turn-weight 0.5 --exit-rotation 4 --seq 2048 --batch 64 --micro 16 --max-minutes 1.5 --threads 16 --seed 0"}
V2CPU=${V2CPU:-/work/ilpd-train-v2cpu}
CPU_ARGS=${CPU_ARGS:-"--device cpu --threads 2 --seed 0 --eval-every 100 $RECIPE --exit-rotation 8"}

# context_phase DIR CKPT ARGS...: continue CKPT at a 2,048 context for CPU_MINUTES_B
# (a wall-clock budget: the token budget is lifted, or a phase that starts past
# ARGS' --max-tokens would end at once)
context_phase() {
    d=$1 ck=$2
    shift 2
    /usr/bin/python3 "$T/train.py" --ckpt-dir "$d" "$@" --init-from "$ck" --max-tokens 1e9 --seq 2048 \
        --batch 4 --micro 1 --lr 5e-4 --min-lr 1e-4 --eval-windows 8 --max-minutes ${CPU_MINUTES_B:-15} >> "$d/train.log" 2>&1
}

# tune_data DIR TOKENIZER_MODEL MIX: the tuning data, in DIR/data (DIR/models:
# the tokenizer and the held-out split, the same as the main data's)
tune_data() {
    mkdir -p "$1/models"
    cp "$2" "$1/models/tokenizer.model"
    [ -f "$1/data/train.bin" ] || /usr/bin/python3 "$T/make_data.py" --recipe v2 --skip-tokenizer --vocab 4096 \
        --task-frac 0.85 --epochs 4 --mix "$3" --out "$1/data" --models "$1/models"
}

# need MODULE...: the Python modules a step imports (/usr/bin/python3: numpy,
# sentencepiece, torch), from Debian's python3-MODULE packages, installed when
# root (as make deps does); otherwise the command that installs them, and stop
need() {
    missing=""
    for m in "$@"; do
        /usr/bin/python3 -c "import $m" 2>/dev/null || missing="$missing python3-$m"
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "train_v2.sh: installing$missing" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2 &&
            return 0
    fi
    echo "train_v2.sh: missing$missing: sudo apt-get install -y --no-install-recommends$missing" >&2
    exit 1
}

# gpu_failed: a training step of `gpu` failed; show why (the log is in $OUT) and stop
gpu_failed() {
    tail -40 "$OUT/train.log" >&2
    exit 1
}

case "${1:-}" in
prepare)
    need numpy sentencepiece
    mkdir -p "$G/data" "$G/models/heldout"
    grep -qx '/.gpu-train/' "$REPO/.git/info/exclude" 2>/dev/null || echo /.gpu-train/ >> "$REPO/.git/info/exclude"
    /usr/bin/python3 "$T/make_data.py" --recipe v2 --vocab 4096 --task-frac 0.7 --epochs ${EPOCHS:-52} \
        --out "$G/data" --models "$G/models"
    xz -T2 -6 -f "$G/data/train.bin"
    rm -rf "$G/tune"
    tune_data "$G/tune" "$G/models/tokenizer.model" "$SKIP_MIX"
    xz -T2 -6 -f "$G/tune/data/train.bin"
    du -sh "$G"
    ;;
gpu)
    [ -n "${OUT:-}" ] || { echo "train_v2.sh gpu: \$OUT is not set (run it through the device tool)" >&2; exit 2; }
    PYTHONUNBUFFERED=1 $PY "$T/train.py" --ckpt-dir /tmp/v2ck --data-dir "$G/data" --device cuda \
        --vocab "$($PY -c "import json;print(json.load(open('$G/data/meta.json'))['vocab'])")" $TRAIN_ARGS \
        > "$OUT/train.log" 2>&1 || gpu_failed
    PYTHONUNBUFFERED=1 $PY "$T/train.py" --ckpt-dir /tmp/v2tune --data-dir "$G/tune/data" --device cuda \
        --init-from "$(ls /tmp/v2ck/ckpt_*.pt | tail -1)" $TUNE_GPU_ARGS >> "$OUT/train.log" 2>&1 || gpu_failed
    grep -E '^step .* heldout' "$OUT/train.log" | tail -8
    { cat /tmp/v2ck/loss.csv; tail -n +2 /tmp/v2tune/loss.csv; } > "$OUT/loss.csv"
    $PY - <<PYEOF
import glob, torch
ck = torch.load(sorted(glob.glob("/tmp/v2tune/ckpt_*.pt"))[-1], map_location="cpu")
ck.pop("opt")
torch.save(ck, "/tmp/v2tune/final.pt")
PYEOF
    split -b 15M -d /tmp/v2tune/final.pt "$OUT/final.pt.part-"
    ;;
finish)
    D=${2:?usage: train_v2.sh finish FILES_AT}
    mkdir -p /work/ilpd-train-v2
    cat "$D"/final.pt.part-* > /work/ilpd-train-v2/ckpt_final.pt
    cp "$D/loss.csv" "$D/train.log" /work/ilpd-train-v2/
    echo "checkpoint: /work/ilpd-train-v2/ckpt_final.pt (model only). Next:"
    echo "  eval.py --ckpt /work/ilpd-train-v2/ckpt_final.pt --heldout $G/models/heldout --tokenizer $G/models/tokenizer.model"
    echo "  to adopt it: copy $G/models/{tokenizer.model,tasks.json,heldout} into models/, then"
    echo "  export.py --ckpt /work/ilpd-train-v2/ckpt_final.pt --check, golden.py, and recalibrate the probes"
    echo "  (on at least 300 prompts a structured class: models/README.md, \"The gate in approximate mode\")"
    ;;
cpu)
    need numpy sentencepiece torch
    # FROM_V1=1: continue the published v1 model (its tokenizer, its weights
    # rebuilt from models/ilpd-demo-F16.gguf) instead of starting from scratch.
    if [ "${FROM_V1:-0}" = 1 ]; then
        mkdir -p "$V2CPU/models"
        cp "$REPO/models/tokenizer.model" "$V2CPU/models/"
        TOK="--skip-tokenizer"
        [ -f "$V2CPU/v1.pt" ] || /usr/bin/python3 "$T/ckpt_from_gguf.py" --out "$V2CPU/v1.pt"
        START="--init-from $V2CPU/v1.pt --lr 1e-3 --min-lr 1e-4"
        MIN_A=${CPU_MINUTES_A:-67}
    else
        TOK=""
        START="--layers 16 --dim 128 --heads 4 --kv-heads 2 --ffn 384 --lr 2e-3 --min-lr 2e-4"
        MIN_A=${CPU_MINUTES_A:-85}
    fi
    [ -f "$V2CPU/data/train.bin" ] ||
        /usr/bin/python3 "$T/make_data.py" --recipe v2 $TOK --vocab 4096 --task-frac 0.7 --epochs ${EPOCHS:-16} \
            --out "$V2CPU/data" --models "$V2CPU/models"
    mkdir -p "$V2CPU/a" "$V2CPU/b"
    A="--data-dir $V2CPU/data --max-tokens ${CPU_TOKENS:-30e6} $CPU_ARGS"
    /usr/bin/python3 "$T/train.py" --ckpt-dir "$V2CPU/a" $A $START --seq 512 --batch 16 --micro 4 \
        --max-minutes $MIN_A >> "$V2CPU/a/train.log" 2>&1
    last=$(ls "$V2CPU"/a/ckpt_*.pt | tail -1)
    context_phase "$V2CPU/b" "$last" $A
    echo "checkpoint: $(ls "$V2CPU"/b/ckpt_*.pt | tail -1). Next: eval.py --ckpt it" \
         "--heldout $V2CPU/models/heldout --tokenizer $V2CPU/models/tokenizer.model"
    ;;
copy)
    CK=${2:?usage: train_v2.sh copy CKPT DATA_DIR}
    DATA=${3:?usage: train_v2.sh copy CKPT DATA_DIR}
    need numpy sentencepiece torch
    C="--data-dir $DATA --max-tokens 1e9 $CPU_ARGS --eval-windows 16 --eval-every 50"
    mkdir -p "$V2CPU/copy-c" "$V2CPU/copy-d" "$V2CPU/copy-e"
    if ! ls "$V2CPU"/copy-d/ckpt_*.pt >/dev/null 2>&1; then
        /usr/bin/python3 "$T/train.py" --ckpt-dir "$V2CPU/copy-c" $C --init-from "$CK" --induction 1.0 \
            --until-copy 0.95 --seq 128 --batch 32 --micro 8 --lr 1e-3 --min-lr 5e-4 --warmup 0.01 \
            --max-minutes ${COPY_C_MINUTES:-40} >> "$V2CPU/copy-c/train.log" 2>&1
        CK=$(ls "$V2CPU"/copy-c/ckpt_*.pt | tail -1)
    fi
    if ! ls "$V2CPU"/copy-e/ckpt_*.pt >/dev/null 2>&1; then
        /usr/bin/python3 "$T/train.py" --ckpt-dir "$V2CPU/copy-d" $C --init-from "$CK" --induction 0.2 \
            --seq 512 --batch 16 --micro 4 --lr 1e-3 --min-lr 1e-4 --max-minutes ${COPY_MINUTES:-70} \
            >> "$V2CPU/copy-d/train.log" 2>&1
    fi
    context_phase "$V2CPU/copy-e" "$(ls "$V2CPU"/copy-d/ckpt_*.pt | tail -1)" $C --induction 0.2 --eval-every 100
    grep copy "$V2CPU/copy-e/train.log" | tail -1
    echo "checkpoint: $(ls "$V2CPU"/copy-e/ckpt_*.pt | tail -1)"
    ;;
tune)
    CK=${2:?usage: train_v2.sh tune CKPT TOKENIZER_MODEL}
    TOKM=${3:?usage: train_v2.sh tune CKPT TOKENIZER_MODEL}
    need numpy sentencepiece torch
    tune_data "$V2CPU/tune" "$TOKM" copy=1
    mkdir -p "$V2CPU/tune/run"
    /usr/bin/python3 "$T/train.py" --ckpt-dir "$V2CPU/tune/run" --data-dir "$V2CPU/tune/data" $CPU_ARGS $TUNE \
        --init-from "$CK" --seq 512 --batch 16 --micro 4 --max-minutes ${TUNE_MINUTES:-40} --eval-windows 16 \
        >> "$V2CPU/tune/run/train.log" 2>&1
    echo "checkpoint: $(ls "$V2CPU"/tune/run/ckpt_*.pt | tail -1)"
    ;;
skip)
    CK=${2:?usage: train_v2.sh skip CKPT TOKENIZER_MODEL}
    TOKM=${3:?usage: train_v2.sh skip CKPT TOKENIZER_MODEL}
    need numpy sentencepiece torch
    tune_data "$V2CPU/skip" "$TOKM" "$SKIP_MIX"
    S="--data-dir $V2CPU/skip/data $CPU_ARGS $TUNE --seq 512 --batch 16 --micro 4"
    prev=$CK
    for phase in "i ${SKIP_MINUTES_I:-45} $SKIP" "j ${SKIP_MINUTES_J:-35} $SKIP --turn-weight 0.5" \
                 "k ${SKIP_MINUTES_K:-45} $SKIP_CPU --turn-weight 0.5" "l ${SKIP_MINUTES_L:-40} $SKIP_CPU --turn-weight 0.5" \
                 "n ${SKIP_MINUTES_N:-40} $SKIP_NESTED --turn-weight 0.5"; do
        set -- $phase
        d=$V2CPU/skip/$1 m=$2
        shift 2
        mkdir -p "$d"  # a finished phase resumes and ends at once
        /usr/bin/python3 "$T/train.py" --ckpt-dir "$d" $S "$@" --init-from "$prev" --max-minutes "$m" >> "$d/train.log" 2>&1
        prev=$(ls "$d"/ckpt_*.pt | tail -1)
    done
    echo "checkpoint: $prev"
    ;;
*)
    sed -n '2,/^set /{/^#/p}' "$0" >&2  # the header comment
    exit 2
    ;;
esac
