#!/usr/bin/env bash
# Times regime-detect, process start included, on a 300-epoch x 62-parameter
# file (ResNet-18 shapes). Prints the median and the fastest of 20 runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${ACC_BUILD_DIR:-build}/bin/regime-detect
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/python.sh
"$(acc_python)" examples/synth_grads.py -o "$work/grads.h5" --epochs 300
times=()
for _ in $(seq 20); do
    start=$(date +%s%N)
    "$bin" "$work/grads.h5" -o "$work/sched.h5" -q
    times+=($(( ($(date +%s%N) - start) / 1000 )))
done
sorted=($(printf '%s\n' "${times[@]}" | sort -n))
awk -v median="${sorted[10]}" -v fastest="${sorted[0]}" \
    'BEGIN { printf "regime-detect, 300 epochs x 62 parameters, 20 runs: median %.1f ms, fastest %.1f ms\n", median / 1000, fastest / 1000 }'
