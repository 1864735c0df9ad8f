// The counter-based random numbers of stochastic rounding: uniform_from(key, index) is a
// function of the key and the value's index alone, so that every path draws the same
// numbers in any order. Written once for the host's loops (compress/kernel_support.hpp)
// and the CUDA kernels (compress/cuda/encoders.cu), whose payloads must be identical.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define ACC_RANDOM_INLINE __host__ __device__ __forceinline__
#else
#define ACC_RANDOM_INLINE inline __attribute__((always_inline))
#endif

namespace acc::compress::kernels::detail {

// lowbias32 (Chris Wellons' hash): a cheap, well-mixed 32-bit bijection.
ACC_RANDOM_INLINE std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

constexpr std::uint32_t kGolden = 0x9e3779b9u;
constexpr float kTwoPowMinus24 = 1.0f / 16777216.0f;

// A float in [0, 1) with 24 random bits.
ACC_RANDOM_INLINE float uniform_from(std::uint32_t key32, std::uint32_t index) {
    return static_cast<float>(hash32(key32 + kGolden * index) >> 8) * kTwoPowMinus24;
}

}  // namespace acc::compress::kernels::detail
