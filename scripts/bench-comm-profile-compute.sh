#!/usr/bin/env bash
# comm-profile --model's compute timing against PyTorch: the median forward and
# backward time per step of ResNet-18 (CIFAR-10 shape) and of the MLP
# (Fashion-MNIST shape), one thread, on random data, measured by comm-profile
# (LibTorch) and by a plain PyTorch loop over the same models written
# independently (tests/e2e/grad_dump_pytorch.py). Both sides run twice,
# alternating, and keep their lower medians. Prints both and the ratio
# comm-profile / PyTorch (the two should agree: same kernels, same work).
#   scripts/bench-comm-profile-compute.sh     STEPS=10 BATCH=32 by default
# BENCH_RAW=DIR keeps the raw data: every run's medians (compute.csv:
# model,batch,side,round,forward_seconds,backward_seconds) and the report;
# BENCH_FROM=DIR makes the report again from them.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACC_BUILD_DIR:-build}/bin/comm-profile
source scripts/bench-common.sh
trap bench_cleanup EXIT
steps=${STEPS:-10}
batch=${BATCH:-32}
work=$tmp

cat >"$work/loop.py" <<'PY'
import sys, time
import torch
import torch.nn.functional as F
sys.path.insert(0, "tests/e2e")
from grad_dump_pytorch import MLP, ResNet18

model_name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(1)
torch.manual_seed(0)
if model_name == "resnet18":
    model, x = ResNet18(), torch.randn(batch, 3, 32, 32)
else:
    model, x = MLP(784, 10), torch.randn(batch, 1, 28, 28)
y = torch.randint(0, 10, (batch,))
model.train()
forward, backward = [], []
for step in range(2 + steps):
    model.zero_grad()
    t0 = time.perf_counter()
    loss = F.cross_entropy(model(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    if step >= 2:
        forward.append(t1 - t0)
        backward.append(t2 - t1)
forward.sort(); backward.sort()
mid = lambda v: (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
print(mid(forward), mid(backward))
PY

ours() {
    "$bin" -q --collectives allreduce -e 64 -n "$steps" -w 2 --model "$1" --batch-size "$batch" --json |
        "$python" -c 'import json, sys; c = json.load(sys.stdin)["compute"]; print(c["forward_s"], c["backward_s"])'
}

if bench_measuring; then
    echo "model,batch,side,round,forward_seconds,backward_seconds" >"$raw/compute.csv"
    for model in mlp resnet18; do
        for round in 1 2; do
            echo "$model,$batch,comm-profile,$round,$(ours "$model" | tr ' ' ,)" >>"$raw/compute.csv"
            echo "$model,$batch,pytorch,$round,$("$python" "$work/loop.py" "$model" "$batch" "$steps" | tr ' ' ,)" \
                >>"$raw/compute.csv"
        done
    done
fi
bench_need compute.csv

# Each side's lower median of its two runs, per model and pass.
"$python" - "$raw/compute.csv" <<'PY' | bench_report
import csv, sys
best = {}
for r in csv.DictReader(open(sys.argv[1])):
    for p in ("forward", "backward"):
        key = (r["model"], int(r["batch"]), p, r["side"])
        best[key] = min(best.get(key, float("inf")), float(r[p + "_seconds"]))
print("%-9s %6s  %-8s %12s %12s %8s" % ("model", "batch", "pass", "ours ms", "PyTorch ms", "ratio"))
for model, batch, p in dict.fromkeys(k[:3] for k in best):
    o, t = best[(model, batch, p, "comm-profile")], best[(model, batch, p, "pytorch")]
    print("%-9s %6d  %-8s %12.3f %12.3f %8.2f" % (model, batch, p, o * 1e3, t * 1e3, o / t))
PY
