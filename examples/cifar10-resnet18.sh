#!/usr/bin/env bash
# Accordion's pipeline for ResNet-18 on CIFAR-10 with the paper's settings
# (Table 7): 300 epochs, 4 workers of batch 128, learning rate 0.1 x workers
# reached by a linear warm-up from 0.1 over 5 epochs, divided by 10 at epochs
# 150 and 250, Nesterov momentum 0.9, weight decay 1e-4; eta 0.5, a decision
# every 10 epochs. For users with the data (the binary distribution,
# cifar-10-batches-bin) and a machine with GPUs; on a CPU it takes days.
#
#   examples/cifar10-resnet18.sh DATA_DIR [powersgd|topk|batch] [OUT]
#
# powersgd: rank 2 in critical regimes, rank 1 elsewhere (the paper's Table 1).
# topk:     Top-k 99% and 10% (Figure 1).
# batch:    global batch 512 and 4096, the large one reached by accumulating
#           micro-batches of 128 per worker, never returning to the small one
#           (Tables 5 and 6).
# WORKERS (4), DEVICE (cuda) and SEEDS (42) may be set in the environment;
# every run goes to OUT (build/cifar10-<variant>), the table to OUT/table.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
data=${1:?usage: examples/cifar10-resnet18.sh DATA_DIR [powersgd|topk|batch] [OUT]}
variant=${2:-powersgd}
out=${3:-$here/build/cifar10-$variant}
workers=${WORKERS:-4} device=${DEVICE:-cuda}
[ -f "$data/data_batch_1.bin" ] || { echo "cifar10-resnet18.sh: error: $data: no data_batch_1.bin (the CIFAR-10 binary version)" >&2; exit 2; }
lr=$(awk -v workers="$workers" 'BEGIN { print 0.1 * workers }')
training=(--data-dir "$data" --device "$device" --lr "$lr" --warmup-epochs 5 --warmup-lr 0.1
          --lr-decay-epochs 150,250 --nesterov --momentum 0.9 --weight-decay 1e-4 --threads 4)
case $variant in
    powersgd) levels=(--low powersgd:2 --high powersgd:1 --online); training+=(--batch-size 128) ;;
    topk) levels=(--low topk:0.99 --high topk:0.1 --online); training+=(--batch-size 128) ;;
    batch) levels=(--mode batch --low 512 --high 4096 --monotone); training+=(--micro-batch-size 128) ;;
    *) echo "cifar10-resnet18.sh: error: $variant: expected powersgd, topk or batch" >&2; exit 2 ;;
esac
for seed in ${SEEDS:-42}; do
    bash "$here/examples/pipeline.sh" --out "$out/seed$seed" --seed "$seed" --model resnet18 --dataset cifar10 \
        --epochs 300 --eta 0.5 --interval 10 --nproc "$workers" --plots "${levels[@]}" -- "${training[@]}"
done
