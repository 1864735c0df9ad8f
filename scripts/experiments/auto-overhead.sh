#!/usr/bin/env bash
# What train-dist --auto costs where compression does not pay: both ranks on this
# machine's loopback (train-dist --nproc 2), where compute bounds a step, dense
# (--compress none) against --auto within Accordion's PowerSGD rank 2 / rank 1
# budget, in the time-to-accuracy study's setting (time-to-accuracy.sh runs them).
#
# A machine's speed drifts from one minute to the next by as much as the goal (3 %),
# so the runs are paired tightly: each seed's runs go in blocks of dense, auto, auto,
# dense (ABBA: a drift that is linear over the block reaches both variants alike),
# REPEATS blocks per seed. Block R's runs go to OUT/rR/loopback/<model>/<variant>/seed<S>.h5
# (finished runs are kept, so the script resumes); the table (scripts/experiments/
# auto_overhead_report.py) to OUT/auto-overhead.md, its runs, epoch by epoch, to
# OUT/auto-overhead-runs.csv. Run it on an otherwise idle machine.
#
#   scripts/experiments/auto-overhead.sh [OUT] [SEEDS] [MODELS] [REPEATS]
#       defaults: build/auto-overhead "1 2 3" "mlp cnn" 1
# TTA_EXTRA_<model> as for time-to-accuracy.sh (the CNN's default: --train-samples 12000,
# as in the time-to-accuracy study).
set -euo pipefail
main() {
    source "$(dirname "$0")/common.sh"
    out=${1:-$here/build/auto-overhead}
    seeds=${2:-1 2 3}
    models=${3:-mlp cnn}
    repeats=${4:-1}
    [[ $repeats =~ ^[1-9][0-9]*$ ]] ||
        { echo "auto-overhead.sh: error: REPEATS '$repeats': a count of blocks, 1 or more" >&2; exit 2; }
    export TTA_EXTRA_cnn=${TTA_EXTRA_cnn-"--train-samples 12000"}
    tta=$here/scripts/experiments/time-to-accuracy.sh
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    for model in $models; do
        for seed in $seeds; do
            for ((r = 1; r <= repeats; r++)); do
                # A block is two calls: dense then auto, then auto (in a second output) then dense.
                "$tta" "$out/r$r-a" "$seed" "$model" loopback "dense auto" >/dev/null
                "$tta" "$out/r$r-b" "$seed" "$model" loopback "auto dense" >/dev/null
            done
        done
    done
    "$python" "$here/scripts/experiments/auto_overhead_report.py" --out "$out" --repeats "$repeats" --seeds "$seeds" \
        --models "$models" --save-runs "$out/auto-overhead-runs.csv" \
        --commit "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" | tee "$out/auto-overhead.md"
}

main "$@"
