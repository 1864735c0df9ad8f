#!/usr/bin/env bash
# Everything a GPU machine has to do, in two steps that each fit in one 10-minute
# call (docs/gpu.md), from the project's root with the GPU kit copied to .gpu-kit:
#   scripts/gpu/run-all.sh build-test [OUTDIR]   configure + build against pip's
#       LibTorch, then `ctest -LE slow` (the default suite) and `ctest -L gpu`
#   scripts/gpu/run-all.sh bench [OUTDIR]        build if needed (a fresh machine
#       rebuilds), then scripts/gpu/bench-train.sh and scripts/gpu/bench-compress.sh
#   scripts/gpu/run-all.sh all [OUTDIR]          both
# OUTDIR ($OUT when set, else gpu-results) gets the logs, steps.tsv (each step's
# status and time) and figures.md (the tables of docs/benchmarks.md's GPU section).
# A failing step is recorded and the next one still runs; the exit status is 1 if
# any step failed. Environment: B (build directory, default build-gpu), JOBS (16),
# ACC_KIT_GLOO (1: the kit's Gloo headers, for the Gloo backend), ACC_GPU_KIT (the
# kit, default .gpu-kit; "none" on a machine that has the dependencies installed),
# CTEST_ARGS (more ctest options for both test runs, e.g. "-R train" to rerun some),
# and the benchmarks' own (DEVICE, BATCHES, STEPS, REPS, ...: see their headers).
# BUDGET (seconds, default 570) bounds the whole call: a step that would run past it
# is stopped (or not started) and recorded, so that figures.md is still written
# before a 10-minute limit ends the call.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-all}
case $mode in
build-test | bench | all) ;;
*)
    echo "usage: scripts/gpu/run-all.sh build-test|bench|all [OUTDIR]" >&2
    exit 2
    ;;
esac
out=${2:-${OUT:-gpu-results}}
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)
export B=${B:-build-gpu}
jobs=${JOBS:-16}
kit=${ACC_GPU_KIT:-.gpu-kit}
failed=0
budget=${BUDGET:-570}
started=$(date +%s)

say() { echo "run-all: $*" >&2; }

# step NAME LOG COMMAND...: runs COMMAND with its output in logs/LOG (and the
# last lines on stderr), records status and seconds in steps.tsv.
step() {
    local name=$1 log=$2 start status=ok code=0 left
    shift 2
    start=$(date +%s)
    left=$((budget - (start - started) - 10))  # 10 s kept for figures.md
    if [ "$left" -lt 10 ]; then
        say "$name: not started, the time budget ($budget s) is spent"
        printf '%s\t%s\t%s\t%s\n' "$name" "NOT RUN (time budget spent)" 0 "-" >>"$out/steps.tsv"
        failed=1
        return 1
    fi
    say "$name: $*  (log: logs/$log; at most $left s)"
    timeout -k 5 "$left" "$@" >"$out/logs/$log" 2>&1 || code=$?
    if [ "$code" -ne 0 ]; then
        status="FAILED (exit $code)"
        [ "$code" = 124 ] && status="FAILED (stopped after $left s: time budget)"
        failed=1
        tail -20 "$out/logs/$log" >&2
    fi
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(($(date +%s) - start))" "logs/$log" >>"$out/steps.tsv"
    say "$name: $status in $(($(date +%s) - start)) s"
    return "$code"
}

# The kit puts CLI11, spdlog, fmt, nlohmann-json, GoogleTest (and HDF5 where the
# image lacks it) under /opt and sets CMAKE_ARGS for pip's LibTorch; on a fresh
# machine it must run before configuring and before running anything built.
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ "$kit" != none ]; then
    if [ ! -f "$kit/env.sh" ]; then
        say "error: $kit/env.sh: no GPU kit; copy it into the checkout first (docs/gpu.md), or set ACC_GPU_KIT=none"
        exit 1
    fi
    export ACC_KIT_GLOO=${ACC_KIT_GLOO:-1}
    say "setting up the kit ($kit/env.sh, ACC_KIT_GLOO=$ACC_KIT_GLOO)"
    # shellcheck source=/dev/null
    source "$kit/env.sh" >"$out/logs/kit.log" 2>&1 || {
        cat "$out/logs/kit.log" >&2
        say "error: $kit/env.sh failed"
        exit 1
    }
fi
export ACC_BUILD_DIR=$B
nvidia-smi >"$out/logs/nvidia-smi.log" 2>&1 || say "nvidia-smi failed or is missing (logs/nvidia-smi.log)"

build() {
    # In a shell of its own, so that the time budget's `timeout` can stop it.
    # shellcheck disable=SC2016
    if step build build.log bash -c 'jobs=$1; shift; cmake -S . -B "$B" "$@" && cmake --build "$B" -j "$jobs"' \
        configure-and-build "$jobs" "${CMAKE_ARGS[@]}"; then
        if grep -q "CUDA LibTorch" "$out/logs/build.log"; then
            say "configure: $(grep -m1 'CUDA LibTorch' "$out/logs/build.log")"
        else
            say "warning: configure did not report a CUDA LibTorch: the programs cannot use --device cuda"
        fi
        return 0
    fi
    return 1
}

tests() {
    # The default suite as CI runs it (without the GPU tests, which come next on their
    # own, one at a time: they share the one GPU), then the GPU tests.
    local extra
    read -r -a extra <<<"${CTEST_ARGS:-}"
    step "ctest -LE 'slow|gpu'" ctest-default.log \
        ctest --test-dir "$B" -LE 'slow|gpu' -j 12 --output-on-failure "${extra[@]}" || true
    step "ctest -L gpu" ctest-gpu.log ctest --test-dir "$B" -L gpu -j 1 --output-on-failure -V "${extra[@]}" || true
}

bench() {
    step "bench-train" bench-train.log scripts/gpu/bench-train.sh "$out" || true
    step "bench-compress" bench-compress.log scripts/gpu/bench-compress.sh "$out" || true
}

case $mode in
build-test)
    build && tests
    ;;
bench)
    build && bench
    ;;
all)
    build && tests && bench
    ;;
esac
scripts_python=$(source scripts/python.sh && acc_python)
"$scripts_python" scripts/gpu/figures.py "$out" >"$out/figures.md" || say "figures.py failed"
say "figures: $out/figures.md"
cat "$out/figures.md" >&2
exit "$failed"
