#!/usr/bin/env bash
# QSGD's kernel stores a block's buckets into shared memory 16 bytes at a time: a
# warp's 32 stores then fill one bucket's row without a bank conflict, where four
# 4-byte stores each would meet four lanes in a bank. A GPU would show it only as
# speed; the PTX nvcc makes of the kernels shows it on any machine with nvcc: in
# every instantiation of qsgd_kernel the tile's stores are st.shared.v4.f32, and
# the only 4-byte float store to shared memory left is the bucket's norm.
source "$(dirname "$0")/common.sh"
: "${ACC_BUILD_DIR:?set by ctest}"

if [ "$(cmake_cached ACC_CUDA_KERNELS)" != ON ]; then
    echo "skip: built without the CUDA kernels (ACC_CUDA_KERNELS)"
    exit 77
fi
nvcc=$(cmake_cached CMAKE_CUDA_COMPILER)
[ -x "$nvcc" ] || { fail "the build's nvcc ($nvcc) is missing"; finish; }
"$nvcc" -std=c++17 -I "$ACC_SOURCE/lib" -arch=sm_90 -DACC_CUDA_ARCHITECTURES_BUILT='"90"' -ptx \
    "$ACC_SOURCE/lib/compress/cuda/encoders.cu" -o "$WORK/encoders.ptx" 2>"$WORK/nvcc.err" ||
    { fail "nvcc -ptx failed: $(tail -5 "$WORK/nvcc.err")"; finish; }
# Per kernel entry whose name holds qsgd_kernel: its 16-byte and 4-byte float stores to shared memory.
awk '/\.entry/ { name = $0; inside = (name ~ /qsgd_kernel/); if (inside) kernels++ }
     inside && /st\.shared\.v4\.f32/ { wide[name]++ }
     inside && /st\.shared\.f32/ { narrow[name]++ }
     END { for (k in wide) n++; print kernels + 0; print n + 0
           for (k in narrow) if (narrow[k] > 1) { print narrow[k] " 4-byte float stores in" k; bad = 1 }
           exit bad }' "$WORK/encoders.ptx" >"$WORK/counts" ||
    fail "a qsgd_kernel stores floats to shared memory 4 bytes at a time: $(tail -n +3 "$WORK/counts")"
read -r kernels < <(head -1 "$WORK/counts")
with_wide=$(sed -n 2p "$WORK/counts")
[ "$kernels" = 4 ] || fail "expected four qsgd_kernel instantiations in the PTX, found $kernels"
[ "$with_wide" = "$kernels" ] || fail "only $with_wide of $kernels qsgd_kernels store 16 bytes to shared memory"
echo "qsgd_kernel: $kernels instantiations, each storing its tile 16 bytes at a time"
finish
