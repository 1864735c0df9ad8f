#!/usr/bin/env bash
# --version: the first line names the program and the toolkit's version; the programs
# that use LibTorch add what they were built with (regime-detect, which loads none,
# the LibTorch of its build), which must be what configure found:
# LibTorch's version and whether it has CUDA, the backends (Gloo where its headers were
# found, NCCL with its header's version) and the CUDA kernels' architectures.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"

version=$(sed -n 's/^project(accordion VERSION \([0-9.]*\).*/\1/p' "$ACC_SOURCE/CMakeLists.txt")
torch=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$(cmake_cached Torch_DIR)/TorchConfigVersion.cmake")
nccl_dir=$(cmake_cached ACC_NCCL_INCLUDE_DIR)
backends=
[ "$(cmake_cached ACC_HAVE_GLOO)" = 1 ] && backends=gloo
if [ -n "$nccl_dir" ]; then
    nccl=$(for part in MAJOR MINOR PATCH; do sed -n "s/^#define NCCL_$part  *\([0-9]*\).*/\1/p" "$nccl_dir/nccl.h"; done |
        paste -sd.)
    expected="LibTorch $torch with CUDA; backends: ${backends:+$backends, }nccl $nccl"
else
    expected="LibTorch $torch without CUDA; backends: $backends"
fi
kernels=$(cmake_cuda_kernels)
expected+="; CUDA kernels: ${kernels:-none}"
echo "expected: $expected"

tools=0
for dir in "$ACC_SOURCE"/tools/*/; do
    tool=$(basename "$dir")
    tools=$((tools + 1))
    "$tool" --version >"$WORK/version" 2>"$WORK/err" || { fail "$tool --version exited with $?"; continue; }
    [ "$(sed -n 1p "$WORK/version")" = "$tool (Accordion toolkit) $version" ] ||
        fail "$tool --version, first line: $(sed -n 1p "$WORK/version")"
    if [ "$tool" = regime-detect ]; then
        [ "$(sed -n 2p "$WORK/version")" = "built with LibTorch $torch (which regime-detect does not load)" ] ||
            fail "regime-detect --version, second line: $(sed -n 2p "$WORK/version")"
    else
        [ "$(sed -n 2p "$WORK/version")" = "$expected" ] || fail "$tool --version, second line: $(sed -n 2p "$WORK/version")"
    fi
    if [ -s "$WORK/err" ]; then fail "$tool --version wrote to stderr: $(cat "$WORK/err")"; fi
done
[ "$tools" -ge 5 ] || fail "found $tools programs under $ACC_SOURCE/tools"
finish
