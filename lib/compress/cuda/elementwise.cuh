// The encoders that read each value once (signSGD, fp16, QSGD) and the finite check of
// a buffer's parts, as CUDA kernels. Each thread keeps several 16-byte loads in flight
// (float4, where the input is 16-byte aligned), since one 4-byte load per thread leaves
// the GPU's memory far from busy. Payloads are the host codecs' (compress/kernels.hpp)
// byte for byte and may start at any byte (fp16's at any half); wider stores are used
// only where the payload is aligned for them.
//
// Arithmetic that the host rounds step by step is written with explicitly rounded
// intrinsics, so that nvcc cannot fuse it into an FMA and change the last bit.
//
// The kernels use only blocks, shared memory, __syncthreads and the warp intrinsics
// __ballot_sync, __any_sync, __shfl_sync and __shfl_xor_sync, each reached by all 32
// lanes of a warp and every __syncthreads by all threads of a block, so that the CPU
// tests run this same text with each block's threads as fibers
// (tests/unit/cuda_emulation.hpp).
#pragma once

#include "compress/counter_random.hpp"
#include "compress/cuda/common.cuh"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

#include <cstdint>

namespace acc::compress::cuda::elementwise {

constexpr int kThreads = 256;  // per block, every kernel

// Four consecutive values from x[i]: one 16-byte load where `vector` (x 16-byte aligned,
// i a multiple of 4, all four inside), else one by one with zeros past n.
__device__ __forceinline__ void load4(const float* x, std::int64_t i, std::int64_t n, bool vector, float* v) {
    if (vector && i + 4 <= n) {
        const float4 f = *reinterpret_cast<const float4*>(x + i);
        v[0] = f.x;
        v[1] = f.y;
        v[2] = f.z;
        v[3] = f.w;
        return;
    }
    for (int q = 0; q < 4; ++q) v[q] = i + q < n ? x[i + q] : 0.0f;
}

__device__ __forceinline__ bool aligned(const void* p, unsigned bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// ------------------------------------------------------------------------ signSGD

constexpr int kSignChunks = 4;  // per warp: chunks of 128 values (four 32-bit words)

// Lane l holds values 4l..4l+3 of a chunk, their signs a nibble; eight lanes OR their
// nibbles into one word (little endian), which the first of them writes.
template <bool Vector>
__global__ void sign_bits_kernel(const float* x, std::int64_t n, std::uint8_t* packed, bool* ok) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const std::int64_t words = (n + 31) / 32;
    const bool word_stores = aligned(packed, 4);
    float v[kSignChunks][4];
    for (int c = 0; c < kSignChunks; ++c) load4(x, ((warp * kSignChunks + c) * 32 + lane) * 4, n, Vector, v[c]);
    bool finite = true;
    for (int c = 0; c < kSignChunks; ++c) {
        unsigned word = 0;
        for (int q = 0; q < 4; ++q) {
            word |= (v[c][q] < 0.0f ? 1u : 0u) << (4 * (lane % 8) + q);
            finite = finite && isfinite(v[c][q]);
        }
        word |= __shfl_xor_sync(kAllLanes, word, 1);
        word |= __shfl_xor_sync(kAllLanes, word, 2);
        word |= __shfl_xor_sync(kAllLanes, word, 4);
        const std::int64_t w = (warp * kSignChunks + c) * 4 + lane / 8;
        if (lane % 8 != 0 || w >= words) continue;
        if (word_stores) {
            reinterpret_cast<unsigned*>(packed)[w] = word;
        } else {
            for (int b = 0; b < 4; ++b) packed[4 * w + b] = static_cast<std::uint8_t>(word >> (8 * b));
        }
    }
    if (__any_sync(kAllLanes, !finite) && lane == 0) *ok = false;  // every writer writes false
}

// ------------------------------------------------------------------------ fp16

constexpr int kHalfGroups = 2;  // per thread: groups of four values

// Four consecutive values a group, consecutive threads consecutive groups. A quotient of
// 65520 or more in magnitude (it rounds to infinity) or NaN makes *ok false.
template <bool Vector>
__global__ void half_quotients_kernel(const float* x, std::int64_t n, float divisor, std::uint16_t* out, bool* ok) {
    float v[kHalfGroups][4];
    std::int64_t first[kHalfGroups];
    for (int g = 0; g < kHalfGroups; ++g) {
        first[g] = ((static_cast<std::int64_t>(blockIdx.x) * kHalfGroups + g) * blockDim.x + threadIdx.x) * 4;
        load4(x, first[g], n, Vector, v[g]);
    }
    bool fits = true;
    for (int g = 0; g < kHalfGroups; ++g) {
        std::uint16_t h[4];
        for (int q = 0; q < 4; ++q) {
            const float quotient = __fdiv_rn(v[g][q], divisor);
            // Below 65520; NaN's bits lie above. Values past n are zero and fit.
            fits = fits && (__float_as_uint(quotient) & 0x7fffffffu) < 0x477ff000u;
            h[q] = __half_as_ushort(__float2half_rn(quotient));
        }
        const std::int64_t i = first[g];
        if (Vector && i + 4 <= n) {
            uint2 pair;
            pair.x = static_cast<unsigned>(h[0]) | static_cast<unsigned>(h[1]) << 16;
            pair.y = static_cast<unsigned>(h[2]) | static_cast<unsigned>(h[3]) << 16;
            *reinterpret_cast<uint2*>(out + i) = pair;
        } else {
            for (int q = 0; q < 4; ++q)
                if (i + q < n) out[i + q] = h[q];
        }
    }
    if (__any_sync(kAllLanes, !fits) && threadIdx.x % 32 == 0) *ok = false;
}

// ------------------------------------------------------------------------ QSGD

constexpr int kBucket = 128;  // kernels::kQsgdBucket
constexpr int kLanes = 8;     // the host's double lanes per bucket
constexpr int kBucketsPerBlock = kThreads / kLanes;
constexpr int kBlockValues = kBucketsPerBlock * kBucket;
// A bucket's row in shared memory, padded so that the four buckets a warp sums lie in
// different banks.
constexpr int kRow = kBucket + 8;

// A block's 32 buckets are read into shared memory with 16-byte loads and stored there
// whole (a warp's 32 stores of 16 bytes fill one bucket's row without a bank conflict,
// where four stores of 4 bytes each would meet four lanes in a bank). Eight threads
// per bucket then sum its squares, thread `lane` values lane, lane + 8, ... in order (the
// host's lane), and combine the eight sums in the host's order; the norms written, each
// thread codes four consecutive values at a time, with the same random stream.
template <class Code, bool Vector>
__global__ void qsgd_kernel(const float* x, std::int64_t n, int levels, std::uint32_t key32, std::uint8_t* payload,
                            std::int64_t buckets, bool* ok) {
    alignas(16) __shared__ float tile[kBucketsPerBlock * kRow];
    __shared__ float norms[kBucketsPerBlock];
    __shared__ bool usable[kBucketsPerBlock];
    constexpr int kRounds = kBlockValues / 4 / kThreads;
    const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * kBlockValues;
    float v[kRounds][4];
    for (int r = 0; r < kRounds; ++r) load4(x, base + 4 * (r * kThreads + threadIdx.x), n, Vector, v[r]);
    for (int r = 0; r < kRounds; ++r) {
        const int at = 4 * (r * kThreads + static_cast<int>(threadIdx.x));
        // kRow and at are multiples of 4: every float4 lies at a multiple of 16 bytes.
        *reinterpret_cast<float4*>(&tile[(at / kBucket) * kRow + at % kBucket]) =
            make_float4(v[r][0], v[r][1], v[r][2], v[r][3]);
    }
    __syncthreads();

    const int local = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
    const std::int64_t bucket = static_cast<std::int64_t>(blockIdx.x) * kBucketsPerBlock + local;
    const std::int64_t begin = bucket * kBucket;
    const int len = bucket >= buckets ? 0 : n - begin < kBucket ? static_cast<int>(n - begin) : kBucket;
    double sum = 0.0;
    for (int e = lane; e < len; e += kLanes) {
        const double value = tile[local * kRow + e];
        sum = __dadd_rn(sum, __dmul_rn(value, value));
    }
    double s[kLanes];
    const int group = static_cast<int>(threadIdx.x % 32) - lane;  // this bucket's first lane in the warp
    for (int k = 0; k < kLanes; ++k) s[k] = __shfl_sync(kAllLanes, sum, group + k);
    if (lane == 0) {
        const double squares = __dadd_rn(__dadd_rn(__dadd_rn(s[0], s[4]), __dadd_rn(s[2], s[6])),
                                         __dadd_rn(__dadd_rn(s[1], s[5]), __dadd_rn(s[3], s[7])));
        const bool finite = isfinite(squares);
        const float norm = finite ? static_cast<float>(sqrt(squares)) : 0.0f;
        norms[local] = norm;
        usable[local] = finite;
        if (bucket < buckets) {
            if (!finite) *ok = false;
            const unsigned bits = __float_as_uint(norm);
            for (int b = 0; b < 4; ++b) payload[4 * bucket + b] = static_cast<std::uint8_t>(bits >> (8 * b));
        }
    }
    __syncthreads();

    std::uint8_t* codes = payload + 4 * buckets;
    const bool wide_stores = aligned(codes, 4 * sizeof(Code));
    const float top = static_cast<float>(levels);
    for (int r = 0; r < kRounds; ++r) {
        const int at = 4 * (r * kThreads + static_cast<int>(threadIdx.x));
        const std::int64_t i = base + at;
        const int row = at / kBucket;
        if (i >= n || !usable[row]) continue;  // no barrier follows
        const float norm = norms[row];
        const float scale = norm == 0.0f ? 0.0f : __fdiv_rn(top, norm);
        const bool overflow = !isfinite(scale);  // a subnormal norm: divide first, as the host does
        Code c[4] = {0, 0, 0, 0};
        for (int q = 0; q < 4 && norm != 0.0f; ++q) {
            const float value = v[r][q];
            const float l = overflow ? __fmul_rn(__fdiv_rn(fabsf(value), norm), top) : __fmul_rn(fabsf(value), scale);
            const float f = floorf(l);
            const float u = kernels::detail::uniform_from(key32, static_cast<std::uint32_t>(i + q));
            const float level = fminf(top, __fadd_rn(f, u < __fsub_rn(l, f) ? 1.0f : 0.0f));
            c[q] = static_cast<Code>(value < 0.0f ? -level : level);
        }
        std::uint8_t* out = codes + sizeof(Code) * i;
        if (wide_stores && i + 4 <= n) {
            if (sizeof(Code) == 1) {
                unsigned word = 0;
                for (int q = 0; q < 4; ++q) word |= static_cast<unsigned>(static_cast<std::uint8_t>(c[q])) << (8 * q);
                *reinterpret_cast<unsigned*>(out) = word;
            } else {
                uint2 pair;
                pair.x = static_cast<unsigned>(static_cast<std::uint16_t>(c[0])) |
                         static_cast<unsigned>(static_cast<std::uint16_t>(c[1])) << 16;
                pair.y = static_cast<unsigned>(static_cast<std::uint16_t>(c[2])) |
                         static_cast<unsigned>(static_cast<std::uint16_t>(c[3])) << 16;
                *reinterpret_cast<uint2*>(out) = pair;
            }
            continue;
        }
        for (int q = 0; q < 4 && i + q < n; ++q) {
            const auto raw = static_cast<std::uint16_t>(c[q]);
            out[sizeof(Code) * q] = static_cast<std::uint8_t>(raw);
            if (sizeof(Code) == 2) out[sizeof(Code) * q + 1] = static_cast<std::uint8_t>(raw >> 8);
        }
    }
}

// ------------------------------------------------------------------------ finite parts

constexpr int kFiniteGroups = 4;  // per thread: groups of four values

// flags[p] becomes false where part p holds a value that is not finite. Part p holds
// values ends[p - 1] + 1 .. ends[p] (ends ascending); no `ends` means one part, all of x.
// Only a value that is not finite looks for its part.
template <bool Vector>
__global__ void finite_parts_kernel(const float* x, std::int64_t n, const std::int64_t* ends, std::int64_t parts,
                                    bool* flags) {
    float v[kFiniteGroups][4];
    std::int64_t first[kFiniteGroups];
    for (int g = 0; g < kFiniteGroups; ++g) {
        first[g] = ((static_cast<std::int64_t>(blockIdx.x) * kFiniteGroups + g) * blockDim.x + threadIdx.x) * 4;
        load4(x, first[g], n, Vector, v[g]);
    }
    for (int g = 0; g < kFiniteGroups; ++g)
        for (int q = 0; q < 4; ++q) {
            if (isfinite(v[g][q])) continue;
            const std::int64_t i = first[g] + q;
            std::int64_t low = 0, high = ends == nullptr ? 0 : parts - 1;  // the first part whose end is >= i
            while (low < high) {
                const std::int64_t middle = low + (high - low) / 2;
                if (ends[middle] < i)
                    low = middle + 1;
                else
                    high = middle;
            }
            if (ends == nullptr || ends[low] >= i) flags[low] = false;  // values past the last part count in none
        }
}

// ------------------------------------------------------------------------ launches

// Each launcher takes `launch(blocks, threads, kernel, arguments...)`, which runs a
// kernel, and `set_true(flags, count)`, which sets `count` device bools to true, both in
// order on one stream.

inline bool aligned16(const float* x) { return reinterpret_cast<std::uintptr_t>(x) % 16 == 0; }

template <class Launch, class SetTrue>
void sign_bits(Launch&& launch, SetTrue&& set_true, const float* x, std::int64_t n, std::uint8_t* packed, bool* ok) {
    set_true(ok, 1);
    if (n <= 0) return;
    const unsigned blocks = blocks_for(n, std::int64_t{kThreads} / 32 * kSignChunks * 128);
    if (aligned16(x))
        launch(blocks, kThreads, sign_bits_kernel<true>, x, n, packed, ok);
    else
        launch(blocks, kThreads, sign_bits_kernel<false>, x, n, packed, ok);
}

template <class Launch, class SetTrue>
void half_quotients(Launch&& launch, SetTrue&& set_true, const float* x, std::int64_t n, float divisor,
                    std::uint16_t* out, bool* ok) {
    set_true(ok, 1);
    if (n <= 0) return;
    const unsigned blocks = blocks_for(n, std::int64_t{kThreads} * kHalfGroups * 4);
    if (aligned16(x) && reinterpret_cast<std::uintptr_t>(out) % 8 == 0)
        launch(blocks, kThreads, half_quotients_kernel<true>, x, n, divisor, out, ok);
    else
        launch(blocks, kThreads, half_quotients_kernel<false>, x, n, divisor, out, ok);
}

template <class Launch, class SetTrue>
void qsgd_codes(Launch&& launch, SetTrue&& set_true, const float* x, std::int64_t n, int levels, std::uint32_t key32,
                std::uint8_t* payload, bool* ok) {
    set_true(ok, 1);
    if (n <= 0) return;
    const std::int64_t buckets = (n + kBucket - 1) / kBucket;
    const unsigned blocks = blocks_for(buckets, kBucketsPerBlock);
    const bool vector = aligned16(x);
    if (levels < 128) {
        if (vector)
            launch(blocks, kThreads, qsgd_kernel<std::int8_t, true>, x, n, levels, key32, payload, buckets, ok);
        else
            launch(blocks, kThreads, qsgd_kernel<std::int8_t, false>, x, n, levels, key32, payload, buckets, ok);
    } else if (vector) {
        launch(blocks, kThreads, qsgd_kernel<std::int16_t, true>, x, n, levels, key32, payload, buckets, ok);
    } else {
        launch(blocks, kThreads, qsgd_kernel<std::int16_t, false>, x, n, levels, key32, payload, buckets, ok);
    }
}

template <class Launch, class SetTrue>
void finite_parts(Launch&& launch, SetTrue&& set_true, const float* x, std::int64_t n, const std::int64_t* ends,
                  std::int64_t parts, bool* flags) {
    set_true(flags, parts);
    if (n <= 0) return;
    const unsigned blocks = blocks_for(n, std::int64_t{kThreads} * kFiniteGroups * 4);
    if (aligned16(x))
        launch(blocks, kThreads, finite_parts_kernel<true>, x, n, ends, parts, flags);
    else
        launch(blocks, kThreads, finite_parts_kernel<false>, x, n, ends, parts, flags);
}

}  // namespace acc::compress::cuda::elementwise
