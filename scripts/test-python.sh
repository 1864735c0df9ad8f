#!/usr/bin/env bash
# Installs the Python package (python/) the way users do, with pip against one
# torch, and runs its tests (tests/python, pytest) with the build's programs.
#   scripts/test-python.sh                Debian's python3-torch 1.13: a venv with
#                                         --system-site-packages in $build/python-venv
#   scripts/test-python.sh --torch pip    pip's torch 2.11 (scripts/setup-pip-torch.sh's
#                                         environment), the package in $build/python-site
# Nothing is installed into the system's Python or the shared torch environment.
# $build is build/ or build-pip/ ($ACC_BUILD_DIR), where scripts/build.sh put the
# programs. Further arguments go to pytest (e.g. -k resume).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-choice.sh
acc_torch_choice test-python.sh "$@"
shift "$acc_torch_shift"
[ -x "$build/bin/regime-detect" ] ||
    { echo "test-python.sh: error: $build/bin/regime-detect: not built (scripts/build.sh --torch $torch)" >&2; exit 1; }
build=$(cd "$build" && pwd)
# The package comes from the build's own objects: one CMake run for the programs and it.
export ACCORDION_BUILD_DIR="$build"
start=$(date +%s)
case $torch in
debian)
    venv="$build/python-venv"
    if [ ! -x "$venv/bin/python" ]; then
        echo "test-python.sh: making $venv (Debian's python3 with its packages: torch, h5py, pytest)" >&2
        /usr/bin/python3 -m venv --system-site-packages "$venv"
    fi
    python="$venv/bin/python"
    echo "test-python.sh: pip install ./python into $venv" >&2
    "$python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall ./python
    ;;
pip)
    python=$(scripts/setup-pip-torch.sh)
    site="$build/python-site" tools="$build/python-tools"
    if ! PYTHONPATH="$tools" "$python" -c 'import pytest' 2>/dev/null; then
        echo "test-python.sh: installing pytest into $tools (pip)" >&2
        rm -rf "$tools"
        "$python" -m pip install -q --disable-pip-version-check --target "$tools" pytest
    fi
    echo "test-python.sh: pip install ./python into $site" >&2
    rm -rf "$site"
    "$python" -m pip install -q --disable-pip-version-check --no-deps --target "$site" ./python
    export PYTHONPATH="$site:$tools${PYTHONPATH:+:$PYTHONPATH}"
    ;;
esac
echo "test-python.sh: installed in $(($(date +%s) - start)) s; running tests/python against $torch's torch" >&2
# A test that hangs ends the run with every thread's stack (tests/python/conftest.py);
# this limit is for a hang outside any test.
limit=${ACC_PYTEST_SECONDS:-1800}
[[ $limit =~ ^[1-9][0-9]*$ ]] ||
    { echo "test-python.sh: error: ACC_PYTEST_SECONDS: must be a whole number of seconds, not '$limit'" >&2; exit 2; }
status=0
ACC_BIN="$build/bin" timeout --kill-after=30 "$limit" "$python" -m pytest -p no:cacheprovider -q --durations=5 \
    tests/python "$@" || status=$?
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    echo "test-python.sh: error: pytest still running after $limit s (ACC_PYTEST_SECONDS); stopped" >&2
fi
exit "$status"
