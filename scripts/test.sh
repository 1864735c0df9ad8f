#!/usr/bin/env bash
# Sets up, builds and runs the test suite.
#   scripts/test.sh          the default suite (everything but tests labelled slow)
#   scripts/test.sh --all    every test, slow ones included
#   scripts/test.sh --torch pip [--all]
#                            the same against pip's torch 2.11 (CUDA 13, NCCL) in build-pip/
#   ... --skip-torch-independent
#                            without the tests labelled torch_independent, whose checks do
#                            not depend on the PyTorch version (CI's second build: its
#                            first ran them)
# Further arguments go to ctest, e.g. -L unit or -R regime; without them the Python
# package's tests follow (scripts/test-python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-choice.sh
acc_torch_choice test.sh "$@"
shift "$acc_torch_shift"
select=(-LE slow) suite="the default test suite (no tests labelled slow)"
if [ "${1:-}" = "--all" ]; then
    select=() suite="every test"
    shift
fi
if [ "${1:-}" = "--skip-torch-independent" ]; then
    # CI's second build: what does not depend on the PyTorch version ran in the first.
    if [ ${#select[@]} = 0 ]; then select=(-LE torch_independent); else select=(-LE 'slow|torch_independent'); fi
    suite+=", without the tests labelled torch_independent"
    shift
fi
# Each part's time is printed as it ends: a run stopped from outside (CI's limit)
# still shows where its time went.
start=$(date +%s)
mark=$start times=()
part_done() {
    local now
    now=$(date +%s)
    times+=("$1 $((now - mark)) s")
    echo "test.sh: $1 took $((now - mark)) s ($((now - start)) s since the start)" >&2
    mark=$now
}
echo "test.sh: checking the Debian packages (scripts/setup.sh)" >&2
scripts/setup.sh
part_done "set-up"
ACC_BUILD_DIR=$build scripts/build.sh --torch "$torch"
part_done "build"
echo "test.sh: running $suite against $torch's LibTorch with ctest; a failing test's output is shown in full" >&2
ctest --test-dir "$build" --output-on-failure -j "${ACC_JOBS:-$(nproc)}" "${select[@]}" "$@"
part_done "ctest"
# The Python package against the same torch; not when ctest was given a selection.
if [ $# -eq 0 ]; then
    echo "test.sh: testing the Python package (scripts/test-python.sh --torch $torch)" >&2
    ACC_BUILD_DIR=$build scripts/test-python.sh --torch "$torch"
    part_done "Python package"
fi
summary=$(printf '%s, ' "${times[@]}")
label="pip's torch"
[ "$torch" = debian ] && label="Debian's LibTorch"
echo "test.sh: $label passed in $(($(date +%s) - start)) s (${summary%, })" >&2
