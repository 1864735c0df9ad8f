#!/usr/bin/env bash
# Sets up, builds and runs the test suite.
#   scripts/test.sh          the default suite (everything but tests labelled slow)
#   scripts/test.sh --all    every test, slow ones included
# Further arguments go to ctest, e.g. -L unit or -R regime.
set -euo pipefail
cd "$(dirname "$0")/.."
select=(-LE slow)
if [ "${1:-}" = "--all" ]; then
    select=()
    shift
fi
scripts/setup.sh
scripts/build.sh
ctest --test-dir "${ACC_BUILD_DIR:-build}" --output-on-failure -j "${ACC_JOBS:-$(nproc)}" "${select[@]}" "$@"
