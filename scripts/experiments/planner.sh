#!/usr/bin/env bash
# The planner study of docs/results.md: regime-detect --plan (levels chosen per
# layer and epoch within the error of Accordion's levels) against uniform low,
# uniform high and Accordion, on the Fashion-MNIST setting of the Accordion
# study (2 ranks, 8 epochs, batch 128 per rank, lr 0.05 divided by 10 from
# epoch 6, eta 0.5, a decision every 2 epochs, PowerSGD rank 2 low and rank 1
# high). Per model and seed:
#   grad-dump --profile                    the uncompressed run the schedules come from
#   regime-detect                          Accordion's schedule
#   regime-detect --plan powersgd:1..8     planned with Accordion's budget, PowerSGD candidates
#   regime-detect --plan topk:...          the same budget, Top-k candidates
#   uniform-topk                           the control of the Top-k plan: one Top-k fraction
#                                          everywhere, chosen so that it sends the plan's floats
#   train-dist                             low, high, uniform-topk, and the three schedules replayed
# The modelled exchange time comes from a comm-profile measurement on a 100 Mbit/s
# link between two network namespaces (as root; else on loopback, and the report
# says so), and with RUN_SHAPED=1 the first seed's five runs also train on that link.
# Every file goes under OUT/<model>/seed<S>/ (finished steps are kept, so the
# script resumes), the tables to OUT/planner.md.
#
#   scripts/experiments/planner.sh [OUT] [SEEDS] [MODELS]
#       defaults: build/planner "1 2 3" "mlp cnn"
# PLANNER_EXTRA_<model>: more training options for that model's runs, e.g. the
# study's PLANNER_EXTRA_cnn="--train-samples 12000".
set -euo pipefail
# One function, read whole before it runs: an edit during a study does not reach it.
main() {
    source "$(dirname "$0")/common.sh"
    out=${1:-$here/build/planner}
    seeds=${2:-1 2 3}
    models=${3:-mlp cnn}
    bin=${ACC_BUILD_DIR:-$here/build}/bin  # the programs of that build, else those on PATH
    [ -x "$bin/train-dist" ] || { echo "planner.sh: error: $bin/train-dist: build first (scripts/build.sh)" >&2; exit 1; }
    PATH=$bin:$PATH
    mkdir -p "$out"
    out=$(cd "$out" && pwd)

    # The network: comm-profile over the shaped link, once.
    comm=$out/comm-100mbit.h5
    link="100 Mbit/s link between two network namespaces"
    shaped=0
    if shaped_link_up 100mbit; then
        shaped=1
        if [ ! -f "$comm" ]; then
            echo "comm-profile on the $link ..." >&2
            # As scripts/experiments/shaped-model-check.sh measures it: the bandwidth past the
            # token bucket's burst, the latency from the small messages (8 B up), calls timed
            # four back to back as a step's exchange issues them.
            shaped_ranks "$bin/comm-profile" --collectives allreduce,allgather -b 8 -e 8M --fit-from 256K -n 10 -w 2 -m 4 \
                --timeout 120 -q -o "$comm.tmp" && mv "$comm.tmp" "$comm"
        fi
    else
        link="loopback (no shaped link: $SHAPED_WHY)"
        [ -f "$comm" ] || comm-profile --nproc 2 --collectives allreduce,allgather -b 8 -e 8M -n 10 -w 2 -m 4 -q -o "$comm"
    fi

    accordion=(--eta 0.5 --interval 2 --low powersgd:2 --high powersgd:1)
    ranks=powersgd:1,powersgd:2,powersgd:3,powersgd:4,powersgd:5,powersgd:6,powersgd:7,powersgd:8
    fractions=topk:0.001,topk:0.003,topk:0.01,topk:0.03,topk:0.1,topk:0.3,topk:1
    declare -A plan=([planned-powersgd]=$ranks [planned-topk]=$fractions)
    declare -A fixed=([low]=powersgd:2 [high]=powersgd:1)
    runs=(low high accordion planned-powersgd planned-topk uniform-topk)
    for model in $models; do
        extra_name=PLANNER_EXTRA_$model
        # shellcheck disable=SC2206
        extra=(${!extra_name:-})
        common=(--model "$model" --dataset fashion-mnist --epochs 8 --batch-size 128 --lr 0.05 --lr-decay-epochs 6
                --momentum 0.9 --weight-decay 1e-4 --threads 1 "${extra[@]+"${extra[@]}"}")
        [ "$model" = mlp ] && common+=(--hidden-size 128)
        for seed in $seeds; do
            dir=$out/$model/seed$seed
            mkdir -p "$dir"
            if ! complete "$dir/grads.h5"; then
                echo "$model seed $seed: grad-dump --profile ..." >&2
                grad-dump "${common[@]}" --nproc 2 --seed "$seed" --profile --force -o "$dir/grads.h5" -q \
                    2>"$dir/grad-dump.log" || fail "$dir/grad-dump.log"
            fi
            regime-detect "$dir/grads.h5" "${accordion[@]}" --force -o "$dir/accordion.sched.h5" --json \
                >"$dir/accordion.json" 2>"$dir/accordion.detect.log" || fail "$dir/accordion.detect.log"
            for run in low high; do uniform "$dir" "$run"; done
            for p in "${!plan[@]}"; do
                regime-detect "$dir/grads.h5" "${accordion[@]}" --plan "${plan[$p]}" --comm "$comm" --force \
                    -o "$dir/$p.sched.h5" --json >"$dir/$p.json" 2>"$dir/$p.detect.log" || fail "$dir/$p.detect.log"
            done
            fixed[uniform-topk]=$(topk_matching "$dir")
            for run in "${runs[@]}"; do
                if [ -n "${fixed[$run]+x}" ]; then level=(--compress "${fixed[$run]}"); else level=(--schedule "$dir/$run.sched.h5"); fi
                if ! complete "$dir/$run.h5"; then
                    echo "$model seed $seed: $run ..." >&2
                    train-dist "${common[@]}" --nproc 2 --seed "$seed" "${level[@]}" --metrics "$dir/$run.h5" \
                        --checkpoint-dir "$dir/ckpt" --force -q 2>"$dir/$run.log" || fail "$dir/$run.log"
                fi
                if [ "$shaped" = 1 ] && [ "${RUN_SHAPED:-0}" = 1 ] && [ "$seed" = "$(first $seeds)" ] &&
                    ! complete "$dir/$run.shaped.h5"; then
                    echo "$model seed $seed: $run on the shaped link ..." >&2
                    SHAPED_RANK1_LOG=$dir/$run.shaped.rank1.log shaped_ranks "$bin/train-dist" "${common[@]}" \
                        --seed "$seed" "${level[@]}" --metrics "$dir/$run.shaped.h5" --checkpoint-dir "$dir/ckpt-shaped" \
                        --force -q --timeout 300 2>"$dir/$run.shaped.log" || fail "$dir/$run.shaped.log"
                fi
            done
        done
    done
    "$python" "$here/scripts/experiments/planner_report.py" --out "$out" --seeds "$seeds" --models "$models" \
        --comm "$comm" --link "$link" | tee "$out/planner.md"
}

# uniform DIR RUN: the uniform level fixed[RUN] costed by the same model as the plans
# (Accordion with both levels equal): DIR/RUN.json.
uniform() {
    regime-detect "$1/grads.h5" --eta 0.5 --interval 2 --low "${fixed[$2]}" --high "${fixed[$2]}" \
        --plan "${fixed[$2]}" --comm "$comm" --force -o "$1/$2.sched.h5" --json \
        >"$1/$2.json" 2>"$1/$2.detect.log" || fail "$1/$2.detect.log"
}

# topk_matching DIR: the Top-k level that sends as many floats as DIR's Top-k plan, and
# DIR/uniform-topk.json, its floats and modelled exchange time. A fraction's floats and
# modelled time per run are linear in it (k values and k indices per matrix, the vectors
# whole; the collectives' bytes), so two uniform plans of the profile's grid give both
# (the planner itself costs only the grid's fractions, those the profile measured).
topk_matching() {
    local f
    for f in 0.01 0.1; do
        regime-detect "$1/grads.h5" --eta 0.5 --interval 2 --low topk:$f --high topk:$f --plan topk:$f \
            --comm "$comm" --force -o "$1/topk-$f.sched.h5" --json >"$1/topk-$f.json" 2>"$1/topk-$f.detect.log" ||
            fail "$1/topk-$f.detect.log"
    done
    "$python" - "$1" <<'PY'
import json, sys
d = sys.argv[1]
total = lambda name: json.load(open(f"{d}/{name}.json"))["plan"]["total"]
a, b, want = total("topk-0.01"), total("topk-0.1"), total("planned-topk")["floats"]
fraction = float(f"{0.01 + (want - a['floats']) * (0.1 - 0.01) / (b['floats'] - a['floats']):.3g}")
at = lambda key: a[key] + (fraction - 0.01) * (b[key] - a[key]) / (0.1 - 0.01)
level = f"topk:{fraction:g}"
json.dump({"level": level, "floats": at("uniform_floats"), "modelled_exchange_seconds": at("uniform_cost"),
           "interpolated_from": ["topk-0.01.json", "topk-0.1.json"]}, open(f"{d}/uniform-topk.json", "w"), indent=1)
print(level)
PY
}

fail() {
    echo "planner.sh: error: failed, see $1:" >&2
    tail -3 "$1" >&2
    exit 1
}

first() { echo "$1"; }

main "$@"
