#!/usr/bin/env bash
# What a GPU machine has to do, in two runs (docs/gpu.md), from the project's root
# with the GPU kit in .gpu-kit (scripts/gpu/make-kit.sh makes it):
#   scripts/gpu/run-all.sh [short [OUTDIR]]   every figure, within BUDGET (default 420 s) of
#       a bare machine: the kit, a build of the five programs and test_gpu alone, for this
#       machine's GPU architecture (CUDA_ARCH, else nvidia-smi's compute capability), then
#       `ctest -R gpu.unit`, scripts/gpu/bench-train.sh (batch 128 only), scripts/gpu/bench-compress.sh
#       (REPS 10), and the GPU tests of the programs (`ctest -L gpu`, comm-profile over NCCL
#       among them, the Python package's left for the second run)
#   scripts/gpu/run-all.sh second [OUTDIR]     what the short run leaves out, within BUDGET
#       (default 540 s): the whole tree built for the default architectures, then
#       gpu.python_hook_cuda (which builds the Python package) and the default suite
#       (`ctest -LE 'slow|gpu'`, which CI runs anyway, last; it reads Fashion-MNIST, so its
#       kit is made with make-kit.sh --with-data)
#   scripts/gpu/run-all.sh --cpu-check [short|second [OUTDIR]]   the same steps on the CPU,
#       in seconds, so that the flow is checked between GPU runs (tests/e2e/gpu_flow.sh): no
#       configure or build (B, default build, must hold the programs), the default suite
#       limited to `ctest -R "$CHECK_TESTS"`, the benchmarks with --device cpu and tiny sizes
# It prints its plan first (each step, its expected seconds, the time limit). OUTDIR ($OUT
# when set, else gpu-results) gets four files: gpu-results.tar.gz (everything: logs/,
# steps.tsv, the measurements' train.jsonl and compress.jsonl, the traces trace-*.json of
# training and compressor steps and their summaries traces-train.md and traces-compress.md,
# figures.md, summary.txt), and summary.txt, steps.tsv and figures.md to read at once.
# They are rewritten after every step, so that a run stopped at its limit still returns
# what was done.
# A failing step (a benchmark with a failed measurement too) is recorded in steps.tsv
# with its status, seconds and log, and the next one still runs (a failed build ends
# the run); the exit status is 1 if anything failed.
# Environment: B (build directory, default build-gpu), JOBS (16), CUDA_ARCH (the short
# run's kernel architecture, e.g. 90; default: the GPU's, from nvidia-smi), ACC_KIT_GLOO
# (1: the kit's Gloo headers, for the Gloo backend), ACC_GPU_KIT (the kit, default .gpu-kit;
# "none" on a machine that has the dependencies: then PYTHON, default the first python3
# with torch, gives LibTorch's CMake prefix and -DACC_PYTHON), CTEST_ARGS (more ctest
# options for every test step, e.g. "-E nccl"), CHECK_TESTS (--cpu-check's ctest -R for
# the default suite, default '^(Text\.|gpu\.unit$)'), BUDGET (seconds for the whole run:
# a step that would run past it is stopped, or not started and recorded in steps.tsv as
# "NOT RUN (BUDGET seconds reached)" with the number, so that the results are packed
# before a limit on the command ends it), ARCHIVE_LIMIT (bytes, default 15 MiB: a
# larger archive is packed again without the traces), and the
# benchmarks' own (DEVICE, BATCHES, STEPS, REPS, ...: see their headers; the short run's
# sizes are defaults there, the caller's values win).
set -euo pipefail
usage="usage: scripts/gpu/run-all.sh [--cpu-check] [short|second [OUTDIR]]   (short when no mode is given)"
cpu_check=
if [ "${1:-}" = --cpu-check ]; then
    cpu_check=1
    shift
fi
mode=${1:-short}
case $mode in
short | second) [ $# -eq 0 ] || shift ;;
*)
    echo "$usage" >&2
    exit 2
    ;;
esac
[ $# -le 1 ] || { echo "$usage" >&2; exit 2; }
out=${1:-${OUT:-gpu-results}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/../.."
default_b=build-gpu
[ -z "$cpu_check" ] || default_b=build
export B=${B:-$default_b}
jobs=${JOBS:-16}
kit=${ACC_GPU_KIT:-.gpu-kit}
failed=0
default_budget=420
[ "$mode" = short ] || default_budget=540
budget=${BUDGET:-$default_budget}
reserve=15 # seconds kept for figures.md and the archive
archive_limit=${ARCHIVE_LIMIT:-$((15 << 20))}
started=$(date +%s)
configured=
label="$mode${cpu_check:+ (--cpu-check)}"

say() { echo "run-all: $*" >&2; }

if [ -n "$cpu_check" ]; then
    kit=none
    check_tests=${CHECK_TESTS:-'^(Text\.|gpu\.unit$)'}
    # The benchmarks' smallest sizes (as tests/gpu/scripts_cpu.sh runs them); the
    # caller's own values win, so that a test can make one of them fail.
    export DEVICE=cpu BATCHES=${BATCHES:-2} STEPS=${STEPS:-1} EPOCHS=${EPOCHS:-2} TORCH_STEPS=${TORCH_STEPS:-1} \
        TORCH_WARMUP=${TORCH_WARMUP:-0} THREADS=${THREADS:-1} VALUES=${VALUES:-20000} SHAPES=${SHAPES:-tiny} \
        REPS=${REPS:-1}
else
    # The short run's sizes: the batch of the training goal (128) alone, 30 steps an
    # epoch, 10 repetitions of each compressor (the benchmarks' defaults are larger).
    export BATCHES=${BATCHES:-128} STEPS=${STEPS:-30} REPS=${REPS:-10} TORCH_STEPS=${TORCH_STEPS:-60}
fi

# The plan: each step with the seconds it is expected to take on a bare 16-core
# machine with one H100 or H200 (estimates from the H200 runs of docs/gpu.md, "Seen on a
# GPU", as noted then, their logs not kept: the kit 9 s, the whole tree built for six
# architectures 110 s, the GPU tests 93 s).
if [ "$mode" = short ]; then
    plan=("kit 10" "build (programs and test_gpu) 90" "gpu.unit 40" "bench-train 100" "bench-compress 70"
        "ctest -L gpu (programs) 90")
else
    plan=("kit 10" "build (whole tree) 120" "gpu.python_hook_cuda 200" "ctest -LE 'slow|gpu' 180")
fi
planned=0
plan_text=
for p in "${plan[@]}"; do
    planned=$((planned + ${p##* }))
    plan_text+="${plan_text:+, }${p% *} ~${p##* } s"
done
plan_line="plan ($label): $plan_text; about $planned s of a $budget s limit"
say "$plan_line"
[ "$planned" -le "$budget" ] || say "warning: the plan's $planned s exceed BUDGET ($budget s): the last steps may not run"

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
        say "$name: not started, BUDGET ($budget s) reached"
        record "$name" "NOT RUN ($budget seconds reached)" 0 "-"
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
        echo "scripts/gpu/run-all.sh $label: $state; $(($(date +%s) - started)) s of a $budget s budget"
        echo "$plan_line"
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
    # Some machines cap the size of a file copied back: above ARCHIVE_LIMIT the traces are
    # left out (their summaries, in figures.md, stay), and summary.txt says so.
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
        say "error: $kit/env.sh: no GPU kit; make it with scripts/gpu/make-kit.sh and copy it with the checkout (docs/gpu.md), or set ACC_GPU_KIT=none"
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
elif [ -z "$cpu_check" ]; then
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
if [ -z "$cpu_check" ]; then
    nvidia-smi >"$res/logs/nvidia-smi.log" 2>&1 || say "nvidia-smi failed or is missing (logs/nvidia-smi.log)"
fi

# The short run builds the kernels for this machine's GPU alone: CUDA_ARCH, else the
# compute capability nvidia-smi reports ("9.0" is 90); without either, the default list.
build_targets=()
if [ "$mode" = short ]; then
    build_targets=(--target grad-dump regime-detect train-dist compress-bench comm-profile test_gpu)
    arch=${CUDA_ARCH:-}
    if [ -z "$arch" ] && [ -z "$cpu_check" ]; then
        arch=$( (nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true) | head -1 | tr -d ' .')
    fi
    if [[ $arch =~ ^[0-9]+$ ]]; then
        CMAKE_ARGS+=("-DACC_CUDA_ARCHITECTURES=$arch-real")
        say "CUDA kernels for this GPU's architecture: $arch-real"
    elif [ -z "$cpu_check" ]; then
        [ -z "$arch" ] || say "warning: CUDA_ARCH '$arch' is not a number such as 90: building the default architectures"
        [ -n "$arch" ] || say "warning: nvidia-smi gave no compute capability: building the default architectures"
    fi
else
    CMAKE_ARGS+=(-UACC_CUDA_ARCHITECTURES) # the default list, whatever a short run left in B
fi

build() {
    if [ -n "$cpu_check" ]; then
        # shellcheck disable=SC2016
        step "build (existing)" build.log bash -c 'for p in grad-dump train-dist compress-bench; do
            [ -x "$B/bin/$p" ] || { echo "$B/bin/$p: missing; --cpu-check uses a build made before (B)"; exit 1; }
            done; echo "--cpu-check: no configure or build; the programs of $B/bin"; ls -l "$B/bin/"'
        return
    fi
    # In a shell of its own, so that the time budget's `timeout` can stop it. The targets
    # follow "--" (none: the whole tree).
    local name="build (whole tree)"
    [ "$mode" != short ] || name="build (programs and test_gpu)"
    # shellcheck disable=SC2016
    if step "$name" build.log bash -c 'jobs=$1; shift; args=(); while [ "$1" != -- ]; do args+=("$1"); shift; done; shift
        cmake -S . -B "$B" "${args[@]}" && cmake --build "$B" -j "$jobs" "$@"' \
        configure-and-build "$jobs" "${CMAKE_ARGS[@]}" -- "${build_targets[@]}"; then
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

# ctest_step NAME LOG CTEST-SELECTION...: one ctest run, one test at a time (the GPU
# tests share the one GPU); a failed test is recorded and the run goes on.
ctest_step() {
    local name=$1 log=$2
    shift 2
    step "$name" "$log" ctest --test-dir "$B" -j 1 --output-on-failure -V "$@" "${ctest_extra[@]}" || true
}

# The default suite as CI runs it, without the GPU tests. It comes last: CI runs it on
# every change, while what only a GPU can show gets the time budget first.
default_tests() {
    local select=()
    [ -z "$cpu_check" ] || select=(-R "$check_tests")
    step "ctest -LE 'slow|gpu'" ctest-default.log \
        ctest --test-dir "$B" -LE 'slow|gpu' -j 12 --output-on-failure "${select[@]}" "${ctest_extra[@]}" || true
}

bench() {
    measures=train.jsonl step "bench-train" bench-train.log scripts/gpu/bench-train.sh "$res" || true
    measures=compress.jsonl step "bench-compress" bench-compress.log scripts/gpu/bench-compress.sh "$res" || true
}

if [ "$mode" = short ]; then
    if build; then
        ctest_step "gpu.unit" ctest-gpu-unit.log -R '^gpu\.unit$'
        bench
        ctest_step "ctest -L gpu (programs)" ctest-gpu.log -L gpu -E '^gpu\.(unit|python_hook_cuda)$'
    fi
else
    if build; then
        ctest_step "gpu.python_hook_cuda" ctest-gpu-python.log -R '^gpu\.python_hook_cuda$'
        default_tests
    fi
fi
publish final
say "results: $out/gpu-results.tar.gz (everything), summary.txt, steps.tsv, figures.md"
cat "$res/figures.md" >&2
exit "$failed"
