#!/usr/bin/env bash
# The main job: sets up, builds, and finds the critical regimes of a ResNet-18
# training profile, writing a PowerSGD schedule to build/example/sched.h5.
# The profile is a synthetic gradient-statistics file written with h5py by
# examples/synth_grads.py (300 epochs, CIFAR-10 ResNet-18 shapes, LR decays
# after epochs 150 and 250).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
out=${ACC_BUILD_DIR:-build}/example
mkdir -p "$out"
/usr/bin/python3 examples/synth_grads.py -o "$out/grads.h5" --epochs 300
"${ACC_BUILD_DIR:-build}"/bin/regime-detect "$out/grads.h5" --eta 0.5 --low powersgd:2 --high powersgd:1 -o "$out/sched.h5"
