#!/usr/bin/env bash
# Sets up, builds and runs the test suite.
#   scripts/test.sh          the default suite (everything but tests labelled slow)
#   scripts/test.sh --all    every test, slow ones included
# Further arguments go to ctest, e.g. -L unit or -R regime.
set -euo pipefail
cd "$(dirname "$0")/.."
select=(-LE slow) suite="the default test suite (no tests labelled slow)"
if [ "${1:-}" = "--all" ]; then
    select=() suite="every test"
    shift
fi
echo "test.sh: checking the Debian packages (scripts/setup.sh)" >&2
scripts/setup.sh
scripts/build.sh
echo "test.sh: running $suite with ctest; a failing test's output is shown in full" >&2
ctest --test-dir "${ACC_BUILD_DIR:-build}" --output-on-failure -j "${ACC_JOBS:-$(nproc)}" "${select[@]}" "$@"
