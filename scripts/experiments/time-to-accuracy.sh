#!/usr/bin/env bash
# The time-to-accuracy study of docs/results.md: what Accordion and GraVAC save
# in wall-clock time where the network is slow. Two ranks, one in each of two
# network namespaces joined by a link that tc's token bucket filter shapes
# (scripts/shaped-link.sh; needs root), train Fashion-MNIST in the Accordion
# study's setting (8 epochs, batch 128 per rank, lr 0.05 divided by 10 from
# epoch 6, momentum 0.9, weight decay 1e-4, one thread per rank) with:
#   dense                          no compression
#   topk10x, topk100x              Top-k 0.1 and 0.01
#   powersgd-r4, powersgd-r2, powersgd-r1
#                                  PowerSGD rank 4, 2 and 1
#   accordion-topk                 Accordion online, Top-k 0.1 critical, 0.01 elsewhere
#   accordion-powersgd             Accordion online, rank 2 critical, rank 1 elsewhere
#   accordion-powersgd-r4          Accordion online, rank 4 critical, rank 2 elsewhere
#   gravac-FAMILY-POLICY           GraVAC (topk, dgc, powersgd; exp, geo) at epsilon 0.7,
#                                  its window 50 steps, not tied to an epoch's end
#   auto                           train-dist --auto within Accordion's rank 2 / rank 1 budget
#                                  (candidates none, PowerSGD ranks 1, 2, 4, Top-k 0.01)
#   auto-r4                        the same within Accordion's rank 4 / rank 2 budget
# Every run's metrics file goes to OUT/<link>/<model>/<variant>/seed<S>.h5 (finished
# runs are kept, so the script resumes); the tables to OUT/time-to-accuracy.md, the
# runs they use, epoch by epoch, to OUT/runs.csv. TTA_RUNS: such CSV files (e.g.
# docs/results/time-to-accuracy-runs.csv) whose runs count where OUT has no file.
# Time is training time without evaluation (the metrics' per-epoch seconds);
# the target accuracy is dense's final test accuracy, mean over seeds, minus
# TARGET_GAP points [0.5].
#
#   scripts/experiments/time-to-accuracy.sh [OUT] [SEEDS] [MODELS] [LINKS] [VARIANTS]
#       defaults: build/time-to-accuracy "1 2 3" "mlp cnn" "100mbit 20mbit" (every variant)
# A link is a rate as tc writes it, with +DELAY to hold every packet that long each
# way (20mbit+5ms; needs tc's netem in the kernel), or loopback: both ranks on this
# machine's loopback (train-dist --nproc 2), where compute, not the link, bounds a step.
# TTA_EXTRA_<model>: more training options for that model, e.g. TTA_EXTRA_cnn="--train-samples 12000".
set -euo pipefail
# One function, read whole before it runs: an edit during a study does not reach it.
main() {
    source "$(dirname "$0")/common.sh"
    out=${1:-$here/build/time-to-accuracy}
    seeds=${2:-1 2 3}
    models=${3:-mlp cnn}
    links=${4:-100mbit 20mbit}
    bin=${ACC_BUILD_DIR:-$here/build}/bin  # the programs of that build, else those on PATH
    [ -x "$bin/train-dist" ] || { echo "time-to-accuracy.sh: error: $bin/train-dist: build first (scripts/build.sh)" >&2; exit 1; }
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    declare -A args=(
        [dense]="--compress none"
        [topk10x]="--compress topk:0.1"
        [topk100x]="--compress topk:0.01"
        [powersgd-r4]="--compress powersgd:4"
        [powersgd-r2]="--compress powersgd:2"
        [powersgd-r1]="--compress powersgd:1"
        [accordion-topk]="--accordion --eta 0.5 --interval 2 --low topk:0.1 --high topk:0.01"
        [accordion-powersgd]="--accordion --eta 0.5 --interval 2 --low powersgd:2 --high powersgd:1"
        [accordion-powersgd-r4]="--accordion --eta 0.5 --interval 2 --low powersgd:4 --high powersgd:2"
        [auto]="--auto --eta 0.5 --interval 2 --low powersgd:2 --high powersgd:1"
        [auto-r4]="--auto --eta 0.5 --interval 2 --low powersgd:4 --high powersgd:2"
    )
    declare -A policy=([exp]=exponential [geo]=geometric)
    for family in topk dgc powersgd; do
        for p in exp geo; do
            args[gravac-$family-$p]="--gravac $family --gravac-policy ${policy[$p]} --gravac-epsilon 0.7 --gravac-window 50"
        done
    done
    all="dense topk10x topk100x powersgd-r4 powersgd-r2 powersgd-r1 accordion-topk accordion-powersgd
         accordion-powersgd-r4 gravac-topk-exp gravac-topk-geo gravac-dgc-exp gravac-dgc-geo gravac-powersgd-exp
         gravac-powersgd-geo auto auto-r4"
    variants=${5:-$all}
    for v in $variants; do
        [ -n "${args[$v]+x}" ] || { echo "time-to-accuracy.sh: error: no variant '$v' (one of: $all)" >&2; exit 2; }
    done
    for link in $links; do
        delay=
        [[ $link == *+* ]] && delay=${link#*+}
        # loopback: both ranks on this machine's loopback, as train-dist --nproc 2 runs them.
        if [ "$link" != loopback ]; then
            shaped_link_up "${link%%+*}" 100ms $delay ||
                { echo "time-to-accuracy.sh: error: no shaped link: $SHAPED_WHY" >&2; exit 1; }
        fi
        for model in $models; do
            extra_name=TTA_EXTRA_$model
            # shellcheck disable=SC2206
            extra=(${!extra_name:-})
            common=(--model "$model" --dataset fashion-mnist --epochs 8 --batch-size 128 --lr 0.05 --lr-decay-epochs 6
                    --momentum 0.9 --weight-decay 1e-4 --threads 1 --timeout 600 -q "${extra[@]+"${extra[@]}"}")
            [ "$model" = mlp ] && common+=(--hidden-size 128)
            for seed in $seeds; do
                for v in $variants; do
                    dir=$out/$link/$model/$v
                    file=$dir/seed$seed.h5
                    complete "$file" && continue
                    echo "$link $model $v seed $seed ..." >&2
                    mkdir -p "$dir"
                    # shellcheck disable=SC2086
                    ranks=(shaped_ranks "$bin/train-dist")
                    [ "$link" != loopback ] || ranks=("$bin/train-dist" --nproc 2)
                    SHAPED_RANK1_LOG=$dir/seed$seed.rank1.log "${ranks[@]}" "${common[@]}" --seed "$seed" \
                        ${args[$v]} --metrics "$file" --checkpoint-dir "$dir/ckpt" --force 2>"$dir/seed$seed.log" || {
                        echo "time-to-accuracy.sh: error: $link $model $v seed $seed failed, see $dir/seed$seed.log:" >&2
                        tail -3 "$dir/seed$seed.log" >&2
                        exit 1
                    }
                done
            done
        done
        [ "$link" = loopback ] || shaped_link_down
    done
    saved=()
    for f in ${TTA_RUNS:-}; do
        saved+=(--runs "$f")
    done
    "$python" "$here/scripts/experiments/time_to_accuracy_report.py" --out "$out" --seeds "$seeds" --models "$models" \
        --links "$links" --variants "$variants" --target-gap "${TARGET_GAP:-0.5}" "${saved[@]+"${saved[@]}"}" \
        --save-runs "$out/runs.csv" --commit "$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)" |
        tee "$out/time-to-accuracy.md"
}

main "$@"
