#!/usr/bin/env bash
# What recording gradients costs grad-dump: ResNet-18 (CIFAR shapes, synthetic
# data) training steps with and without the gradient recorder, interleaved in
# the same run, and the ratio of their times (goal: at most 1.03). One thread,
# batch 16 and 40 measured steps by default: a few minutes on two cores.
#   scripts/bench-grad-dump-overhead.sh [BATCH] [STEPS] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACC_BUILD_DIR:-build}
[ -d "$build" ] || scripts/build.sh >/dev/null
cmake --build "$build" --target bench_grad_record >/dev/null
"$build/bin/bench_grad_record" resnet18 "${1:-16}" "${2:-40}" "${3:-1}"
