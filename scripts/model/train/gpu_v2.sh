#!/bin/sh
# Demo model v2 on a GPU machine (the device tool), in three steps:
#
#   sh scripts/model/train/gpu_v2.sh prepare        # here: data, tokenizer, xz'd token stream
#   (device) sh scripts/model/train/gpu_v2.sh train # there: train, write the weights to $OUT
#   sh scripts/model/train/gpu_v2.sh finish DIR     # here: DIR = the run's files_at; export
#
# The GPU machine has PyTorch but no SentencePiece and no package access, and
# at most 64 MiB travels each way (16 MiB a file back), so the token stream is
# made here and travels xz-compressed in .gpu-train/ (git-ignored, named in
# the run's carry), and the weights come back as 15 MiB parts of a model-only
# checkpoint. The recipe (shape, tokens, LayerSkip weights) is below and in
# models/README.md; TRAIN_ARGS overrides it.
set -eu
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
T=$REPO/scripts/model/train
G=$REPO/.gpu-train
PY=${PYTHON:-python3}
SHAPE="--layers 24 --dim 192 --heads 6 --kv-heads 2 --ffn 512 --seq 2048"
RECIPE="--layer-dropout 0.2 --early-exit 0.3 --exit-rotation 4 --exit-from 4"
TRAIN_ARGS=${TRAIN_ARGS:-"$SHAPE $RECIPE --batch 64 --micro 16 --lr 2e-3 --min-lr 2e-4 --max-tokens 100e6 --max-minutes 7 --threads 16 --seed 0"}

case "${1:-}" in
prepare)
    mkdir -p "$G/data" "$G/models/heldout"
    grep -qx '/.gpu-train/' "$REPO/.git/info/exclude" 2>/dev/null || echo /.gpu-train/ >> "$REPO/.git/info/exclude"
    /usr/bin/python3 "$T/make_data.py" --recipe v2 --vocab 4096 --task-frac 0.7 --epochs ${EPOCHS:-52} \
        --out "$G/data" --models "$G/models"
    xz -T2 -6 -f "$G/data/train.bin"
    du -sh "$G"
    ;;
train)
    [ -n "${OUT:-}" ] || { echo "gpu_v2.sh train: \$OUT is not set (run it through the device tool)" >&2; exit 2; }
    PYTHONUNBUFFERED=1 $PY "$T/train.py" --ckpt-dir /tmp/v2ck --data-dir "$G/data" --device cuda \
        --vocab "$($PY -c "import json;print(json.load(open('$G/data/meta.json'))['vocab'])")" $TRAIN_ARGS \
        | tee "$OUT/train.log"
    cp /tmp/v2ck/loss.csv "$OUT/"
    $PY - <<EOF
import glob, torch
ck = torch.load(sorted(glob.glob("/tmp/v2ck/ckpt_*.pt"))[-1], map_location="cpu")
ck.pop("opt")
torch.save(ck, "/tmp/v2ck/final.pt")
EOF
    split -b 15M -d /tmp/v2ck/final.pt "$OUT/final.pt.part-"
    ;;
finish)
    D=${2:?usage: gpu_v2.sh finish FILES_AT}
    mkdir -p /work/ilpd-train-v2
    cat "$D"/final.pt.part-* > /work/ilpd-train-v2/ckpt_final.pt
    cp "$D/loss.csv" "$D/train.log" /work/ilpd-train-v2/
    echo "checkpoint: /work/ilpd-train-v2/ckpt_final.pt (model only). Next:"
    echo "  eval.py --ckpt /work/ilpd-train-v2/ckpt_final.pt --heldout $G/models/heldout --tokenizer $G/models/tokenizer.model"
    echo "  to adopt it: copy $G/models/{tokenizer.model,tasks.json,heldout} into models/, then"
    echo "  export.py --ckpt /work/ilpd-train-v2/ckpt_final.pt --check, golden.py, and recalibrate the probes"
    ;;
*)
    sed -n 2,13p "$0" >&2
    exit 2
    ;;
esac
