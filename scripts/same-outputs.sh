#!/usr/bin/env bash
# Runs the programs on fixed seeds over the cases whose outputs a change to the
# library must keep identical, and writes each output as canonical text (timings
# masked, see scripts/same-outputs.py); with --compare, says which differ from an
# earlier run's.
#   scripts/same-outputs.sh --out DIR [--bin BIN] [--compare BASE] [--cases REGEX]
# BIN: the programs to run [build/bin]. BASE: the --out of an earlier run (of
# another build). REGEX: run only the cases whose name matches it.
# The cases: train-dist with each of the ten compressors on 1 and 2 ranks; a
# mixed schedule, regime-detect's schedule and plan replayed; online Accordion;
# GraVAC with each family and both policies; resumed runs; grad-dump on 1 and 2
# ranks with its profile; regime-detect; compress-bench's text, JSON and HDF5.
# About 4 minutes on 2 cores. Exit 0 when every case ran (and, with --compare,
# matched), 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
source=$PWD
bin=build/bin out="" base="" cases=.
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --compare) base=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "same-outputs.sh: error: $1: unknown option (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || { echo "same-outputs.sh: error: --out: required (see --help)" >&2; exit 2; }
[ -x "$bin/train-dist" ] || { echo "same-outputs.sh: error: --bin: $bin/train-dist is not a built program" >&2; exit 2; }
bin=$(cd "$bin" && pwd)
export PATH="$bin:$PATH"
source scripts/python.sh
python=$(acc_python)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/acc-same-XXXXXX")
export ACC_SAME_WORK=$work
trap 'rm -rf "$work"' EXIT
cd "$work"
failed=0

canon() { "$python" "$source/scripts/same-outputs.py" "$@"; }

# record CASE: every output of the case (in $work/CASE) as text in $out/CASE.
record() {
    local name=$1 f
    rm -rf "${out:?}/$name"
    mkdir -p "$out/$name"
    for f in "$name"/*; do
        case $f in
        *.h5 | *.json | *.log)
            canon "${f##*.}" "$f" >"$out/$f.txt" 2>&1 || echo "unreadable (exit $?)" >>"$out/$f.txt" ;;
        *.txt) cp "$f" "$out/$f" ;;
        esac
    done
}

# case NAME COMMAND...: runs COMMAND in a fresh $work/NAME (stdout to out.json
# or out.txt, stderr to err.log) when NAME matches --cases, then records it.
case_() {
    local name=$1
    shift
    [[ $name =~ $cases ]] || return 0
    mkdir -p "$name"
    echo "same-outputs.sh: $name" >&2
    local rc=0
    (cd "$name" && "$@") || rc=$?
    if [ "$rc" != 0 ]; then
        echo "same-outputs.sh: $name: failed (exit $rc): $(tail -2 "$name"/err.log 2>/dev/null)" >&2
        failed=1
    fi
    record "$name"
}

train=(--model mlp --hidden-size 32 --train-samples 960 --test-samples 240 --threads 1 --seed 3
    --momentum 0.9 --weight-decay 1e-4 --lr 0.05 -v)
td() { train-dist "${train[@]}" --metrics m.h5 --json "$@" >out.json 2>err.log; }
tdb() { td --batch-size 24 "$@"; }
gd() { grad-dump "${train[@]}" --batch-size 24 -o grads.h5 "$@" >out.txt 2>err.log; }

for spec in none fp16 powersgd:2 topk:0.1 randomk:0.1 dgc:0.1 signsgd efsignsgd qsgd:127 terngrad; do
    for n in 1 2; do
        case_ "train-${spec/:/-}-n$n" tdb --nproc "$n" --epochs 2 --compress "$spec"
    done
done
case_ train-dgc-warmup-n2 tdb --nproc 2 --epochs 2 --compress dgc:0.01 --dgc-warmup-epochs 1
case_ train-micro-n2 tdb --nproc 2 --epochs 2 --compress powersgd:1 --micro-batch-size 10 --bucket-mb 0.01

case_ grad-dump-n1 gd --nproc 1 --epochs 3 --snapshot-epochs 0,2 --profile
case_ grad-dump-n2 gd --nproc 2 --epochs 4 --snapshot-epochs 1 --profile
grads=$work/grad-dump-n2/grads.h5
detect() { regime-detect "$grads" --json -o sched.h5 "$@" >out.json 2>err.log; }
case_ regime-layer detect --eta 0.3 --interval 1 --low powersgd:2 --high powersgd:1
case_ regime-model detect --eta 0.3 --interval 2 --low topk:0.2 --high topk:0.05 --granularity model
case_ regime-batch detect --eta 0.3 --interval 1 --mode batch --low 24 --high 48
case_ regime-plan detect --eta 0.3 --interval 1 --plan powersgd:1,powersgd:2,powersgd:4,topk:0.1
for s in layer batch plan; do
    case_ "train-schedule-$s" td $([ $s = batch ] || echo --batch-size 24) --nproc 2 --epochs 4 --schedule "$work/regime-$s/sched.h5" --schedule-extend last
done
mixed() {
    "$python" "$source/tests/e2e/train_dist_check.py" schedule mixed.h5 --model-from "$work/train-none-n2/m.h5" \
        --levels powersgd:1,none,topk:0.2,signsgd,fp16,qsgd:15 --epochs 2 &&
        tdb --nproc 2 --epochs 3 --schedule mixed.h5 --schedule-extend last
}
case_ train-schedule-mixed mixed
case_ train-accordion-n2 tdb --nproc 2 --epochs 4 --accordion --interval 1 --eta 0.3
case_ train-accordion-n1 tdb --nproc 1 --epochs 3 --accordion --interval 1 --eta 0.3 --low topk:0.3 --high topk:0.05
for family in topk dgc randomk powersgd; do
    for policy in exponential geometric; do
        case_ "gravac-$family-$policy" tdb --nproc 2 --epochs 2 --gravac "$family" --gravac-policy "$policy" \
            --gravac-window 4 --gravac-epsilon 0.5
    done
done
case_ gravac-options tdb --nproc 2 --epochs 2 --gravac topk --gravac-window 3 --gravac-throughput mean \
    --gravac-reset-gains --gravac-smoothing 0.5
resumed() {
    tdb "$@" --epochs 2 && mv out.json first.json && mv err.log first.log && tdb "$@" --epochs 3 --resume
}
case_ resume-powersgd resumed --nproc 2 --compress powersgd:2
case_ resume-accordion resumed --nproc 2 --accordion --interval 1 --eta 0.3
case_ resume-gravac resumed --nproc 2 --gravac dgc --gravac-window 4
case_ resume-grad-dump bash -c 'grad-dump "$@" -o grads.h5 --epochs 2 >/dev/null 2>first.log &&
    grad-dump "$@" -o grads.h5 --epochs 3 --resume >out.txt 2>err.log' _ "${train[@]}" --batch-size 24 --nproc 2

bench=(--from "$grads" --reps 1 --world 4,16 --compressors none,fp16,powersgd:1,powersgd:4,topk:0.05,randomk:0.05,dgc:0.05,signsgd,efsignsgd,qsgd:127,terngrad)
case_ bench-json bash -c 'compress-bench "$@" --json -o bench.h5 >out.json 2>err.log' _ "${bench[@]}"
case_ bench-device bash -c 'compress-bench "$@" --path device --vectors compress --topk-selection sampled --json >out.json 2>err.log' _ "${bench[@]}"
# The text table: the columns that do not depend on time.
case_ bench-text bash -c 'compress-bench "$@" --alpha 1e-4 --bandwidth 1e8 2>err.log |
    awk "\$1 ~ /^(none|fp16|powersgd|topk|randomk|dgc|signsgd|efsignsgd|qsgd|terngrad)/ {print \$1, \$2, \$3, \$4, \$5, \$11, \$12, \$13, \$14}" >table.txt' _ "${bench[@]}"

cd "$source"
if [ -n "$base" ]; then
    # The cases this run made (all, or those --cases picked), each against its namesake.
    : >"$work/diff.txt"
    for made in "$out"/*/; do
        name=$(basename "$made")
        diff -r "$base/$name" "$out/$name" >>"$work/diff.txt" 2>&1 || true
    done
    if [ ! -s "$work/diff.txt" ]; then
        echo "same-outputs.sh: every output matches $base" >&2
    else
        echo "same-outputs.sh: outputs differ from $base:" >&2
        head -60 "$work/diff.txt" >&2
        failed=1
    fi
fi
exit "$failed"
