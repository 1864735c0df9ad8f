// The kernels of compress/cuda/encoders.hpp. Arithmetic that the host rounds step by
// step is written with explicitly rounded intrinsics, so that nvcc cannot fuse it into
// an FMA and change the last bit.
#include "compress/cuda/encoders.hpp"

#include "base/error.hpp"
#include "compress/counter_random.hpp"
#include "compress/cuda/topk_select.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace acc::compress::cuda {
namespace {

constexpr int kBucket = 128;        // kernels::kQsgdBucket
constexpr int kLanes = 8;           // the host's double lanes per bucket
constexpr int kThreads = 256;
constexpr int kBucketsPerBlock = kThreads / kLanes;

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw acc::Error(std::string(what) + ": " + cudaGetErrorString(status));
}

// One warp packs the signs of 32 consecutive values into one 32-bit word (little endian).
__global__ void sign_bits_kernel(const float* x, std::int64_t n, std::uint8_t* packed, bool* ok) {
    const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::int64_t word = i / 32;
    const std::int64_t words = (n + 31) / 32;
    if (word >= words) return;  // whole warps leave together: words end on a warp's edge
    const float v = i < n ? x[i] : 0.0f;
    const unsigned mask = __ballot_sync(0xffffffffu, i < n && v < 0.0f);
    const bool finite = i >= n || isfinite(v);
    if (__any_sync(0xffffffffu, !finite) && threadIdx.x % 32 == 0) *ok = false;  // every writer writes false
    const unsigned lane = threadIdx.x % 32;
    if (lane < 4) packed[4 * word + lane] = static_cast<std::uint8_t>(mask >> (8 * lane));
}

// One thread per value; a block that holds a quotient out of range writes false once.
__global__ void half_quotients_kernel(const float* x, std::int64_t n, float divisor, __half* out, bool* ok) {
    const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    bool fits = true;
    if (i < n) {
        const float q = __fdiv_rn(x[i], divisor);
        fits = (__float_as_uint(q) & 0x7fffffffu) < 0x477ff000u;  // below 65520; NaN's bits lie above
        out[i] = __float2half_rn(q);
    }
    if (__syncthreads_or(!fits) && threadIdx.x == 0) *ok = false;  // every thread reaches the barrier
}

// Eight threads per bucket: thread `lane` sums values lane, lane + 8, ... in order (the
// host's lane), the eight sums are combined in the host's order, and each thread then
// codes its own values.
template <class Code>
__global__ void qsgd_kernel(const float* x, std::int64_t n, int levels, std::uint32_t key32, std::uint8_t* payload,
                            std::int64_t buckets, bool* ok) {
    const std::int64_t bucket = static_cast<std::int64_t>(blockIdx.x) * kBucketsPerBlock + threadIdx.x / kLanes;
    const int lane = threadIdx.x % kLanes;
    const std::int64_t begin = bucket * kBucket;
    const int len = bucket < buckets ? static_cast<int>(min(static_cast<std::int64_t>(kBucket), n - begin)) : 0;
    double sum = 0.0;
    for (int e = lane; e < len; e += kLanes) {
        const double v = x[begin + e];
        sum = __dadd_rn(sum, __dmul_rn(v, v));
    }
    double s[kLanes];
    const unsigned group = threadIdx.x % 32 - lane;  // the first lane of this bucket in the warp
    for (int k = 0; k < kLanes; ++k) s[k] = __shfl_sync(0xffffffffu, sum, static_cast<int>(group) + k);
    if (bucket >= buckets) return;
    const double squares = __dadd_rn(__dadd_rn(__dadd_rn(s[0], s[4]), __dadd_rn(s[2], s[6])),
                                     __dadd_rn(__dadd_rn(s[1], s[5]), __dadd_rn(s[3], s[7])));
    if (!isfinite(squares)) {
        if (lane == 0) *ok = false;
        return;
    }
    const float norm = static_cast<float>(sqrt(squares));
    if (lane < 4) {
        unsigned bits = __float_as_uint(norm);
        payload[4 * bucket + lane] = static_cast<std::uint8_t>(bits >> (8 * lane));
    }
    std::uint8_t* codes = payload + 4 * buckets + sizeof(Code) * begin;
    const float top = static_cast<float>(levels);
    const float scale = norm == 0.0f ? 0.0f : __fdiv_rn(top, norm);
    for (int e = lane; e < len; e += kLanes) {
        Code code = 0;
        if (norm != 0.0f) {
            const float v = x[begin + e];
            const float l = __fmul_rn(fabsf(v), scale);
            const float f = floorf(l);
            const auto index = static_cast<std::uint32_t>(begin + e);
            const float u = kernels::detail::uniform_from(key32, index);
            const float q = fminf(top, __fadd_rn(f, u < __fsub_rn(l, f) ? 1.0f : 0.0f));
            code = static_cast<Code>(v < 0.0f ? -q : q);
        }
        const auto raw = static_cast<std::uint16_t>(code);
        codes[sizeof(Code) * e] = static_cast<std::uint8_t>(raw);
        if (sizeof(Code) == 2) codes[sizeof(Code) * e + 1] = static_cast<std::uint8_t>(raw >> 8);
    }
}

}  // namespace

void sign_bits(const float* x, std::int64_t n, std::uint8_t* packed, bool* ok, void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemsetAsync(ok, 1, 1, s), "signSGD's CUDA kernel");
    if (n <= 0) return;
    const std::int64_t threads = (n + 31) / 32 * 32;
    const auto blocks = static_cast<unsigned>((threads + kThreads - 1) / kThreads);
    sign_bits_kernel<<<blocks, kThreads, 0, s>>>(x, n, packed, ok);
    check(cudaGetLastError(), "signSGD's CUDA kernel");
}

void half_quotients(const float* x, std::int64_t n, float divisor, std::uint16_t* out, bool* ok, void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemsetAsync(ok, 1, 1, s), "fp16's CUDA kernel");
    if (n <= 0) return;
    const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
    half_quotients_kernel<<<blocks, kThreads, 0, s>>>(x, n, divisor, reinterpret_cast<__half*>(out), ok);
    check(cudaGetLastError(), "fp16's CUDA kernel");
}

void qsgd_codes(const float* x, std::int64_t n, int levels, std::uint32_t key32, std::uint8_t* payload, bool* ok,
                void* stream) {
    auto s = static_cast<cudaStream_t>(stream);
    check(cudaMemsetAsync(ok, 1, 1, s), "QSGD's CUDA kernel");
    if (n <= 0) return;
    const std::int64_t buckets = (n + kBucket - 1) / kBucket;
    const auto blocks = static_cast<unsigned>((buckets + kBucketsPerBlock - 1) / kBucketsPerBlock);
    if (levels < 128)
        qsgd_kernel<std::int8_t><<<blocks, kThreads, 0, s>>>(x, n, levels, key32, payload, buckets, ok);
    else
        qsgd_kernel<std::int16_t><<<blocks, kThreads, 0, s>>>(x, n, levels, key32, payload, buckets, ok);
    check(cudaGetLastError(), "QSGD's CUDA kernel");
}

std::int64_t top_k_scratch_bytes(std::int64_t n) { return topk::scratch_bytes(n); }

void top_k(float* x, std::int64_t n, std::int64_t k, bool clear, float* values, std::int32_t* indices, void* scratch,
           bool* ok, void* stream) {
    if (k < 1 || k > n || n > 0x7fffffff)
        throw acc::Error("top-k's CUDA kernels: " + std::to_string(k) + " of " + std::to_string(n) + " values");
    auto s = static_cast<cudaStream_t>(stream);
    topk::select_top_k(
        [&](unsigned blocks, int threads, auto kernel, auto... arguments) {
            kernel<<<blocks, threads, 0, s>>>(arguments...);
            check(cudaGetLastError(), "top-k's CUDA kernels");
        },
        [&](void* p, std::int64_t bytes) {
            check(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s), "top-k's CUDA kernels");
        },
        [&](bool* flag) { check(cudaMemsetAsync(flag, 1, 1, s), "top-k's CUDA kernels"); }, x, n, k, clear, values,
        indices, scratch, ok);
}

}  // namespace acc::compress::cuda
