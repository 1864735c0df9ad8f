#!/usr/bin/env bash
# Accordion's pipeline on one setting: profile a run with grad-dump, find its
# critical regimes with regime-detect, replay the schedule with train-dist on
# local ranks next to the two fixed-level baselines (and, with --online, with
# the rule deciding during training), then compare the runs in a table like
# Table 1 of the paper, and draw them with --plots.
#
#   examples/pipeline.sh [OPTIONS] [-- TRAINING OPTIONS]
#
# OPTIONS (defaults in brackets):
#   --out DIR          where every file goes [build/example]
#   --model M          [mlp]
#   --dataset D        [fashion-mnist]
#   --epochs N         [8]
#   --mode compression|batch                       [compression]
#   --low L --high H   levels: compressor specs, or global batch sizes in
#                      batch mode [powersgd:2 and powersgd:1; 256 and 1024]
#   --eta X --interval N                           [0.5, 2]
#   --nproc N          local ranks for train-dist and grad-dump [2]
#   --seed S           [42]
#   --online           also run train-dist --accordion (compression mode)
#   --monotone         batch mode: never return to the small batch (the paper's choice)
#   --plots            also write regimes.png and runs.png (python3-matplotlib)
# TRAINING OPTIONS go to grad-dump and every train-dist run, for example
# --lr 0.1 --lr-decay-epochs 5; the defaults are --lr 0.05 --lr-decay-epochs 6
# --threads 1 --batch-size 128 (per rank; not in batch mode), and for mlp --hidden-size 128.
#
# The programs come from ${ACC_BUILD_DIR:-build}/bin when built there, else from PATH;
# the Python scripts run with $ACC_PYTHON, else the first python3 with h5py and torch.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python=$(source "$here/scripts/python.sh" && acc_python)
out=build/example model=mlp dataset=fashion-mnist epochs=8 mode=compression
low="" high="" eta=0.5 interval=2 nproc=2 seed=42 online=0 plots=0 monotone=()
usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "pipeline.sh: error: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        --out|--model|--dataset|--epochs|--mode|--low|--high|--eta|--interval|--nproc|--seed)
            [ $# -ge 2 ] || die "$1: needs a value"
            declare "${1#--}=$2"; shift 2 ;;
        --online) online=1; shift ;;
        --plots) plots=1; shift ;;
        --monotone) monotone=(--monotone); shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) die "$1: unknown option (see --help)" ;;
    esac
done
case $mode in
    compression) low=${low:-powersgd:2} high=${high:-powersgd:1} ;;
    batch) low=${low:-256} high=${high:-1024}
           [[ $low =~ ^[0-9]+$ && $high =~ ^[0-9]+$ ]] || die "--low/--high: batch mode needs two batch sizes"
           [ "$online" = 0 ] || die "--online: train-dist decides compression levels online, not batch sizes" ;;
    *) die "--mode: expected compression or batch, not '$mode'" ;;
esac
# The defaults for what the training options do not set.
training=("$@")
defaults=(--lr 0.05 --lr-decay-epochs 6 --threads 1)
[ "$model" != mlp ] || defaults+=(--hidden-size 128)
[ "$mode" = batch ] || defaults+=(--batch-size 128)
for ((i = 0; i < ${#defaults[@]}; i += 2)); do
    [[ " ${training[*]} " == *" ${defaults[i]} "* ]] || training+=("${defaults[i]}" "${defaults[i + 1]}")
done

bin=${ACC_BUILD_DIR:-$here/build}/bin
if [ -x "$bin/train-dist" ]; then PATH=$bin:$PATH; fi
command -v train-dist >/dev/null || die "train-dist not found: build with scripts/build.sh or install the toolkit"
# The comparison at the end needs h5py and numpy (the plots matplotlib): say so before training.
needs="h5py, numpy"
[ "$plots" = 0 ] || needs+=", matplotlib"
"$python" -c "import $needs" 2>/dev/null ||
    die "$python cannot import $needs, which the comparison needs: set ACC_PYTHON to a Python that can"
mkdir -p "$out"
cd "$out"
# On a terminal the programs show their progress and a line per epoch; in a
# pipe or a log they are quiet (-q) but for warnings and errors.
quiet=(-q)
[ ! -t 2 ] || quiet=()
common=(--model "$model" --dataset "$dataset" --epochs "$epochs" --seed "$seed" --nproc "$nproc" "${quiet[@]}")
step() { printf '\n== %s\n' "$*" >&2; }
# The training options with the value of option $1 (present: --lr always is)
# multiplied by $2, in the array "scaled".
scale_option() {
    local i
    scaled=("${training[@]}")
    for ((i = 0; i < ${#scaled[@]} - 1; i++)); do
        if [ "${scaled[i]}" = "$1" ]; then scaled[i + 1]=$("$python" -c "print(${scaled[i + 1]} * $2)"); fi
    done
}

# 1. Profile: the gradient norms of every parameter, epoch by epoch, on the
# setting the schedule will be replayed in (the low level's batch size).
profile=("${training[@]}")
if [ "$mode" = batch ]; then
    [ $((low % nproc)) = 0 ] && [ $((high % nproc)) = 0 ] || die "--low/--high: batch sizes must split over $nproc ranks"
    profile=(--batch-size $((low / nproc)) "${training[@]}")
fi
step "grad-dump: profiling $model on $dataset for $epochs epochs"
started=$(date +%s)
grad-dump "${common[@]}" "${profile[@]}" -o grads.h5

# 2. The critical regimes and the schedule.
step "regime-detect: eta $eta, interval $interval"
regime-detect grads.h5 --eta "$eta" --interval "$interval" --mode "$mode" --low "$low" --high "$high" "${monotone[@]}" -o sched.h5

# 3. The schedule replayed, and the two fixed levels.
run() {
    local name=$1; shift
    step "train-dist: $name"
    mkdir -p "ckpt-$name"
    train-dist "${common[@]}" "$@" --metrics "$name.h5" --checkpoint-dir "ckpt-$name"
}
if [ "$mode" = compression ]; then
    run low "${training[@]}" --compress "$low"
    run high "${training[@]}" --compress "$high"
    run accordion "${training[@]}" --schedule sched.h5
    [ "$online" = 0 ] || run online "${training[@]}" --accordion --low "$low" --high "$high" --eta "$eta" --interval "$interval"
else
    # The large batch's learning rate scaled as the schedule scales it.
    scale_option --lr "$high / $low"
    run low "${training[@]}" --batch-size $((low / nproc))
    run high "${scaled[@]}" --batch-size $((high / nproc))
    run accordion "${training[@]}" --schedule sched.h5
fi

# 4. The comparison.
step "$model on $dataset, $nproc ranks, $epochs epochs: low $low, high $high, Accordion eta $eta interval $interval"
runs=("low $low=low.h5" "high $high=high.h5" "accordion=accordion.h5")
[ "$online" = 0 ] || runs+=("online=online.h5")
"$python" "$here/scripts/compare_runs.py" "${runs[@]}" | tee table.txt
if [ "$plots" = 1 ]; then
    "$python" "$here/scripts/plot_regimes.py" grads.h5 sched.h5 -o regimes.png
    "$python" "$here/scripts/plot_runs.py" "${runs[@]}" -o runs.png \
        --title "$model on $dataset, $nproc ranks: Accordion between $low and $high"
fi
echo "files in $out; pipeline took $(( $(date +%s) - started )) s" >&2
