#!/usr/bin/env bash
# The Python package on a GPU: installed as users install it (pip, against the torch
# of ACC_PYTHON, offline), its compressing DDP hook trains on CUDA tensors over Gloo
# (two ranks), NCCL (one rank) and a Gloo group without a CPU backend (two ranks) as
# on the CPU, for every compressor family
# (python_hook_cuda.py says how it compares), and compress_fsdp over NCCL against
# compress_fsdp on the CPU (tests/python/fsdp_cuda.py). The package comes from this build's own
# folder (ACCORDION_BUILD_DIR: the same CMake run, nothing compiled again), so it has
# the CUDA kernels this build has: the hook then runs them.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"

probe=0
"$ACC_PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' >"$WORK/probe" 2>&1 || probe=$?
if [ "$probe" = 3 ]; then
    echo "SKIPPED: $ACC_PYTHON's torch sees no CUDA device; this test runs on a GPU machine"
    exit 77
elif [ "$probe" != 0 ]; then
    echo "SKIPPED: $ACC_PYTHON cannot import torch: $(tail -1 "$WORK/probe")"
    exit 77
fi

site="$WORK/site"
started=$(date +%s)
# The package comes from this build's own objects (one CMake run for the programs and it).
if ! ACCORDION_BUILD_DIR="$ACC_BUILD_DIR" \
    "$ACC_PYTHON" -m pip install -v --disable-pip-version-check --no-deps --no-build-isolation --target "$site" \
    "$ACC_SOURCE/python" >"$WORK/install.log" 2>&1; then
    fail "pip install ./python against $ACC_PYTHON's torch failed:"
    tail -30 "$WORK/install.log" | sed 's/^/    /' >&2
    finish
fi
echo "the package built and installed in $(($(date +%s) - started)) s"

expected=$(cmake_cuda_kernels)
kernels=$(PYTHONPATH="$site" "$ACC_PYTHON" -c 'import accordion; print(accordion.CUDA_KERNELS)' 2>&1 | tail -1)
if [ "$kernels" = "$expected" ]; then
    echo "the package's CUDA kernels: ${kernels:-none, as in this build}"
else
    fail "the package's CUDA kernels are '$kernels', this build's '$expected' (the install's configure says why):"
    grep -i "cuda" "$WORK/install.log" | tail -5 | sed 's/^/    /' >&2
fi

got=0
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$ACC_PYTHON" "$ACC_SOURCE/tests/gpu/python_hook_cuda.py" || got=$?
[ "$got" = 77 ] && exit 77
[ "$got" = 0 ] || fail "the hook on the GPU differs from the hook on the CPU, or failed (exit $got; above)"
# compress_fsdp (FSDP2) on the GPUs over NCCL, one rank per GPU (tests/python/fsdp_cuda.py
# says which layout and what it compares; tests/python/test_fsdp.py runs it under pytest).
got=0
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$ACC_PYTHON" "$ACC_SOURCE/tests/python/fsdp_cuda.py" || got=$?
[ "$got" = 0 ] || [ "$got" = 77 ] ||
    fail "compress_fsdp on the GPU differs from compress_fsdp on the CPU, or failed (exit $got; above)"
finish
