#!/usr/bin/env bash
# Everything a lent GPU machine has to do, in one call of at most 10 minutes
# (docs/gpu.md), from the project's root with the GPU kit in .gpu-kit
# (scripts/gpu/make-kit.sh makes it):
#   scripts/gpu/run-all.sh [all] [OUTDIR]       configure + build against pip's LibTorch,
#       `ctest -L gpu`, scripts/gpu/bench-train.sh, scripts/gpu/bench-compress.sh, then
#       `ctest -LE 'slow|gpu'` (the default suite, which CI runs anyway, last) and figures.md
#       (the tables of docs/benchmarks.md's GPU section)
#   scripts/gpu/run-all.sh build-test [OUTDIR]  the build and the two test runs only (GPU tests first)
#   scripts/gpu/run-all.sh bench [OUTDIR]       the build (a fresh machine rebuilds) and the benchmarks
#   scripts/gpu/run-all.sh cpu-check [OUTDIR]   the whole flow on the CPU, in seconds, so that it is
#       checked between GPU sessions (tests/e2e/gpu_flow.sh): no configure or build (B, default
#       build, must hold the programs), both test runs limited to `ctest -R "$CHECK_TESTS"`, and
#       the benchmarks with --device cpu and tiny sizes
# The GPU machine returns at most 8 files, so OUTDIR ($OUT when set, else gpu-results)
# gets four: gpu-results.tar.gz (everything: logs/, steps.tsv, the measurements'
# train.jsonl and compress.jsonl, the traces trace-*.json of training and compressor steps
# and their summaries traces-train.md and traces-compress.md, figures.md, summary.txt), and summary.txt, steps.tsv
# and figures.md to read at once. They are rewritten after every step, so that a call
# stopped at its limit still returns what was done.
# A failing step (a benchmark with a failed measurement too) is recorded in steps.tsv
# with its status, seconds and log, and the next one still runs (a failed build ends
# the call); the exit status is 1 if anything failed.
# Environment: B (build directory, default build-gpu), JOBS (16), ACC_KIT_GLOO (1: the
# kit's Gloo headers, for the Gloo backend), ACC_GPU_KIT (the kit, default .gpu-kit;
# "none" on a machine that has the dependencies: then PYTHON, default the first python3
# with torch, gives LibTorch's CMake prefix and -DACC_PYTHON), CTEST_ARGS (more ctest
# options for both test runs, e.g. "-R train" to rerun some), CHECK_TESTS (cpu-check's
# ctest -R, default '^(Text\.|gpu\.unit$)'), BUDGET (seconds for the whole call,
# default 540: a step that would run past it is stopped, or not started, and recorded,
# so that the results are packed before a 10-minute limit ends the call), ARCHIVE_LIMIT
# (bytes, default 15 MiB: a larger archive is packed again without the traces), and the
# benchmarks' own (DEVICE, BATCHES, STEPS, REPS, ...: see their headers).
set -euo pipefail
mode=${1:-all}
case $mode in
build-test | bench | all | cpu-check) ;;
*)
    echo "usage: scripts/gpu/run-all.sh build-test|bench|all|cpu-check [OUTDIR]   (all when no mode is given)" >&2
    exit 2
    ;;
esac
out=${2:-${OUT:-gpu-results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
default_b=build-gpu
[ "$mode" != cpu-check ] || default_b=build
export B=${B:-$default_b}
jobs=${JOBS:-16}
kit=${ACC_GPU_KIT:-.gpu-kit}
failed=0
budget=${BUDGET:-540}
reserve=15 # seconds kept for figures.md and the archive
archive_limit=${ARCHIVE_LIMIT:-$((15 << 20))}
started=$(date +%s)
configured=

say() { echo "run-all: $*" >&2; }

if [ "$mode" = cpu-check ]; then
    kit=none
    check_tests=${CHECK_TESTS:-'^(Text\.|gpu\.unit$)'}
    # The benchmarks' smallest sizes (as tests/gpu/scripts_cpu.sh runs them); the
    # caller's own values win, so that a test can make one of them fail.
    export DEVICE=cpu BATCHES=${BATCHES:-2} STEPS=${STEPS:-1} EPOCHS=${EPOCHS:-2} TORCH_STEPS=${TORCH_STEPS:-1} \
        TORCH_WARMUP=${TORCH_WARMUP:-0} THREADS=${THREADS:-1} VALUES=${VALUES:-20000} SHAPES=${SHAPES:-tiny} \
        REPS=${REPS:-1}
fi

# Everything is written to a folder of its own and packed into OUTDIR after each step.
rm -f "$out/gpu-results.tar.gz" "$out/summary.txt" "$out/steps.tsv" "$out/figures.md"
stage=$(mktemp -d "${TMPDIR:-/tmp}/run-all-XXXXXX")
trap 'rm -rf "$stage"' EXIT
res=$stage/gpu-results
mkdir -p "$res/logs"
: >"$res/steps.tsv"
scripts_python=$(source scripts/python.sh && acc_python)
gpu_seen=$( (nvidia-smi -L 2>/dev/null || true) | head -1)

# record NAME STATUS SECONDS LOG: one line of steps.tsv.
record() {
    printf '%s\t%s\t%s\t%s\n' "$@" >>"$res/steps.tsv"
}

# The lines of the measurements' JSON ($res/$measures) that say a measurement failed.
count_errors() {
    local n=0
    [ -z "${measures:-}" ] || n=$(grep -c '"error"' "$res/$measures" 2>/dev/null) || true
    echo "${n:-0}"
}

# step NAME LOG COMMAND...: runs COMMAND with its output in logs/LOG (and the last
# lines on stderr), records status and seconds in steps.tsv, and packs the results.
# With measures=FILE, an "error" line that the step adds to FILE fails the step too.
step() {
    local name=$1 log=$2 start status=ok code=0 left errors
    shift 2
    start=$(date +%s)
    left=$((budget - (start - started) - reserve))
    if [ "$left" -lt 10 ]; then
        say "$name: not started, the time budget ($budget s) is spent"
        record "$name" "NOT RUN (time budget spent)" 0 "-"
        failed=1
        publish
        return 1
    fi
    errors=$(count_errors)
    say "$name: $*  (log: logs/$log; at most $left s)"
    timeout -k 5 "$left" "$@" >"$res/logs/$log" 2>&1 || code=$?
    if [ "$code" -ne 0 ]; then
        status="FAILED (exit $code)"
        [ "$code" = 124 ] && status="FAILED (stopped after $left s: time budget)"
    elif [ "$(count_errors)" -gt "$errors" ]; then
        status="FAILED ($(($(count_errors) - errors)) measurement(s) failed)"
        code=1
    fi
    if [ "$code" -ne 0 ]; then
        failed=1
        tail -20 "$res/logs/$log" >&2
    fi
    record "$name" "$status" "$(($(date +%s) - start))" "logs/$log"
    say "$name: $status in $(($(date +%s) - start)) s"
    publish
    return "$code"
}

# put FILE NAME: FILE into OUTDIR as NAME, under a temporary name first.
put() {
    cp "$1" "$out/.$2.tmp"
    mv "$out/.$2.tmp" "$out/$2"
}

# publish [final]: figures.md, summary.txt and the archive, from what is done so far.
publish() {
    local state="running (packed after the last step below)"
    [ "${1:-}" != final ] || state="finished, exit status $failed"
    timeout 30 "$scripts_python" scripts/gpu/figures.py "$res" >"$res/figures.md" 2>"$res/logs/figures.log" ||
        echo "figures.py failed: see logs/figures.log" >>"$res/figures.md"
    {
        echo "scripts/gpu/run-all.sh $mode: $state; $(($(date +%s) - started)) s of a $budget s budget"
        echo "machine: $(uname -n), ${gpu_seen:-no GPU seen by nvidia-smi}"
        [ -z "$configured" ] || echo "configure: $configured"
        echo "everything (logs/, steps.tsv, *.jsonl, figures.md): gpu-results.tar.gz"
        echo
        echo "steps (status, seconds, log):"
        # aligned columns (awk: `column` is missing on some images)
        awk -F'\t' '{ for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) }; n[NR] = NF }
            END { for (r = 1; r <= NR; r++) { line = ""; for (i = 1; i <= n[r]; i++)
                line = line (i < n[r] ? sprintf("%-" w[i] + 2 "s", cell[r, i]) : cell[r, i]); print line } }' "$res/steps.tsv"
        local name status log
        while IFS=$'\t' read -r name status _ log; do
            case $status in FAILED*)
                echo
                echo "== $name: $status; the end of $log:"
                tail -15 "$res/$log" 2>/dev/null || true
                ;;
            esac
        done <"$res/steps.tsv"
        echo
        # figures.md without its steps table, which is above already
        awk '/^## Steps/ { skip = 1; next } /^## / { skip = 0 } !skip' "$res/figures.md"
    } >"$res/summary.txt"
    tar -czf "$stage/packed.tar.gz" -C "$stage" gpu-results
    # The machine returns files of up to 16 MiB: above ARCHIVE_LIMIT the traces are left
    # out (their summaries, in figures.md, stay), and summary.txt says so.
    if [ "$(stat -c %s "$stage/packed.tar.gz")" -gt "$archive_limit" ]; then
        tar -czf "$stage/packed.tar.gz" -C "$stage" --exclude='trace-*.json' gpu-results
        echo "gpu-results.tar.gz: the traces (trace-*.json) left out, the archive being over $archive_limit bytes" \
            >>"$res/summary.txt"
    fi
    put "$stage/packed.tar.gz" gpu-results.tar.gz
    put "$res/summary.txt" summary.txt
    put "$res/steps.tsv" steps.tsv
    put "$res/figures.md" figures.md
}

# The kit puts CLI11, spdlog, fmt, nlohmann-json, GoogleTest (and HDF5 where the
# image lacks it) under /opt and sets CMAKE_ARGS for pip's LibTorch; on a fresh
# machine it must run before configuring and before running anything built.
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [ "$kit" != none ]; then
    if [ ! -f "$kit/env.sh" ]; then
        say "error: $kit/env.sh: no GPU kit; make it with scripts/gpu/make-kit.sh and carry it (docs/gpu.md), or set ACC_GPU_KIT=none"
        exit 1
    fi
    export ACC_KIT_GLOO=${ACC_KIT_GLOO:-1}
    say "setting up the kit ($kit/env.sh, ACC_KIT_GLOO=$ACC_KIT_GLOO)"
    start=$(date +%s)
    # shellcheck source=/dev/null
    if ! source "$kit/env.sh" >"$res/logs/kit.log" 2>&1; then
        cat "$res/logs/kit.log" >&2
        say "error: $kit/env.sh failed"
        record kit "FAILED (env.sh)" "$(($(date +%s) - start))" logs/kit.log
        failed=1
        publish final
        exit 1
    fi
    record kit ok "$(($(date +%s) - start))" logs/kit.log
elif [ "$mode" != cpu-check ]; then
    # Without the kit, LibTorch's CMake files still come from the Python that has torch
    # (pip's wheel), which is also the Python the tests use.
    python=${PYTHON:-}
    if [ -z "$python" ]; then
        for candidate in "$(command -v python3 || true)" /usr/bin/python3; do
            if [ -x "$candidate" ] && "$candidate" -c 'import torch' 2>/dev/null; then
                python=$candidate
                break
            fi
        done
    fi
    if [ -n "$python" ]; then
        prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
            { say "error: PYTHON=$python: cannot import torch"; exit 1; }
        CMAKE_ARGS+=("-DCMAKE_PREFIX_PATH=$prefix" "-DACC_PYTHON=$python")
        say "LibTorch from $python: -DCMAKE_PREFIX_PATH=$prefix"
    else
        say "warning: no python3 with torch (set PYTHON): configuring without LibTorch's CMake prefix"
    fi
fi
export ACC_BUILD_DIR=$B
if [ "$mode" != cpu-check ]; then
    nvidia-smi >"$res/logs/nvidia-smi.log" 2>&1 || say "nvidia-smi failed or is missing (logs/nvidia-smi.log)"
fi

build() {
    if [ "$mode" = cpu-check ]; then
        # shellcheck disable=SC2016
        step "build (existing)" build.log bash -c 'for p in grad-dump train-dist compress-bench; do
            [ -x "$B/bin/$p" ] || { echo "$B/bin/$p: missing; cpu-check uses a build made before (B)"; exit 1; }
            done; echo "cpu-check: no configure or build; the programs of $B/bin"; ls -l "$B/bin/"'
        return
    fi
    # In a shell of its own, so that the time budget's `timeout` can stop it.
    # shellcheck disable=SC2016
    if step build build.log bash -c 'jobs=$1; shift; cmake -S . -B "$B" "$@" && cmake --build "$B" -j "$jobs"' \
        configure-and-build "$jobs" "${CMAKE_ARGS[@]}"; then
        if grep -q "CUDA LibTorch" "$res/logs/build.log"; then
            configured=$(grep -m1 'CUDA LibTorch' "$res/logs/build.log")
            # What the programs say they were built with: LibTorch, backends, the kernels' architectures.
            built_with=$("$B/bin/train-dist" --version 2>/dev/null | sed -n 2p || true)
            [ -z "$built_with" ] || configured+="; $built_with"
            say "configure: $configured"
        else
            configured="no CUDA LibTorch reported: the programs cannot use --device cuda"
            say "warning: configure did not report a CUDA LibTorch: the programs cannot use --device cuda"
        fi
        return 0
    fi
    return 1
}

ctest_extra=()
read -r -a ctest_extra <<<"${CTEST_ARGS:-}"
[ "$mode" != cpu-check ] || ctest_extra+=(-R "$check_tests")

# The GPU tests, one at a time: they share the one GPU.
gpu_tests() {
    step "ctest -L gpu" ctest-gpu.log ctest --test-dir "$B" -L gpu -j 1 --output-on-failure -V "${ctest_extra[@]}" || true
}

# The default suite as CI runs it, without the GPU tests. It comes last: CI runs it on
# every change, while the GPU tests and benchmarks run only where a GPU is lent, so
# they get the time budget first.
default_tests() {
    step "ctest -LE 'slow|gpu'" ctest-default.log \
        ctest --test-dir "$B" -LE 'slow|gpu' -j 12 --output-on-failure "${ctest_extra[@]}" || true
}

bench() {
    measures=train.jsonl step "bench-train" bench-train.log scripts/gpu/bench-train.sh "$res" || true
    measures=compress.jsonl step "bench-compress" bench-compress.log scripts/gpu/bench-compress.sh "$res" || true
}

case $mode in
build-test)
    build && gpu_tests && default_tests
    ;;
bench)
    build && bench
    ;;
all | cpu-check)
    build && gpu_tests && bench && default_tests
    ;;
esac
publish final
say "results: $out/gpu-results.tar.gz (everything), summary.txt, steps.tsv, figures.md"
cat "$res/figures.md" >&2
exit "$failed"
