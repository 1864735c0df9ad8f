#!/usr/bin/env bash
# Configures and builds into build/ (or $ACC_BUILD_DIR). Extra arguments go to cmake.
# Says what it does before each step and never hides an error: cmake's output
# is kept in $build/configure.log and shown in full when configuring fails;
# ninja (or make) prints a line per compiled file and every compiler message.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ACC_BUILD_DIR:-build}
jobs=${ACC_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
mkdir -p "$build"
echo "build.sh: configuring $build (cmake, Release)" >&2
if ! cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "$@" \
    >"$build/configure.log" 2>&1; then
    cat "$build/configure.log" >&2
    echo "build.sh: error: configuring $build failed (above; also in $build/configure.log)" >&2
    exit 1
fi
# A first build takes minutes (LibTorch's headers alone take ~14 s a file); a
# rebuild with nothing to do takes a second.
echo "build.sh: building $build with $jobs job(s); the programs go to $build/bin" >&2
if ! cmake --build "$build" -j "$jobs"; then
    echo "build.sh: error: the build failed; the compiler's messages are above" >&2
    exit 1
fi
echo "build.sh: built $build/bin" >&2
