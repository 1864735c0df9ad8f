#!/usr/bin/env bash
# Step time of the Python package's compression_hook against PyTorch's own, both
# measured in this run: 2 ranks with one thread each, the CIFAR ResNet-18, batch
# 32 per rank, synthetic data, Gloo over loopback (scripts/bench_train_dist_ddp.py).
#   compression_hook at none / DDP as it comes                         goal <= 1.02
#   compression_hook at powersgd:2 / DDP with powerSGD_hook (rank 2)  goal <= 1.0
# Each of the four runs REPS times (default 3), alternating; a run times STEPS steps
# (default 8) after 3 untimed ones, each step the slowest rank's. The ratios are of
# the medians over the runs of each run's median step.
#
#   scripts/bench-hook.sh
# Runs with pip's torch (scripts/setup-pip-torch.sh's environment; the hook needs
# PyTorch 2.x) and the package as `scripts/test-python.sh --torch pip` installs it
# in $ACC_BUILD_DIR (default build-pip)/python-site: run that first.
set -euo pipefail
cd "$(dirname "$0")/.."
site=${ACC_BUILD_DIR:-build-pip}/python-site
python=$(scripts/setup-pip-torch.sh)
export PYTHONPATH="$(cd "$(dirname "$site")" && pwd)/python-site${PYTHONPATH:+:$PYTHONPATH}"
"$python" -c 'import accordion' 2>/dev/null ||
    { echo "bench-hook.sh: error: $site: no accordion package there (scripts/test-python.sh --torch pip installs it)" >&2; exit 1; }
reps=${REPS:-3}
steps=${STEPS:-8}
work=$(mktemp -d)
trap 'kill -KILL $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

hooks=(none accordion-none powersgd accordion-powersgd)
for ((r = 1; r <= reps; r++)); do
    for hook in "${hooks[@]}"; do
        echo "bench-hook.sh: run $r/$reps: $hook" >&2
        OMP_NUM_THREADS=1 "$python" scripts/bench_train_dist_ddp.py --hook "$hook" --steps "$steps" --warmup 3 \
            --rank-k 2 --port $((29600 + r)) >>"$work/$hook.jsonl"
    done
done
"$python" - "$work" "${hooks[@]}" <<'PY'
import json, statistics, sys
work, hooks = sys.argv[1], sys.argv[2:]
median = {}
for hook in hooks:
    runs = [json.loads(line) for line in open(f"{work}/{hook}.jsonl")]
    median[hook] = statistics.median(r["median"] for r in runs)
    print(f"{hook:20s} median step {median[hook] * 1000:8.1f} ms over {len(runs)} runs "
          f"(fastest run {min(r['median'] for r in runs) * 1000:.1f} ms)")
for ours, theirs, goal in (("accordion-none", "none", 1.02), ("accordion-powersgd", "powersgd", 1.0)):
    ratio = median[ours] / median[theirs]
    print(f"{ours} / {theirs}: {ratio:.3f} (goal <= {goal}: {'met' if ratio <= goal else 'not met'})")
PY
