#!/usr/bin/env bash
# The GraVAC study of docs/results.md: train-dist --gravac (both scaling
# policies, epsilon 0.7 and 0.9, Top-k and DGC) against the static levels
# theta_min (10x), 100x and dense, on the Fashion-MNIST setting of the Accordion
# study (mlp 784-128-128-10, 2 ranks, 8 epochs, batch 128 per rank, lr 0.05
# divided by 10 from epoch 6). Every run's metrics file goes to
# OUT/<variant>/seed<S>.h5; the table and the plot of iterations at each factor
# (the paper's Figure 7b) go to OUT/gravac.md and OUT/gravac-factors.png.
#
#   scripts/experiments/gravac.sh [OUT] [SEEDS] [EPOCHS] [VARIANTS]
#       defaults: build/gravac "1 2 3" 8 "all of them"
# GRAVAC_EXTRA: more options for every run, e.g. a reduced study:
#   GRAVAC_EXTRA="--train-samples 30000 --gravac-window 50" scripts/experiments/gravac.sh OUT 1 2
# (--gravac-* options are given to the GraVAC runs only).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
source "$here/scripts/python.sh"
python=$(acc_python)
out=${1:-$here/build/gravac}
seeds=${2:-1 2 3}
epochs=${3:-8}
bin=$here/build/bin
[ -x "$bin/train-dist" ] && PATH=$bin:$PATH
mkdir -p "$out"
declare -A args=(
    [dense]="--compress none"
    [topk10x]="--compress topk:0.1"
    [topk100x]="--compress topk:0.01"
    [gravac-topk-exp-0.7]="--gravac topk --gravac-policy exponential --gravac-epsilon 0.7"
    [gravac-topk-exp-0.9]="--gravac topk --gravac-policy exponential --gravac-epsilon 0.9"
    [gravac-topk-geo-0.7]="--gravac topk --gravac-policy geometric --gravac-epsilon 0.7"
    [gravac-topk-geo-0.9]="--gravac topk --gravac-policy geometric --gravac-epsilon 0.9"
    [gravac-dgc-exp-0.7]="--gravac dgc --gravac-policy exponential --gravac-epsilon 0.7"
    [gravac-dgc-exp-0.9]="--gravac dgc --gravac-policy exponential --gravac-epsilon 0.9"
    [gravac-dgc-geo-0.7]="--gravac dgc --gravac-policy geometric --gravac-epsilon 0.7"
    [gravac-dgc-geo-0.9]="--gravac dgc --gravac-policy geometric --gravac-epsilon 0.9"
    # Below the paper's thresholds: on this model 10x keeps less than 70 % of the squared norm.
    [gravac-topk-exp-0.5]="--gravac topk --gravac-policy exponential --gravac-epsilon 0.5"
    [gravac-topk-geo-0.5]="--gravac topk --gravac-policy geometric --gravac-epsilon 0.5"
    [gravac-topk-exp-0.3]="--gravac topk --gravac-policy exponential --gravac-epsilon 0.3"
    [gravac-dgc-exp-0.5]="--gravac dgc --gravac-policy exponential --gravac-epsilon 0.5"
)
all=(dense topk10x topk100x gravac-topk-exp-0.7 gravac-topk-exp-0.9 gravac-topk-geo-0.7 gravac-topk-geo-0.9
     gravac-dgc-exp-0.7 gravac-dgc-exp-0.9 gravac-dgc-geo-0.7 gravac-dgc-geo-0.9
     gravac-topk-exp-0.5 gravac-topk-geo-0.5 gravac-topk-exp-0.3 gravac-dgc-exp-0.5)
# shellcheck disable=SC2206
variants=(${4:-${all[*]}})
common=(--model mlp --hidden-size 128 --dataset fashion-mnist --epochs "$epochs" --batch-size 128 --lr 0.05
        --lr-decay-epochs 6 --momentum 0.9 --weight-decay 1e-4 --threads 1 --nproc 2 -q)
for seed in $seeds; do
    for v in "${variants[@]}"; do
        file=$out/$v/seed$seed.h5
        if [ -f "$file" ] && "$python" -c "import h5py,sys; sys.exit(0 if h5py.File('$file','r').attrs['complete'] else 1)"; then
            echo "$v seed $seed: done before, kept" >&2
            continue
        fi
        echo "$v seed $seed ..." >&2
        mkdir -p "$out/$v"
        extra=()
        for option in ${GRAVAC_EXTRA:-}; do extra+=("$option"); done
        if [[ $v != gravac-* ]]; then  # drop --gravac-* NAME VALUE pairs
            kept=()
            for ((i = 0; i < ${#extra[@]}; i++)); do
                if [[ ${extra[i]} == --gravac-* ]]; then i=$((i + 1)); else kept+=("${extra[i]}"); fi
            done
            extra=("${kept[@]+"${kept[@]}"}")
        fi
        # shellcheck disable=SC2086
        train-dist "${common[@]}" "${extra[@]+"${extra[@]}"}" --seed "$seed" ${args[$v]} --metrics "$file" --checkpoint-dir "$out/$v/ckpt" \
            > "$out/$v/seed$seed.log" 2>&1 || { echo "$v seed $seed failed: see $out/$v/seed$seed.log" >&2; exit 1; }
    done
done
runs=()
for v in "${variants[@]}"; do runs+=("$v=$out/$v"); done
"$python" "$here/scripts/experiments/gravac_report.py" --plot "$out/gravac-factors.png" "${runs[@]}" | tee "$out/gravac.md"
