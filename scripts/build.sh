#!/usr/bin/env bash
# Configures and builds into build/ (or $ACC_BUILD_DIR). Extra arguments go to cmake.
# ACC_BUILD_TARGETS (e.g. "grad-dump regime-detect train-dist") builds those targets
# only; by default everything, the tests and the Python package's library included.
#   scripts/build.sh               against Debian's LibTorch 1.13 (CPU), into build/
#   scripts/build.sh --torch pip   against pip's torch 2.11 (CUDA 13, NCCL), into build-pip/;
#                                  scripts/setup-pip-torch.sh installs it first
# Says what it does before each step and never hides an error: cmake's output
# is kept in $build/configure.log and shown in full when configuring fails;
# ninja (or make) prints a line per compiled file and every compiler message.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch-choice.sh
acc_torch_choice build.sh "$@"
shift "$acc_torch_shift"
torch_args=()
if [ "$torch" = pip ]; then
    echo "build.sh: checking pip's torch (scripts/setup-pip-torch.sh)" >&2
    pip_python=$(scripts/setup-pip-torch.sh)
    # Its python runs the tests too (torchrun, the PyTorch references) unless ACC_PYTHON says otherwise.
    torch_args=("-DCMAKE_PREFIX_PATH=$("$pip_python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
        "-DACC_PYTHON=${ACC_PYTHON:-$pip_python}")
fi
jobs=${ACC_JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && [ ! -f "$build/Makefile" ] && generator=(-G Ninja)
launcher=()
if command -v ccache >/dev/null; then
    # ccache caches a file compiled with LibTorch's precompiled header only with these
    # two sloppinesses (the header's own bytes are still part of the key); without them
    # it compiles every such file again. nvcc through ccache too where CUDA is built.
    ccache_pch="env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"
    launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=$ccache_pch")
    [ "$torch" != pip ] || launcher+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# Paths below the checkout hashed as relative ones: a fresh clone elsewhere (CI's)
# reuses what an earlier build compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
mkdir -p "$build"
echo "build.sh: configuring $build (cmake, Release, $torch's LibTorch)" >&2
if ! cmake -S . -B "$build" "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release "${torch_args[@]}" "$@" \
    >"$build/configure.log" 2>&1; then
    cat "$build/configure.log" >&2
    echo "build.sh: error: configuring $build failed (above; also in $build/configure.log)" >&2
    exit 1
fi
# What configure found: LibTorch's version, CUDA and NCCL, Gloo.
grep -E '^-- (LibTorch|CUDA LibTorch|CUDA kernels|NCCL|Gloo|fmt)' "$build/configure.log" | sed 's/^-- /build.sh: /' >&2 || true
# A first build takes minutes (LibTorch's headers alone take ~14 s a file); a
# rebuild with nothing to do takes a second.
targets=()
for target in ${ACC_BUILD_TARGETS:-}; do targets+=(--target "$target"); done
what="everything"
[ ${#targets[@]} = 0 ] || what="$ACC_BUILD_TARGETS"
echo "build.sh: building $what in $build with $jobs job(s); the programs go to $build/bin" >&2
if ! cmake --build "$build" -j "$jobs" "${targets[@]}"; then
    echo "build.sh: error: the build failed; the compiler's messages are above" >&2
    exit 1
fi
echo "build.sh: built $build/bin" >&2
