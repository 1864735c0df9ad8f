// What the compressors' loops share (private to lib/compress): the run-time choice of
// instruction set, bit helpers, the random numbers of stochastic rounding, loop bodies
// written once and compiled both plainly and inside AVX2 wrappers, and the bucket loop
// of QSGD and TernGrad. Each compressor's own loops live in its file
// (compressors/<name>.cpp); kernels.cpp keeps the shared ones.
#pragma once

#include "compress/counter_random.hpp"
#include "compress/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ACC_X86 1
// No FMA: vector and portable loops must round identically.
#define ACC_SIMD __attribute__((target("avx2,f16c")))
#define ACC_AVX512 __attribute__((target("avx512f,avx2,f16c")))
#else
#define ACC_X86 0
#endif

#define ACC_INLINE inline __attribute__((always_inline))

namespace acc::compress::kernels::detail {

// The level this CPU offers and the cap on it (ACC_SIMD), set in kernels.cpp.
extern const SimdLevel g_detected;
extern std::atomic<int> g_cap;

inline SimdLevel level() {
    return static_cast<SimdLevel>(std::min(static_cast<int>(g_detected), g_cap.load(std::memory_order_relaxed)));
}
inline bool simd() { return level() >= SimdLevel::avx2; }
inline bool avx512() { return level() >= SimdLevel::avx512; }

ACC_INLINE std::uint32_t bits_of(float v) {
    std::uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
}

ACC_INLINE float float_of(std::uint32_t b) {
    float v;
    std::memcpy(&v, &b, 4);
    return v;
}

// |x| as an ordered integer key: NaN > inf > every finite magnitude.
ACC_INLINE std::uint32_t magnitude_key(float v) { return bits_of(v) & 0x7fffffffu; }

constexpr std::uint32_t kInfKey = 0x7f800000u;

// hash32, kGolden and uniform_from: compress/counter_random.hpp.

// ------------------------------------------------------------ generic loop bodies
// Written once, compiled twice: plainly, and inlined into the AVX2 wrappers below.

ACC_INLINE bool add_into_body(float* dst, const float* src, std::int64_t n) {
    std::uint32_t worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        float v = dst[i] + src[i];
        dst[i] = v;
        worst = std::max(worst, magnitude_key(v));
    }
    return worst < kInfKey;
}

ACC_INLINE bool copy_checked_body(float* dst, const float* src, std::int64_t n) {
    std::uint32_t worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        float v = src[i];
        dst[i] = v;
        worst = std::max(worst, magnitude_key(v));
    }
    return worst < kInfKey;
}

ACC_INLINE bool all_finite_body(const float* x, std::int64_t n) {
    std::uint32_t worst = 0;
    for (std::int64_t i = 0; i < n; ++i) worst = std::max(worst, magnitude_key(x[i]));
    return worst < kInfKey;
}

// Eight double lanes, combined in a fixed order, so that both builds sum alike.
ACC_INLINE double combine_lanes(const double* s) {
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

// One bucket of QSGD (TernGrad's codes with one level): codes for x[0..len) into `codes`
// (int8 or int16), in units of divisor / levels. The level of |x| is |x| * scale with
// scale = levels / divisor in float32; where that quotient overflows (a divisor below
// levels / FLT_MAX, as subnormal values give) it is |x| / divisor * levels, so that a
// zero stays zero and the largest value reaches `levels`. A zero divisor: zero codes.
template <class Code>
inline void qsgd_bucket_portable(const float* x, std::int64_t len, std::int64_t base, float divisor, int levels,
                                 std::uint32_t key32, Code* codes) {
    const float top = static_cast<float>(levels);
    if (divisor == 0.0f) {
        std::fill(codes, codes + len, Code{0});
        return;
    }
    const float scale = top / divisor;
    const bool overflow = !std::isfinite(scale);
    for (std::int64_t i = 0; i < len; ++i) {
        const float magnitude = std::fabs(x[i]);
        float l = overflow ? magnitude / divisor * top : magnitude * scale;
        float f = std::floor(l);
        float u = uniform_from(key32, static_cast<std::uint32_t>(base + i));
        float q = std::min(top, f + (u < l - f ? 1.0f : 0.0f));
        codes[i] = static_cast<Code>(x[i] < 0 ? -q : q);
    }
}

// Sums over a tensor in eight double lanes (lane i % 8), combined by combine_lanes().
struct Moments {
    double abs[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double sum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double squares[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::uint32_t worst = 0;  // the largest magnitude key
};

ACC_INLINE void moments_body(const float* x, std::int64_t n, bool all, Moments& m) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) {
            const double v = x[i + j];
            m.abs[j] += std::fabs(v);
            if (all) {
                m.sum[j] += v;
                m.squares[j] += v * v;
                m.worst = std::max(m.worst, magnitude_key(x[i + j]));
            }
        }
    for (; i < n; ++i) {
        const double v = x[i];
        m.abs[i % 8] += std::fabs(v);
        if (all) {
            m.sum[i % 8] += v;
            m.squares[i % 8] += v * v;
            m.worst = std::max(m.worst, magnitude_key(x[i]));
        }
    }
}

#if ACC_X86
// Moments in AVX2 (kernels.cpp): abs_sum and TernGrad's scale.
void moments_simd(const float* x, std::int64_t n, bool all, Moments& m);

// Packs four vectors of eight int32 codes into 32 int8 codes, in order.
ACC_SIMD ACC_INLINE __m256i pack_int8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b);
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight QSGD codes (int32 lanes). `counter` holds key + golden * index for the eight
// elements (the hash's input) and advances by eight indices.
ACC_SIMD ACC_INLINE __m256i qsgd_codes8(const float* x, __m256 scale, __m256i top,
                                                                   __m256i& counter) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inv24 = _mm256_set1_ps(kTwoPowMinus24);
    __m256 v = _mm256_loadu_ps(x);
    __m256 l = _mm256_mul_ps(_mm256_and_ps(v, abs_mask), scale);
    __m256 f = _mm256_floor_ps(l);
    __m256i h = counter;
    counter = _mm256_add_epi32(counter, _mm256_set1_epi32(static_cast<int>(kGolden * 8u)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(0x7feb352d));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 15));
    h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x846ca68bu)));
    h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
    __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)), inv24);
    __m256i fire = _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_sub_ps(l, f), _CMP_LT_OQ));  // -1 where rounded up
    __m256i q = _mm256_min_epi32(top, _mm256_sub_epi32(_mm256_cvttps_epi32(f), fire));
    // The sign of x: (q ^ s) - s with s = -1 for a negative x (0 stays 0).
    __m256i sign = _mm256_srai_epi32(_mm256_castps_si256(v), 31);
    return _mm256_sub_epi32(_mm256_xor_si256(q, sign), sign);
}

// A bucket's 128 QSGD codes as int8, in order.
ACC_SIMD ACC_INLINE void codes128_int8(const float* x, __m256 scale, __m256i top,
                                                                  __m256i& counter, void* out) {
    for (int g = 0; g < 128; g += 32) {
        __m256i a = qsgd_codes8(x + g, scale, top, counter);
        __m256i b = qsgd_codes8(x + g + 8, scale, top, counter);
        __m256i c = qsgd_codes8(x + g + 16, scale, top, counter);
        __m256i d = qsgd_codes8(x + g + 24, scale, top, counter);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<std::uint8_t*>(out) + g), pack_int8(a, b, c, d));
    }
}

#endif

}  // namespace acc::compress::kernels::detail
