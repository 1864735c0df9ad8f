#!/usr/bin/env bash
# The FSDP2 study of docs/results.md: hybrid sharding whose replica exchange goes
# through the toolkit's compressors (accordion.compress_fsdp) against FSDP's own
# hybrid sharding, fp32 and bf16. Four ranks under torchrun as two nodes of two:
# on a shaped link, each node in one of two network namespaces joined by a link
# that tc's token bucket filter shapes (scripts/shaped-link.sh; needs root), so
# that the shards' reduce-scatter stays within a node and the replicas' exchange
# crosses the link; on loopback, all four on this machine. The model trains as
# examples/pytorch/train_fsdp.py trains it (batch 64 per rank, 256 in all; lr
# 0.05, divided by 10 from epoch 6; 8 epochs; 12,000 training images; one
# thread per rank), with
#   native-fp32     fully_shard over the 2-D mesh (FSDP's hybrid sharding)
#   native-bf16     the same with MixedPrecisionPolicy(reduce_dtype=bfloat16)
#   SPEC            fully_shard within a node, compress_fsdp(SPEC) across (e.g. powersgd:2, none)
#   accordion       the same with compress_fsdp(accordion=True): Accordion's PowerSGD 2 / 1, decided online
#   auto            the same with compress_fsdp(auto=True): each epoch's levels by predicted step time
#                   within that budget
#   V+one-exchange  variant V (SPEC, accordion or auto) with compress_fsdp(one_exchange=True): every
#                   module's shards in one exchange a step
#
#   scripts/experiments/fsdp.sh OUT "SEEDS" "MODELS" LINK [VARIANTS]
#       LINK: a rate as tc writes it (100mbit) or loopback
#       VARIANTS: default "native-fp32 native-bf16 powersgd:2" (shaped), "native-fp32 none" (loopback)
#
# Each run's rows (train_fsdp.py --csv) go to OUT/LINK/MODEL/VARIANT/seedS.csv; a
# run with all its epochs is kept, so the script resumes. Seeds run in turn, each
# seed's variants one after the other, so that a variant's runs and native's are
# paired in time. The runs, with link, model, variant, seed and commit, go to
# OUT/fsdp-runs.csv (scripts/experiments/fsdp_report.py --table makes the table).
# PYTHON: a Python with torch 2.x and the accordion package; by default pip's
# torch environment (scripts/setup-pip-torch.sh) with the package of
# ${ACC_BUILD_DIR:-build-pip} installed into OUT/site. EPOCHS [8] and
# FSDP_EXTRA_<model> (more options for train_fsdp.py) change the setting.
set -euo pipefail
# One function, read whole before it runs: an edit during a study does not reach it.
main() {
    source "$(dirname "$0")/common.sh"
    [ $# -ge 4 ] || { echo "usage: fsdp.sh OUT SEEDS MODELS LINK [VARIANTS]" >&2; exit 2; }
    out=$1 seeds=$2 models=$3 link=$4
    if [ "$link" = loopback ]; then variants=${5:-native-fp32 none}; else variants=${5:-native-fp32 native-bf16 powersgd:2}; fi
    epochs=${EPOCHS:-8}
    for model in $models; do
        case $model in mlp|cnn) ;; *) echo "fsdp.sh: error: no model '$model' (mlp or cnn)" >&2; exit 2 ;; esac
    done
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    if [ -n "${PYTHON:-}" ]; then
        py=$PYTHON
    else
        py=$("$here/scripts/setup-pip-torch.sh")
        build=$(cd "$here/${ACC_BUILD_DIR:-build-pip}" && pwd)
        echo "fsdp.sh: pip install ./python into $out/site (the package of $build)" >&2
        rm -rf "$out/site"
        (cd "$here" && ACCORDION_BUILD_DIR=$build "$py" -m pip install -q --disable-pip-version-check --no-deps \
            --target "$out/site" ./python)
        export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
    fi
    "$py" -c 'from torch.distributed.fsdp import fully_shard; import accordion' ||
        { echo "fsdp.sh: error: $py: needs torch 2.x (fully_shard) and the accordion package" >&2; exit 1; }
    if [ "$link" != loopback ]; then
        shaped_link_up "$link" || { echo "fsdp.sh: error: no shaped link: $SHAPED_WHY" >&2; exit 1; }
    fi
    commit=$(git -C "$here" rev-parse --short HEAD)
    for seed in $seeds; do
        for model in $models; do
            extra_name=FSDP_EXTRA_$model
            # shellcheck disable=SC2206
            extra=(${!extra_name:-})
            for variant in $variants; do
                dir=$out/$link/$model/$variant
                csv=$dir/seed$seed.csv
                if [ -f "$csv" ] && [ "$(($(wc -l <"$csv") - 1))" -ge "$epochs" ]; then continue; fi
                mkdir -p "$dir"
                rm -f "$csv"
                options=(--model "$model" --epochs "$epochs" --lr 0.05 --batch-size 64 --train-samples 12000
                         --seed "$seed" --csv "$csv" "${extra[@]+"${extra[@]}"}")
                base=${variant%+one-exchange}
                [ "$base" = "$variant" ] || options+=(--one-exchange)
                case $base in
                native-fp32) ;;
                native-bf16) options+=(--reduce-dtype bfloat16) ;;
                accordion) options+=(--accordion) ;;
                auto) options+=(--auto) ;;
                *) options+=(--compress "$base") ;;
                esac
                echo "fsdp.sh: $link $model $variant seed $seed" >&2
                started=$(date +%s)
                run "$dir/seed$seed.log" "${options[@]}" ||
                    { echo "fsdp.sh: error: the run failed; its output is in $dir/seed$seed.log" >&2; exit 1; }
                echo "$commit" >"$dir/seed$seed.commit"
                echo "fsdp.sh:   $(grep '^epoch' "$dir/seed$seed.log" | tail -n 1) ($(($(date +%s) - started)) s)" >&2
            done
        done
    done
    "$py" "$here/scripts/experiments/fsdp_report.py" --collect "$out/fsdp-runs.csv" "$out"
    "$py" "$here/scripts/experiments/fsdp_report.py" --table "$out/fsdp-runs.csv"
}

# run LOG OPTIONS...: train_fsdp.py on 4 ranks, 2 a node; rank 0's lines and every
# error to LOG.
run() {
    local log=$1 port=$((29700 + RANDOM % 200)) script=$here/examples/pytorch/train_fsdp.py
    shift
    if [ "$link" = loopback ]; then
        "$py" -m torch.distributed.run --nproc_per_node 4 --master_port "$port" "$script" "$@" >"$log" 2>&1
        return
    fi
    local torchrun=("$py" -m torch.distributed.run --nnodes 2 --nproc_per_node 2 --master_addr "${SHAPED_ADDR[0]}"
                    --master_port "$port") node1 rc0=0 rc1=0
    # Gloo binds to the namespace's end of the link: within a node its traffic
    # stays local, between the nodes it crosses the shaped link.
    ip netns exec "${SHAPED_NS[1]}" env GLOO_SOCKET_IFNAME="${SHAPED_TAG}1" "${torchrun[@]}" --node_rank 1 \
        "$script" "$@" >"$log.node1" 2>&1 &
    node1=$!
    ip netns exec "${SHAPED_NS[0]}" env GLOO_SOCKET_IFNAME="${SHAPED_TAG}0" "${torchrun[@]}" --node_rank 0 \
        "$script" "$@" >"$log" 2>&1 || rc0=$?
    wait "$node1" || rc1=$?
    [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
}

main "$@"
