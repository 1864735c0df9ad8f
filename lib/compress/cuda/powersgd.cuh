// PowerSGD's rounds over all matrices of a step in one kernel each, where the ATen path
// takes a batched product per shape, a padded batch and a dozen operations per
// orthogonalization, and copies in and out of it: on a GPU each of those operations costs
// the host a few microseconds, and they, not the GPU's work, set a step's time.
//
// The matrices lie back to back in three flat buffers: M (the memories, [rows, cols]
// each), P ([rows, rank]) and Q ([cols, rank]); a table of Matrix entries in device
// memory says where each one lies. Sums run in a fixed order, so every run gives the
// same bits; they are not the host's order, so results agree with the host's kernels
// within rounding.
//
// The kernels use only blocks, shared memory, __syncthreads and __shfl_xor_sync, each
// reached by all 32 lanes of a warp and every __syncthreads by all threads of a block,
// so that the CPU tests run this same text with each block's threads as fibers
// (tests/unit/cuda_emulation.hpp).
#pragma once

#include "compress/cuda/common.cuh"
#include "compress/cuda/powersgd_layout.hpp"

#include <cmath>  // INFINITY
#include <cstdint>

namespace acc::compress::cuda::powersgd {

constexpr int kThreads = 256;  // per block, every kernel

// The last matrix whose field `first` is at most `index` (matrices ascending in it).
template <class First>
__device__ __forceinline__ int matrix_at(const Matrix* matrices, int count, std::int64_t index, First first) {
    int low = 0, high = count - 1;
    while (low < high) {
        const int middle = (low + high + 1) / 2;
        if (first(matrices[middle]) <= index)
            low = middle;
        else
            high = middle - 1;
    }
    return low;
}

struct FirstRow {
    __device__ std::int64_t operator()(const Matrix& a) const { return a.first_row; }
};
struct FirstColumn {
    __device__ std::int64_t operator()(const Matrix& a) const { return a.first_column; }
};
struct FirstValue {
    __device__ std::int64_t operator()(const Matrix& a) const { return a.m; }
};

// P = M Q: one warp per row of a matrix, its lanes across the row, four loads in flight
// each; the rank sums reduced across the warp.
__global__ void project_rows_kernel(const float* m, const float* q, float* p, const Matrix* matrices, int count,
                                    std::int64_t rows) {
    const std::int64_t row_index = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = static_cast<int>(threadIdx.x % 32);
    if (row_index >= rows) return;  // whole warps leave together
    const Matrix a = matrices[matrix_at(matrices, count, row_index, FirstRow())];
    const std::int64_t row = row_index - a.first_row;
    const float* values = m + a.m + row * a.cols;
    const float* qa = q + a.q;
    const int rank = static_cast<int>(a.rank);
    float sum[kMaxRank] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (std::int64_t c = lane; c < a.cols; c += 4 * 32) {
        float v[4];
        for (int u = 0; u < 4; ++u) v[u] = c + 32 * u < a.cols ? values[c + 32 * u] : 0.0f;
        for (int u = 0; u < 4; ++u) {
            if (c + 32 * u >= a.cols) break;
            for (int k = 0; k < kMaxRank; ++k)
                if (k < rank) sum[k] = __fadd_rn(sum[k], __fmul_rn(v[u], qa[(c + 32 * u) * rank + k]));
        }
    }
    for (int k = 0; k < kMaxRank; ++k) {
        if (k >= rank) break;  // the same rank across the warp
        for (int offset = 16; offset > 0; offset /= 2)
            sum[k] = __fadd_rn(sum[k], __shfl_xor_sync(kAllLanes, sum[k], offset));
    }
    if (lane != 0) return;
    for (int k = 0; k < kMaxRank; ++k)
        if (k < rank) p[a.p + row * rank + k] = sum[k];
}

// A block's sum of one double per thread, in a fixed order; every thread gets it.
__device__ __forceinline__ double block_sum(double value, double* scratch) {
    scratch[threadIdx.x] = value;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (static_cast<int>(threadIdx.x) < half)
            scratch[threadIdx.x] = __dadd_rn(scratch[threadIdx.x], scratch[threadIdx.x + half]);
        __syncthreads();
    }
    const double sum = scratch[0];
    __syncthreads();  // every thread has read it before the scratch is written again
    return sum;
}

// Gram-Schmidt on the columns of one matrix per block ([n, rank]), as the host's
// gram_schmidt: each column divided by its norm (plus epsilon where epsilon > 0; a
// divisor that is not positive, zero or NaN, is infinity: a zero column stays zero and a
// NaN stays NaN), then taken out of the later columns; the norms and dot
// products summed in double. Each thread keeps to its own rows, so only the sums need
// the block.
__global__ void orthogonalize_kernel(float* buffer, const Matrix* matrices, bool columns, float epsilon) {
    __shared__ double scratch[kThreads];
    const Matrix a = matrices[blockIdx.x];
    const std::int64_t n = columns ? a.cols : a.rows;
    float* x = buffer + (columns ? a.q : a.p);
    const int rank = static_cast<int>(a.rank);
    for (int i = 0; i < rank; ++i) {
        double squares = 0.0;
        for (std::int64_t row = threadIdx.x; row < n; row += kThreads) {
            const double v = x[row * rank + i];
            squares = __dadd_rn(squares, __dmul_rn(v, v));
        }
        const float norm = static_cast<float>(sqrt(block_sum(squares, scratch)));
        const float sum = epsilon > 0.0f ? __fadd_rn(norm, epsilon) : norm;
        const float divisor = sum > 0.0f ? sum : INFINITY;
        for (std::int64_t row = threadIdx.x; row < n; row += kThreads) {
            float& v = x[row * rank + i];
            v = __fdiv_rn(v, divisor);
        }
        for (int j = i + 1; j < rank; ++j) {
            double dot = 0.0;
            for (std::int64_t row = threadIdx.x; row < n; row += kThreads) {
                const double vi = x[row * rank + i], vj = x[row * rank + j];
                dot = __dadd_rn(dot, __dmul_rn(vi, vj));
            }
            const auto d = static_cast<float>(block_sum(dot, scratch));
            for (std::int64_t row = threadIdx.x; row < n; row += kThreads)
                x[row * rank + j] = __fsub_rn(x[row * rank + j], __fmul_rn(d, x[row * rank + i]));
        }
    }
}

constexpr int kSlices = kThreads / 32;  // row slices per column in project_columns_kernel

// Q = M^T P: a block takes 32 consecutive columns (of all matrices, in order); its eight
// warps sum rows s, s + 8, ... of each, reading a row's 32 columns at once, and warp 0
// adds the eight partial sums in order.
__global__ void project_columns_kernel(const float* m, const float* p, float* q, const Matrix* matrices, int count,
                                       std::int64_t columns) {
    __shared__ float partial[kSlices][kMaxRank][32];
    const int lane = static_cast<int>(threadIdx.x % 32), slice = static_cast<int>(threadIdx.x / 32);
    const std::int64_t column_index = static_cast<std::int64_t>(blockIdx.x) * 32 + lane;
    const bool inside = column_index < columns;
    Matrix a{};
    if (inside) a = matrices[matrix_at(matrices, count, column_index, FirstColumn())];
    const std::int64_t c = column_index - a.first_column;
    const int rank = static_cast<int>(a.rank);
    float sum[kMaxRank] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (std::int64_t row = slice; inside && row < a.rows; row += kSlices) {
        const float v = m[a.m + row * a.cols + c];
        for (int k = 0; k < kMaxRank; ++k)
            if (k < rank) sum[k] = __fadd_rn(sum[k], __fmul_rn(p[a.p + row * rank + k], v));
    }
    for (int k = 0; k < kMaxRank; ++k) partial[slice][k][lane] = sum[k];
    __syncthreads();
    if (slice != 0 || !inside) return;  // no barrier follows
    for (int k = 0; k < rank && k < kMaxRank; ++k) {
        float total = partial[0][k][lane];
        for (int s = 1; s < kSlices; ++s) total = __fadd_rn(total, partial[s][k][lane]);
        q[a.q + c * rank + k] = total;
    }
}

// The approximation P Q^T of every matrix into `approx` (laid out as M), taken out of
// `memory` (M itself, or null): four consecutive values per thread, each the host's sum
// p0 q0 + p1 q1 + ... in that order.
__global__ void expand_kernel(const float* p, const float* q, float* memory, float* approx, const Matrix* matrices,
                              int count, std::int64_t values) {
    const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (first >= values) return;
    int j = matrix_at(matrices, count, first, FirstValue());
    for (std::int64_t e = first; e < first + 4 && e < values; ++e) {
        while (e >= matrices[j].m + matrices[j].rows * matrices[j].cols) ++j;
        const Matrix& a = matrices[j];
        const std::int64_t local = e - a.m, row = local / a.cols, c = local % a.cols;
        const float* pr = p + a.p + row * a.rank;
        const float* qc = q + a.q + c * a.rank;
        float o = __fmul_rn(pr[0], qc[0]);
        for (int k = 1; k < a.rank; ++k) o = __fadd_rn(o, __fmul_rn(pr[k], qc[k]));
        approx[e] = o;
        if (memory != nullptr) memory[e] = __fsub_rn(memory[e], o);
    }
}

// ------------------------------------------------------------------------ launches
// Each takes `launch(blocks, threads, kernel, arguments...)`, which runs a kernel in
// order on one stream; `matrices` is the layout's table in device memory.

/// P = M Q for every matrix.
template <class Launch>
void project_rows(Launch&& launch, const Layout& layout, const Matrix* matrices, const float* m, const float* q,
                  float* p) {
    if (layout.rows == 0) return;
    launch(blocks_for(layout.rows, kThreads / 32), kThreads, project_rows_kernel, m, q, p, matrices,
           static_cast<int>(layout.matrices.size()), layout.rows);
}

/// Gram-Schmidt on every matrix of P (columns false) or of Q (columns true), in place.
template <class Launch>
void orthogonalize(Launch&& launch, const Layout& layout, const Matrix* matrices, float* buffer, bool columns,
                   float epsilon) {
    if (layout.matrices.empty()) return;
    launch(static_cast<unsigned>(layout.matrices.size()), kThreads, orthogonalize_kernel, buffer, matrices, columns,
           epsilon);
}

/// Q = M^T P for every matrix.
template <class Launch>
void project_columns(Launch&& launch, const Layout& layout, const Matrix* matrices, const float* m, const float* p,
                     float* q) {
    if (layout.columns == 0) return;
    launch(blocks_for(layout.columns, 32), kThreads, project_columns_kernel, m, p, q, matrices,
           static_cast<int>(layout.matrices.size()), layout.columns);
}

/// approx = P Q^T for every matrix, and memory -= approx where memory is not null.
template <class Launch>
void expand(Launch&& launch, const Layout& layout, const Matrix* matrices, const float* p, const float* q,
            float* memory, float* approx) {
    if (layout.values == 0) return;
    launch(blocks_for(layout.values, std::int64_t{kThreads} * 4), kThreads, expand_kernel, p, q, memory, approx,
           matrices, static_cast<int>(layout.matrices.size()), layout.values);
}

}  // namespace acc::compress::cuda::powersgd
