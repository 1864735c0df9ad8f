#!/usr/bin/env bash
# Training throughput on one GPU, both sides measured in this run: the CIFAR
# ResNet-18 on synthetic CIFAR-shaped data, SGD (lr 0.1, momentum 0.9, weight
# decay 1e-4), at each batch size of $BATCHES (default "128 256"):
#   PyTorch eager (scripts/gpu/bench_train_torch.py: two .item() a step)
#   grad-dump --device cuda                          goal >= 1.0x PyTorch eager
#   train-dist --device cuda --compress none          goal >= 1.0x PyTorch eager (one rank, NCCL)
#   train-dist --device cuda --compress powersgd:2    goal >= 0.85x train-dist's own uncompressed
#   the same with PowerSGD's rounds by CUDA kernels   goal >= 0.85x, as above (ACC_CUDA_KERNELS=all,
#                                                     which runs them until they are measured)
# The toolkit's figure is images per second over its epochs after the first (which
# warms up): $EPOCHS epochs (default 3) of $STEPS steps (default 50). Each
# measurement appends one JSON line to OUTDIR/train.jsonl (an "error" line when a
# run fails; the others go on) and keeps its output in OUTDIR/logs/. The train-dist
# runs also trace steps 10 to 19 of their first epoch, which the figure leaves out
# (--trace: OUTDIR/trace-train-RUN-BATCH.json, summarised in OUTDIR/traces-train.md).
#   scripts/gpu/bench-train.sh [OUTDIR]          OUTDIR defaults to gpu-results
# DEVICE=cpu (with small BATCHES, STEPS, TORCH_STEPS) checks the script without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-gpu-results}}
bin=${ACC_BUILD_DIR:-build-gpu}/bin
device=${DEVICE:-cuda}
batches=${BATCHES:-128 256}
steps=${STEPS:-50}
epochs=${EPOCHS:-3}
torch_steps=${TORCH_STEPS:-100}
torch_warmup=${TORCH_WARMUP:-10}
threads=${THREADS:-0}
source scripts/python.sh
python=$(acc_python)
mkdir -p "$out/logs"
jsonl=$out/train.jsonl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# record BATCH RUN LOG COMMAND...: runs the command; appends its figure (or its failure) to train.jsonl.
# The command prints the program's --json summary (toolkit) or the script's JSON line (PyTorch).
record() {
    local batch=$1 run=$2 log=$3
    shift 3
    echo "bench-train: batch $batch, $run: $*" >&2
    if "$@" >"$work/out.json" 2>"$out/logs/$log"; then
        if "$python" - "$work/out.json" "$batch" "$run" >>"$jsonl" 2>>"$out/logs/$log" <<'PY'; then
import json, sys
text = open(sys.argv[1]).read().strip()
try:
    data = json.loads(text)  # a program's summary (indented)
except json.JSONDecodeError:
    data = json.loads(text.splitlines()[-1])  # the PyTorch script's last line
row = {"bench": "train", "batch": int(sys.argv[2]), "run": sys.argv[3]}
if "images_per_second" in data:  # the PyTorch side
    row["images_per_second"] = data["images_per_second"]
    row["device"] = data["device"]
else:  # a toolkit program's --json summary: the epochs after the first
    timed = data["trained"][1:] or data["trained"]
    seconds = sum(e["seconds"] for e in timed)
    row["images_per_second"] = sum(e["samples"] for e in timed) / seconds
    row["epochs_timed"] = len(timed)
print(json.dumps(row))
PY
            tail -1 "$jsonl" >&2
            return 0
        fi
    fi
    echo "bench-train: batch $batch, $run FAILED (log: logs/$log)" >&2
    tail -5 "$out/logs/$log" >&2 || true
    "$python" -c 'import json, sys; print(json.dumps({"bench": "train", "batch": int(sys.argv[1]), "run": sys.argv[2],
        "error": "failed, see logs/" + sys.argv[3]}))' "$batch" "$run" "$log" >>"$jsonl"
}

# A train-dist run's name in train.jsonl, figures.md and traces-train.md.
train_run() {
    case $1 in
    none) echo "train-dist --compress none" ;;
    powersgd2) echo "train-dist --compress powersgd:2" ;;
    powersgd2-kernels) echo "train-dist --compress powersgd:2, CUDA kernels (ACC_CUDA_KERNELS=all)" ;;
    esac
}

thread_args=()
[ "$threads" -gt 0 ] && thread_args=(--threads "$threads")
for batch in $batches; do
    samples=$((steps * batch))
    common=(--model resnet18 --dataset synthetic --train-samples "$samples" --test-samples "$batch" --eval-every 0
        --batch-size "$batch" --epochs "$epochs" --lr 0.1 --momentum 0.9 --weight-decay 1e-4 --device "$device"
        -q --json "${thread_args[@]}")
    record "$batch" "PyTorch eager" "torch-$batch.log" "$python" scripts/gpu/bench_train_torch.py --device "$device" \
        --batch "$batch" --steps "$torch_steps" --warmup "$torch_warmup" "${thread_args[@]}"
    rm -f "$work/grads.h5" "$work/grads.ckpt"
    record "$batch" "grad-dump" "grad-dump-$batch.log" "$bin/grad-dump" "${common[@]}" -o "$work/grads.h5" \
        --checkpoint "$work/grads.ckpt"
    # RUN-NAME KERNELS SPEC: train-dist's runs (KERNELS: ACC_CUDA_KERNELS's value, 1 for the default kernels).
    for run in "none 1 none" "powersgd2 1 powersgd:2" "powersgd2-kernels all powersgd:2"; do
        read -r name kernels spec <<<"$run"
        rm -rf "$work/ckpt"
        record "$batch" "$(train_run "$name")" "train-dist-$name-$batch.log" env ACC_CUDA_KERNELS="$kernels" \
            "$bin/train-dist" "${common[@]}" --compress "$spec" --metrics "$work/metrics.h5" \
            --checkpoint-dir "$work/ckpt" --trace "$out/trace-train-$name-$batch.json"
    done
done

# Where a training step's time goes: the traces summarised (scripts/trace-summary.py).
rm -f "$out/traces-train.md"
for batch in $batches; do
    for name in none powersgd2 powersgd2-kernels; do
        trace=$out/trace-train-$name-$batch.json
        [ -s "$trace" ] || continue
        { echo "## $(train_run "$name"), batch $batch"; echo
          "$python" scripts/trace-summary.py "$trace" 2>&1; } >>"$out/traces-train.md"
    done
done
