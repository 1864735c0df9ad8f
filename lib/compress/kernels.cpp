#include "compress/kernels.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <cmath>
#include <limits>

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

namespace acc::compress::kernels {
namespace {

SimdLevel detect() {
#if ACC_X86
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) return SimdLevel::portable;
    return __builtin_cpu_supports("avx512f") ? SimdLevel::avx512 : SimdLevel::avx2;
#else
    return SimdLevel::portable;
#endif
}

// ACC_SIMD=portable|avx2|avx512 caps the instruction set (to measure or compare the loops).
int initial_cap() {
    const char* cap = std::getenv("ACC_SIMD");
    if (!cap) return static_cast<int>(SimdLevel::avx512);
    const std::string text = cap;
    if (text == "portable") return static_cast<int>(SimdLevel::portable);
    if (text == "avx2") return static_cast<int>(SimdLevel::avx2);
    return static_cast<int>(SimdLevel::avx512);
}

const SimdLevel g_detected = detect();
std::atomic<int> g_cap{initial_cap()};

SimdLevel level() {
    return static_cast<SimdLevel>(std::min(static_cast<int>(g_detected), g_cap.load(std::memory_order_relaxed)));
}
bool simd() { return level() >= SimdLevel::avx2; }
bool avx512() { return level() >= SimdLevel::avx512; }

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

// lowbias32 (Chris Wellons' hash): a cheap, well-mixed 32-bit bijection.
ACC_INLINE std::uint32_t hash32(std::uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

constexpr std::uint32_t kGolden = 0x9e3779b9u;
constexpr float kTwoPowMinus24 = 1.0f / 16777216.0f;

ACC_INLINE float uniform_from(std::uint32_t key32, std::uint32_t index) {
    return static_cast<float>(hash32(key32 + kGolden * index) >> 8) * kTwoPowMinus24;
}

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

double sum_squares_portable(const float* x, std::int64_t n) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::int64_t i = 0; i < n; ++i) {
        double v = x[i];
        lane[i % 8] += v * v;
    }
    return combine_lanes(lane);
}

// ------------------------------------------------------------ portable kernels

bool to_half_portable(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
    std::uint32_t worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        float v = x[i] / divisor;
        worst = std::max(worst, magnitude_key(v));
        out[i] = float_to_half(v);
    }
    return worst < 0x477ff000u;  // 65520: rounds to infinity in half precision
}

bool pack_signs_portable(float* t, std::int64_t n, float scale, bool update, std::uint8_t* out) {
    std::uint32_t worst = 0;
    for (std::int64_t w = 0; w * 32 < n; ++w) {
        std::uint32_t word = 0;
        std::int64_t end = std::min<std::int64_t>(n, w * 32 + 32);
        for (std::int64_t i = w * 32; i < end; ++i) {
            float v = t[i];
            worst = std::max(worst, magnitude_key(v));
            bool negative = v < 0;
            word |= static_cast<std::uint32_t>(negative) << (i - w * 32);
            if (update) t[i] = v - (negative ? -scale : scale);
        }
        std::memcpy(out + 4 * w, &word, 4);
    }
    return worst < kInfKey;
}

// Indices (and magnitude keys) of the entries whose key is >= tau; counts past capacity.
std::int64_t scan_portable(const float* t, std::int64_t begin, std::int64_t n, std::uint32_t tau,
                           std::int32_t* out, std::uint32_t* keys, std::int64_t capacity, std::int64_t count) {
    for (std::int64_t i = begin; i < n; ++i) {
        std::uint32_t key = magnitude_key(t[i]);
        if (key >= tau) {
            if (count < capacity) {
                out[count] = static_cast<std::int32_t>(i);
                keys[count] = key;
            }
            ++count;
        }
    }
    return count;
}

// One bucket of QSGD: codes for x[0..len) into `codes` (int8 or int16).
template <class Code>
void qsgd_bucket_portable(const float* x, std::int64_t len, std::int64_t base, float scale, int levels,
                          std::uint32_t key32, Code* codes) {
    const float top = static_cast<float>(levels);
    for (std::int64_t i = 0; i < len; ++i) {
        float l = std::fabs(x[i]) * scale;
        float f = std::floor(l);
        float u = uniform_from(key32, static_cast<std::uint32_t>(base + i));
        float q = std::min(top, f + (u < l - f ? 1.0f : 0.0f));
        codes[i] = static_cast<Code>(x[i] < 0 ? -q : q);
    }
}

// QSGD's per-bucket norms (stored into the payload) and scales levels / norm (0 for a
// zero bucket) from the buckets' sums of squares. False on NaN or infinity.
ACC_INLINE bool qsgd_scales(const double* squares, std::int64_t count, int levels, std::uint8_t* norms, float* scales) {
    for (std::int64_t c = 0; c < count; ++c) {
        if (!std::isfinite(squares[c])) return false;
        const auto norm = static_cast<float>(std::sqrt(squares[c]));
        store_f32(norms + 4 * c, norm);
        scales[c] = norm == 0.0f ? 0.0f : static_cast<float>(levels) / norm;
    }
    return true;
}

// Dot product with eight lanes combined in a fixed order (vectorizes without reassociation).
ACC_INLINE float dot_body(const float* a, const float* b, std::int64_t n) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) lane[l] += a[j + l] * b[j + l];
    for (; j < n; ++j) lane[j % 8] += a[j] * b[j];
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

ACC_INLINE bool project_rows_body(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt,
                                  int r, float* p) {
    bool finite = true;
    for (std::int64_t i = 0; i < rows; ++i) {
        float* row = t + i * cols;
        if (g) finite = add_into_body(row, g + i * cols, cols) && finite;
        for (int c = 0; c < r; ++c) p[i * r + c] = dot_body(row, qt + c * cols, cols);
    }
    return finite;
}

ACC_INLINE void project_columns_body(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r,
                                     float* qt) {
    std::fill(qt, qt + r * cols, 0.0f);
    for (std::int64_t i = 0; i < rows; ++i) {
        const float* row = t + i * cols;
        for (int c = 0; c < r; ++c) {
            const float w = p[i * r + c];
            float* q = qt + c * cols;
            for (std::int64_t j = 0; j < cols; ++j) q[j] += w * row[j];
        }
    }
}

ACC_INLINE void expand_low_rank_body(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r,
                                     float* out, float* memory) {
    for (std::int64_t i = 0; i < rows; ++i) {
        float* o = out + i * cols;
        const float w0 = p[i * r];
        for (std::int64_t j = 0; j < cols; ++j) o[j] = w0 * qt[j];
        for (int c = 1; c < r; ++c) {
            const float w = p[i * r + c];
            const float* q = qt + c * cols;
            for (std::int64_t j = 0; j < cols; ++j) o[j] += w * q[j];
        }
        if (memory) {
            float* m = memory + i * cols;
            for (std::int64_t j = 0; j < cols; ++j) m[j] -= o[j];
        }
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
// ------------------------------------------------------------ AVX2 kernels

ACC_SIMD void moments_simd(const float* x, std::int64_t n, bool all, Moments& m) { moments_body(x, n, all, m); }

ACC_SIMD bool project_rows_simd(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt, int r,
                                float* p) {
    return project_rows_body(t, g, rows, cols, qt, r, p);
}
ACC_SIMD void project_columns_simd(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r,
                                   float* qt) {
    project_columns_body(t, rows, cols, p, r, qt);
}
ACC_SIMD void expand_low_rank_simd(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r,
                                   float* out, float* memory) {
    expand_low_rank_body(p, qt, rows, cols, r, out, memory);
}

ACC_SIMD bool add_into_simd(float* dst, const float* src, std::int64_t n) { return add_into_body(dst, src, n); }
ACC_SIMD bool copy_checked_simd(float* dst, const float* src, std::int64_t n) {
    return copy_checked_body(dst, src, n);
}
ACC_SIMD bool all_finite_simd(const float* x, std::int64_t n) { return all_finite_body(x, n); }

ACC_SIMD bool to_half_simd(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
    const __m256 d = _mm256_set1_ps(divisor);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i worst = _mm256_setzero_si256();
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_div_ps(_mm256_loadu_ps(x + i), d);
        __m256 b = _mm256_div_ps(_mm256_loadu_ps(x + i + 8), d);
        worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(a), abs_mask));
        worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(b), abs_mask));
        __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
        __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_set_m128i(hb, ha));
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), worst);
    bool ok = *std::max_element(lanes, lanes + 8) < 0x477ff000u;
    return to_half_portable(x + i, n - i, divisor, out + i) && ok;
}

ACC_SIMD void from_half_simd(const std::uint16_t* h, std::int64_t n, float* out) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) out[i] = half_to_float(h[i]);
}

ACC_SIMD bool pack_signs_simd(float* t, std::int64_t n, float scale, bool update, std::uint8_t* out) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 plus = _mm256_set1_ps(scale);
    const __m256 minus = _mm256_set1_ps(-scale);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i worst = _mm256_setzero_si256();
    std::int64_t w = 0;
    for (; (w + 1) * 32 <= n; ++w) {
        std::uint32_t word = 0;
        for (int part = 0; part < 4; ++part) {
            float* p = t + w * 32 + part * 8;
            __m256 v = _mm256_loadu_ps(p);
            worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(v), abs_mask));
            __m256 negative = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
            word |= static_cast<std::uint32_t>(_mm256_movemask_ps(negative)) << (part * 8);
            if (update) _mm256_storeu_ps(p, _mm256_sub_ps(v, _mm256_blendv_ps(plus, minus, negative)));
        }
        std::memcpy(out + 4 * w, &word, 4);
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), worst);
    bool ok = *std::max_element(lanes, lanes + 8) < kInfKey;
    if (w * 32 < n) ok = pack_signs_portable(t + w * 32, n - w * 32, scale, update, out + 4 * w) && ok;
    return ok;
}

ACC_SIMD void add_signs_simd(const std::uint8_t* packed, std::int64_t n, float weight, bool first, float* out) {
    const __m256 plus = _mm256_set1_ps(weight);
    const __m256 minus = _mm256_set1_ps(-weight);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    std::int64_t w = 0;
    for (; (w + 1) * 32 <= n; ++w) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * w, 4);
        for (int part = 0; part < 4; ++part) {
            __m256i byte = _mm256_set1_epi32(static_cast<int>((word >> (part * 8)) & 0xffu));
            __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(byte, bit), bit));
            __m256 v = _mm256_blendv_ps(plus, minus, set);
            float* p = out + w * 32 + part * 8;
            _mm256_storeu_ps(p, first ? v : _mm256_add_ps(_mm256_loadu_ps(p), v));
        }
    }
    for (std::int64_t i = w * 32; i < n; ++i) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * (i / 32), 4);
        float v = (word >> (i % 32)) & 1u ? -weight : weight;
        out[i] = first ? v : out[i] + v;
    }
}

ACC_SIMD std::int64_t scan_simd(const float* t, std::int64_t n, std::uint32_t tau, std::int32_t* out,
                                std::uint32_t* keys, std::int64_t capacity) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    // Keys are below 2^31, so a signed comparison with tau - 1 is key >= tau.
    const __m256i below = _mm256_set1_epi32(static_cast<int>(tau) - 1);
    std::int64_t count = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i key = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + i)), abs_mask);
        unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below))));
        while (mask) {
            int j = __builtin_ctz(mask);
            if (count < capacity) {
                out[count] = static_cast<std::int32_t>(i + j);
                keys[count] = magnitude_key(t[i + j]);
            }
            ++count;
            mask &= mask - 1;
        }
    }
    return scan_portable(t, i, n, tau, out, keys, capacity, count);
}

// Packs four vectors of eight int32 codes into 32 int8 codes, in order.
ACC_SIMD inline __attribute__((always_inline)) __m256i pack_int8(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_packs_epi32(a, b);
    __m256i cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Eight QSGD codes (int32 lanes). `counter` holds key + golden * index for the eight
// elements (the hash's input) and advances by eight indices.
ACC_SIMD inline __attribute__((always_inline)) __m256i qsgd_codes8(const float* x, __m256 scale, __m256i top,
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
ACC_SIMD inline __attribute__((always_inline)) void codes128_int8(const float* x, __m256 scale, __m256i top,
                                                                  __m256i& counter, void* out) {
    for (int g = 0; g < 128; g += 32) {
        __m256i a = qsgd_codes8(x + g, scale, top, counter);
        __m256i b = qsgd_codes8(x + g + 8, scale, top, counter);
        __m256i c = qsgd_codes8(x + g + 16, scale, top, counter);
        __m256i d = qsgd_codes8(x + g + 24, scale, top, counter);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<std::uint8_t*>(out) + g), pack_int8(a, b, c, d));
    }
}

// Sum of squares of 128 values, in double lanes combined as combine_lanes() does.
ACC_SIMD inline __attribute__((always_inline)) double bucket_squares_simd(const float* x) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int i = 0; i < 128; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    __m256d s = _mm256_add_pd(lo, hi);  // lanes (0+4, 1+5, 2+6, 3+7)
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

// QSGD over the first `buckets` whole buckets; returns false on NaN or infinity.
ACC_SIMD bool qsgd_encode_simd(const float* x, std::int64_t buckets, int levels, std::uint32_t key32,
                               std::uint8_t* norms, std::uint8_t* codes, bool wide) {
    const __m256i top = _mm256_set1_epi32(levels);
    const __m256i golden = _mm256_set1_epi32(static_cast<int>(kGolden));
    // key + golden * index for elements 0..7; advanced eight indices per call.
    __m256i counter = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(key32)),
                                       _mm256_mullo_epi32(golden, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    // Norms a block of buckets ahead, so that the square roots and divisions of one
    // block overlap instead of stalling each bucket (the block stays in L1).
    constexpr std::int64_t kBlock = 8;
    float block_scale[kBlock] = {};
    for (std::int64_t b = 0; b < buckets; ++b) {
        if (b % kBlock == 0) {
            const std::int64_t end = std::min(buckets, b + kBlock);
            double squares[kBlock];
            for (std::int64_t c = b; c < end; ++c) squares[c - b] = bucket_squares_simd(x + c * 128);
            if (!qsgd_scales(squares, end - b, levels, norms + 4 * b, block_scale)) return false;
        }
        const float* xb = x + b * 128;
        const float scale = block_scale[b % kBlock];
        std::uint8_t* cb = codes + (wide ? 2 : 1) * b * 128;
        if (scale == 0.0f) {
            std::memset(cb, 0, wide ? 256 : 128);
            counter = _mm256_add_epi32(counter, _mm256_set1_epi32(static_cast<int>(kGolden * 128u)));
            continue;
        }
        const __m256 s = _mm256_set1_ps(scale);
        if (wide) {
            for (int g = 0; g < 128; g += 16) {
                __m256i a = qsgd_codes8(xb + g, s, top, counter);
                __m256i c = qsgd_codes8(xb + g + 8, s, top, counter);
                __m256i ac = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), 0xd8);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb + 2 * g), ac);
            }
        } else {
            codes128_int8(xb, s, top, counter, cb);
        }
    }
    return true;
}

ACC_SIMD void qsgd_add_simd8(const std::int8_t* codes, float factor, bool first, float* out) {
    const __m256 f = _mm256_set1_ps(factor);
    for (int g = 0; g < 128; g += 8) {
        __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + g));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c8)), f);
        _mm256_storeu_ps(out + g, first ? v : _mm256_add_ps(_mm256_loadu_ps(out + g), v));
    }
}
// 128 ternary codes: QSGD's rounding with one level and scale 1 / s.
ACC_SIMD void ternary_block_simd(const float* x, std::uint32_t base, float inverse, std::uint32_t key32,
                                 std::int8_t* codes) {
    const __m256 s = _mm256_set1_ps(inverse);
    const __m256i top = _mm256_set1_epi32(1);
    __m256i counter = _mm256_add_epi32(
        _mm256_set1_epi32(static_cast<int>(key32 + kGolden * base)),
        _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int>(kGolden)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    codes128_int8(x, s, top, counter, codes);
}

// ------------------------------------------------------------ AVX-512 QSGD
// GCC 12 warns about the undefined upper halves some AVX-512 intrinsics start from.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

ACC_AVX512 inline __attribute__((always_inline)) double bucket_squares_avx512(const float* x) {
    // Eight double lanes: lane j gets elements j, j + 8, j + 16, ... in order, as in the portable loop.
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < 128; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(a, a));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(b, b));
    }
    __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

ACC_AVX512 inline __attribute__((always_inline)) __m512i qsgd_codes16(const float* x, __m512 scale, __m512i top,
                                                                      __m512i& counter) {
    __m512 v = _mm512_loadu_ps(x);
    __m512 l = _mm512_mul_ps(_mm512_abs_ps(v), scale);
    __m512 f = _mm512_roundscale_ps(l, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512i h = counter;
    counter = _mm512_add_epi32(counter, _mm512_set1_epi32(static_cast<int>(kGolden * 16u)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(0x7feb352d));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x846ca68bu)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(kTwoPowMinus24));
    __mmask16 fire = _mm512_cmp_ps_mask(u, _mm512_sub_ps(l, f), _CMP_LT_OQ);
    __m512i q = _mm512_cvttps_epi32(f);
    q = _mm512_min_epi32(top, _mm512_mask_add_epi32(q, fire, q, _mm512_set1_epi32(1)));
    __m512i sign = _mm512_srai_epi32(_mm512_castps_si512(v), 31);
    return _mm512_sub_epi32(_mm512_xor_si512(q, sign), sign);
}

ACC_AVX512 bool qsgd_encode_avx512(const float* x, std::int64_t buckets, int levels, std::uint32_t key32,
                                   std::uint8_t* norms, std::uint8_t* codes, bool wide) {
    const __m512i top = _mm512_set1_epi32(levels);
    __m512i counter = _mm512_add_epi32(
        _mm512_set1_epi32(static_cast<int>(key32)),
        _mm512_mullo_epi32(_mm512_set1_epi32(static_cast<int>(kGolden)),
                           _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
    // Norms a block of buckets ahead, so that the square roots and divisions overlap
    // instead of stalling every bucket (the block stays in L1).
    constexpr std::int64_t kBlock = 8;
    float block_scale[kBlock] = {};
    for (std::int64_t b = 0; b < buckets; ++b) {
        if (b % kBlock == 0) {
            const std::int64_t end = std::min(buckets, b + kBlock);
            double squares[kBlock];
            for (std::int64_t c = b; c < end; ++c) squares[c - b] = bucket_squares_avx512(x + c * 128);
            if (!qsgd_scales(squares, end - b, levels, norms + 4 * b, block_scale)) return false;
        }
        const float* xb = x + b * 128;
        std::uint8_t* cb = codes + (wide ? 2 : 1) * b * 128;
        const float scale = block_scale[b % kBlock];
        if (scale == 0.0f) {
            std::memset(cb, 0, wide ? 256 : 128);
            counter = _mm512_add_epi32(counter, _mm512_set1_epi32(static_cast<int>(kGolden * 128u)));
            continue;
        }
        const __m512 s = _mm512_set1_ps(scale);
        for (int g = 0; g < 128; g += 16) {
            __m512i c = qsgd_codes16(xb + g, s, top, counter);
            if (wide)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb + 2 * g), _mm512_cvtsepi32_epi16(c));
            else
                _mm_storeu_si128(reinterpret_cast<__m128i*>(cb + g), _mm512_cvtsepi32_epi8(c));
        }
    }
    return true;
}
#pragma GCC diagnostic pop
#endif

template <class Code>
void qsgd_add_portable(const Code* codes, std::int64_t len, float factor, bool first, float* out) {
    for (std::int64_t i = 0; i < len; ++i) {
        float v = static_cast<float>(codes[i]) * factor;
        out[i] = first ? v : out[i] + v;
    }
}

}  // namespace

SimdLevel detected_simd() { return g_detected; }
SimdLevel limit_simd(SimdLevel cap) { return static_cast<SimdLevel>(g_cap.exchange(static_cast<int>(cap))); }
SimdLevel simd_level() { return level(); }

// ---------------------------------------------------------------- random numbers

std::uint64_t mix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

std::uint64_t stream_key(std::uint64_t seed, std::uint64_t step, std::uint64_t parameter, std::uint64_t rank) {
    return mix64(mix64(mix64(mix64(seed) ^ step) ^ parameter) ^ rank);
}

float uniform_at(std::uint64_t key, std::int64_t index) {
    return uniform_from(static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(index));
}

std::uint64_t Rng::next() {
    state_ += 0x9e3779b97f4a7c15ull;
    std::uint64_t x = state_;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

std::uint64_t Rng::below(std::uint64_t bound) {
    // Lemire's multiply-and-reject: unbiased, one multiplication in the common case.
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<std::uint64_t>(m);
    if (low < bound) {
        std::uint64_t threshold = (0 - bound) % bound;
        while (low < threshold) {
            m = static_cast<unsigned __int128>(next()) * bound;
            low = static_cast<std::uint64_t>(m);
        }
    }
    return static_cast<std::uint64_t>(m >> 64);
}

void NumpyRandomState::seed_with(std::uint32_t seed) {
    mt_[0] = seed;
    for (int i = 1; i < kWords; ++i)
        mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<std::uint32_t>(i);
    pos_ = kWords;
}

std::uint32_t NumpyRandomState::next_u32() {
    constexpr int M = 397;
    if (pos_ >= kWords) {
        auto twist = [](std::uint32_t a, std::uint32_t b) {
            std::uint32_t y = (a & 0x80000000u) | (b & 0x7fffffffu);
            return (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        };
        int i = 0;
        for (; i < kWords - M; ++i) mt_[i] = mt_[i + M] ^ twist(mt_[i], mt_[i + 1]);
        for (; i < kWords - 1; ++i) mt_[i] = mt_[i + M - kWords] ^ twist(mt_[i], mt_[i + 1]);
        mt_[kWords - 1] = mt_[M - 1] ^ twist(mt_[kWords - 1], mt_[0]);
        pos_ = 0;
    }
    std::uint32_t y = mt_[pos_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

std::int64_t NumpyRandomState::randint(std::int64_t high) {
    auto range = static_cast<std::uint32_t>(high - 1);
    if (range == 0) return 0;
    std::uint32_t mask = range;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    std::uint32_t value;
    while ((value = next_u32() & mask) > range) {
    }
    return value;
}

std::vector<std::int64_t> NumpyRandomState::state() const {
    std::vector<std::int64_t> out(mt_.begin(), mt_.end());
    out.push_back(pos_);
    return out;
}

bool NumpyRandomState::set_state(const std::vector<std::int64_t>& words) {
    if (words.size() != kWords + 1) return false;
    for (int i = 0; i < kWords; ++i)
        if (words[i] < 0 || words[i] > 0xffffffffll) return false;
    if (words[kWords] < 0 || words[kWords] > kWords) return false;
    for (int i = 0; i < kWords; ++i) mt_[i] = static_cast<std::uint32_t>(words[i]);
    pos_ = static_cast<int>(words[kWords]);
    return true;
}

// ---------------------------------------------------------------- dense helpers

bool add_into(float* dst, const float* src, std::int64_t n) {
#if ACC_X86
    if (simd()) return add_into_simd(dst, src, n);
#endif
    return add_into_body(dst, src, n);
}

bool copy_checked(float* dst, const float* src, std::int64_t n) {
#if ACC_X86
    if (simd()) return copy_checked_simd(dst, src, n);
#endif
    return copy_checked_body(dst, src, n);
}

bool all_finite(const float* x, std::int64_t n) {
#if ACC_X86
    if (simd()) return all_finite_simd(x, n);
#endif
    return all_finite_body(x, n);
}

void divide(const float* x, std::int64_t n, float divisor, float* out) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = x[i] / divisor;
}

// ---------------------------------------------------------------- fp16

std::uint16_t float_to_half(float value) {
    std::uint32_t x = bits_of(value);
    const std::uint32_t sign = x & 0x80000000u;
    x ^= sign;
    std::uint32_t out;
    if (x >= 0x47800000u) {  // 65536 and above, infinity and NaN
        out = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (x < 0x38800000u) {  // below 2^-14: a subnormal half or zero
        // Adding 0.5 aligns the value's bits so that the float adder rounds to nearest even.
        float shifted = float_of(x) + 0.5f;
        out = bits_of(shifted) - bits_of(0.5f);
    } else {
        std::uint32_t odd = (x >> 13) & 1u;
        x += 0xc8000fffu;  // rebias the exponent (15 - 127) << 23, plus rounding
        x += odd;
        out = x >> 13;
    }
    return static_cast<std::uint16_t>(out | (sign >> 16));
}

float half_to_float(std::uint16_t value) {
    std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
    std::uint32_t exponent = (value >> 10) & 0x1fu;
    std::uint32_t mantissa = value & 0x3ffu;
    if (exponent == 0) {
        float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // mantissa * 2^-24
        return float_of(bits_of(magnitude) | sign);
    }
    if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
    return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

bool to_half(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
#if ACC_X86
    if (simd()) return to_half_simd(x, n, divisor, out);
#endif
    return to_half_portable(x, n, divisor, out);
}

void from_half(const std::uint16_t* h, std::int64_t n, float* out) {
#if ACC_X86
    if (simd()) return from_half_simd(h, n, out);
#endif
    for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(h[i]);
}

// ---------------------------------------------------------------- signs

bool pack_signs(const float* x, std::int64_t n, std::uint8_t* out) {
    // update = false: x is only read.
    float* t = const_cast<float*>(x);
#if ACC_X86
    if (simd()) return pack_signs_simd(t, n, 0.0f, false, out);
#endif
    return pack_signs_portable(t, n, 0.0f, false, out);
}

bool pack_signs_update(float* t, std::int64_t n, float scale, std::uint8_t* out) {
#if ACC_X86
    if (simd()) return pack_signs_simd(t, n, scale, true, out);
#endif
    return pack_signs_portable(t, n, scale, true, out);
}

void add_signs(const std::uint8_t* packed, std::int64_t n, float weight, bool first, float* out) {
#if ACC_X86
    if (simd()) return add_signs_simd(packed, n, weight, first, out);
#endif
    for (std::int64_t i = 0; i < n; ++i) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * (i / 32), 4);
        float v = (word >> (i % 32)) & 1u ? -weight : weight;
        out[i] = first ? v : out[i] + v;
    }
}

void sign_in_place(float* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? 1.0f : (x[i] < 0 ? -1.0f : 0.0f);
}

double abs_sum(const float* x, std::int64_t n) {
    Moments m;
#if ACC_X86
    if (simd())
        moments_simd(x, n, false, m);
    else
#endif
        moments_body(x, n, false, m);
    return combine_lanes(m.abs);
}

// ---------------------------------------------------------------- QSGD

std::int64_t qsgd_bytes(std::int64_t n, int levels) {
    return 4 * ((n + kQsgdBucket - 1) / kQsgdBucket) + (levels < 128 ? 1 : 2) * n;
}

bool qsgd_encode(const float* x, std::int64_t n, int levels, std::uint64_t key, std::uint8_t* out) {
    const std::int64_t buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    const bool wide = levels >= 128;
    std::uint8_t* codes = out + 4 * buckets;
    const auto key32 = static_cast<std::uint32_t>(key);
    std::int64_t b = 0;
#if ACC_X86
    if (simd()) {
        b = n / kQsgdBucket;  // the whole buckets; a partial last one below
        bool finite = avx512() ? qsgd_encode_avx512(x, b, levels, key32, out, codes, wide)
                               : qsgd_encode_simd(x, b, levels, key32, out, codes, wide);
        if (!finite) return false;
    }
#endif
    // Codes go through an aligned scratch bucket: the payload may start at any byte.
    alignas(32) std::int16_t scratch[kQsgdBucket];
    for (; b < buckets; ++b) {
        const std::int64_t begin = b * kQsgdBucket;
        const std::int64_t len = std::min(kQsgdBucket, n - begin);
        const float* xb = x + begin;
        const double squares = sum_squares_portable(xb, len);
        if (!std::isfinite(squares)) return false;
        const auto norm = static_cast<float>(std::sqrt(squares));
        store_f32(out + 4 * b, norm);
        std::uint8_t* cb = codes + (wide ? 2 : 1) * begin;
        if (norm == 0.0f) {
            std::memset(cb, 0, static_cast<size_t>((wide ? 2 : 1) * len));
            continue;
        }
        const float scale = static_cast<float>(levels) / norm;
        if (wide)
            qsgd_bucket_portable(xb, len, begin, scale, levels, key32, scratch);
        else
            qsgd_bucket_portable(xb, len, begin, scale, levels, key32, reinterpret_cast<std::int8_t*>(scratch));
        std::memcpy(cb, scratch, static_cast<size_t>((wide ? 2 : 1) * len));
    }
    return true;
}

void qsgd_add(const std::uint8_t* payload, std::int64_t n, int levels, float weight, bool first, float* out) {
    const std::int64_t buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    qsgd_add_range(payload, payload + 4 * buckets, n, levels, weight, first, out);
}

void qsgd_add_range(const std::uint8_t* norms, const std::uint8_t* codes, std::int64_t count, int levels, float weight,
                    bool first, float* out) {
    const std::int64_t buckets = (count + kQsgdBucket - 1) / kQsgdBucket;
    const bool wide = levels >= 128;
    const bool vector = simd();
    alignas(32) std::int16_t scratch[kQsgdBucket];
    for (std::int64_t b = 0; b < buckets; ++b) {
        const std::int64_t begin = b * kQsgdBucket;
        const std::int64_t len = std::min(kQsgdBucket, count - begin);
        const float factor = load_f32(norms + 4 * b) / static_cast<float>(levels) * weight;
        std::memcpy(scratch, codes + (wide ? 2 : 1) * begin, static_cast<size_t>((wide ? 2 : 1) * len));
#if ACC_X86
        if (vector && !wide && len == kQsgdBucket) {
            qsgd_add_simd8(reinterpret_cast<const std::int8_t*>(scratch), factor, first, out + begin);
            continue;
        }
#endif
        if (wide)
            qsgd_add_portable(scratch, len, factor, first, out + begin);
        else
            qsgd_add_portable(reinterpret_cast<const std::int8_t*>(scratch), len, factor, first, out + begin);
    }
}

// ---------------------------------------------------------------- TernGrad

bool terngrad_encode(const float* x, std::int64_t n, std::uint64_t key, std::uint8_t* out) {
    Moments m;
#if ACC_X86
    if (simd())
        moments_simd(x, n, true, m);
    else
#endif
        moments_body(x, n, true, m);
    if (m.worst >= kInfKey) return false;
    const double count = static_cast<double>(std::max<std::int64_t>(1, n));
    const double mean = combine_lanes(m.sum) / count;
    const double sigma = std::sqrt(std::max(0.0, combine_lanes(m.squares) / count - mean * mean));
    const float scale = std::min(float_of(m.worst), static_cast<float>(2.5 * sigma));
    store_f32(out, scale);
    std::uint8_t* codes = out + 4;
    const auto key32 = static_cast<std::uint32_t>(key);
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    // The codes are QSGD's stochastic rounding with one level and scale 1 / s: a clipped
    // value rounds to +-1, a smaller one to +-1 with probability |x| / s.
    alignas(32) std::int8_t block[kQsgdBucket];
    const bool vector = simd();
    for (std::int64_t begin = 0; begin < n; begin += kQsgdBucket) {
        const std::int64_t len = std::min(kQsgdBucket, n - begin);
#if ACC_X86
        if (vector && len == kQsgdBucket)
            ternary_block_simd(x + begin, static_cast<std::uint32_t>(begin), inverse, key32, block);
        else
#endif
            qsgd_bucket_portable(x + begin, len, begin, inverse, 1, key32, block);
        // code + 1 in two bits: 0 for -1, 1 for 0, 2 for +1.
        for (std::int64_t j = 0; j < len; j += 4) {
            unsigned byte = 0;
            for (std::int64_t i = j; i < std::min(len, j + 4); ++i)
                byte |= static_cast<unsigned>(block[i] + 1) << (2 * (i - j));
            codes[(begin + j) / 4] = static_cast<std::uint8_t>(byte);
        }
    }
    return true;
}

void terngrad_add(const std::uint8_t* payload, std::int64_t n, float weight, bool first, float* out) {
    terngrad_add_codes(payload + 4, n, load_f32(payload) * weight, first, out);
}

void terngrad_add_codes(const std::uint8_t* codes, std::int64_t count, float scale, bool first, float* out) {
    // Each byte holds four codes: look its four values up instead of unpacking bits.
    // (A corrupt code 3 decodes as +2, never out of range.)
    static const auto table = [] {
        std::array<std::array<float, 4>, 256> t{};
        for (int byte = 0; byte < 256; ++byte)
            for (int j = 0; j < 4; ++j) t[byte][j] = static_cast<float>(((byte >> (2 * j)) & 3) - 1);
        return t;
    }();
    std::int64_t i = 0;
    for (; i + 4 <= count; i += 4) {
        const auto& v = table[codes[i / 4]];
        for (int j = 0; j < 4; ++j) out[i + j] = first ? scale * v[j] : out[i + j] + scale * v[j];
    }
    for (; i < count; ++i) {
        float v = scale * table[codes[i / 4]][i % 4];
        out[i] = first ? v : out[i] + v;
    }
}

// ---------------------------------------------------------------- PowerSGD's products

bool project_rows(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt, int r, float* p) {
#if ACC_X86
    if (simd()) return project_rows_simd(t, g, rows, cols, qt, r, p);
#endif
    return project_rows_body(t, g, rows, cols, qt, r, p);
}

void project_columns(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r, float* qt) {
#if ACC_X86
    if (simd()) return project_columns_simd(t, rows, cols, p, r, qt);
#endif
    project_columns_body(t, rows, cols, p, r, qt);
}

void expand_low_rank(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r, float* out,
                     float* memory) {
#if ACC_X86
    if (simd()) return expand_low_rank_simd(p, qt, rows, cols, r, out, memory);
#endif
    expand_low_rank_body(p, qt, rows, cols, r, out, memory);
}

void gram_schmidt(float* m, std::int64_t n, int r, float epsilon) {
    for (int i = 0; i < r; ++i) {
        double squares = 0;
        for (std::int64_t row = 0; row < n; ++row) squares += static_cast<double>(m[row * r + i]) * m[row * r + i];
        const float norm = static_cast<float>(std::sqrt(squares));
        const float divisor = epsilon > 0 ? norm + epsilon : norm;
        for (std::int64_t row = 0; row < n; ++row) {
            float& v = m[row * r + i];
            v = divisor > 0 ? v / divisor : 0.0f;
        }
        for (int j = i + 1; j < r; ++j) {
            double dot = 0;
            for (std::int64_t row = 0; row < n; ++row) dot += static_cast<double>(m[row * r + i]) * m[row * r + j];
            const auto d = static_cast<float>(dot);
            for (std::int64_t row = 0; row < n; ++row) m[row * r + j] -= d * m[row * r + i];
        }
    }
}

// ---------------------------------------------------------------- sparsification

namespace {

// Indices i in [0, n) with magnitude key >= tau, ascending, into scratch.candidates.
std::int64_t scan(const float* t, std::int64_t n, std::uint32_t tau, SelectScratch& s) {
    auto& c = s.candidates;
    auto& k = s.candidate_keys;
    if (c.size() < 1024) c.resize(1024);
    k.resize(c.size());
    for (;;) {
        std::int64_t count = 0;
        auto capacity = static_cast<std::int64_t>(c.size());
#if ACC_X86
        if (simd())
            count = scan_simd(t, n, tau, c.data(), k.data(), capacity);
        else
#endif
            count = scan_portable(t, 0, n, tau, c.data(), k.data(), capacity, 0);
        if (count <= capacity) return count;
        c.resize(static_cast<size_t>(count + count / 4));
        k.resize(c.size());
    }
}

// The magnitude key of the r-th largest (0-based) of the keys in [first, last).
std::uint32_t rank_from_top(std::vector<std::uint32_t>& keys, std::int64_t count, std::int64_t r) {
    auto nth = keys.begin() + (count - 1 - r);
    std::nth_element(keys.begin(), nth, keys.begin() + count);
    return *nth;
}

// Keeps the k candidates of largest magnitude (ties: the first by position), in order.
void refine_exact(std::int64_t count, std::int64_t k, SelectScratch& s, std::int32_t* indices) {
    auto& keys = s.keys;
    const std::uint32_t* candidate_keys = s.candidate_keys.data();
    if (static_cast<std::int64_t>(keys.size()) < count) keys.resize(static_cast<size_t>(count));
    std::copy(candidate_keys, candidate_keys + count, keys.begin());
    const std::uint32_t kth = rank_from_top(keys, count, k - 1);
    std::int64_t greater = 0;
    for (std::int64_t j = 0; j < count; ++j) greater += candidate_keys[j] > kth;
    std::int64_t equal_quota = k - greater, out = 0;
    for (std::int64_t j = 0; j < count && out < k; ++j) {
        std::uint32_t key = candidate_keys[j];
        if (key > kth || (key == kth && equal_quota-- > 0)) indices[out++] = s.candidates[static_cast<size_t>(j)];
    }
}

// Magnitude keys of a strided sample with a random start; returns the sample size.
std::int64_t strided_sample(const float* t, std::int64_t n, std::int64_t wanted, std::uint64_t key,
                            std::vector<std::uint32_t>& keys) {
    const std::int64_t stride = std::max<std::int64_t>(1, n / wanted);
    Rng rng(key);
    const auto start = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(stride)));
    const std::int64_t count = (n - start + stride - 1) / stride;
    if (static_cast<std::int64_t>(keys.size()) < count) keys.resize(static_cast<size_t>(count));
    for (std::int64_t j = 0; j < count; ++j) keys[static_cast<size_t>(j)] = magnitude_key(t[start + j * stride]);
    return count;
}

}  // namespace

void top_k_exact(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key, std::int32_t* indices,
                 SelectScratch& s) {
    if (k >= n) {
        for (std::int64_t i = 0; i < n; ++i) indices[i] = static_cast<std::int32_t>(i);
        return;
    }
    std::uint32_t tau = 0;
    if (n > 8192) {
        // Aim a little below the k-th magnitude so that, with high probability, at
        // least k entries pass, but not many more. A sample of n / 16 (at most 32,768)
        // keeps its cost small against the scan.
        const std::int64_t wanted = std::min<std::int64_t>(32768, n / 16);
        std::int64_t m = strided_sample(t, n, wanted, key, s.keys);
        double expected = static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n);
        auto r = static_cast<std::int64_t>(expected + 4.0 * std::sqrt(expected) + 32.0);
        for (;;) {
            tau = r >= m ? 0 : rank_from_top(s.keys, m, r);
            if (tau == 0) break;
            std::int64_t count = scan(t, n, tau, s);
            if (count >= k) {
                refine_exact(count, k, s, indices);
                return;
            }
            // Unlucky sample: lower the threshold and scan again (the sample keys
            // are only permuted by the rank search, so they can be ranked again).
            r = 2 * r + 64;
        }
    }
    std::int64_t count = scan(t, n, 0, s);
    refine_exact(count, k, s, indices);
}

std::int64_t top_k_sampled(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key, std::int32_t* indices,
                           SelectScratch& s) {
    const double fraction = static_cast<double>(k) / static_cast<double>(n);
    const auto wanted = std::max<std::int64_t>((n + 99) / 100, static_cast<std::int64_t>(std::ceil(2.0 / fraction)));
    if (k >= n || wanted >= n) {
        top_k_exact(t, n, k, key, indices, s);
        return std::min(k, n);
    }
    const std::int64_t m = strided_sample(t, n, wanted, key, s.keys);
    const auto top = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(static_cast<double>(m) * fraction)));
    std::uint32_t tau = rank_from_top(s.keys, m, std::min(top, m) - 1);
    std::int64_t count = scan(t, n, tau, s);
    for (int round = 0;; ++round) {
        if (static_cast<double>(count) > 1.3 * static_cast<double>(k)) {
            refine_exact(count, k, s, indices);
            return k;
        }
        if (static_cast<double>(count) >= 0.8 * static_cast<double>(k) || tau == 0 || round == 10) break;
        // Lower the threshold by 0.8x (a NaN or infinite threshold drops to the largest finite value).
        float lowered = std::min(float_of(tau), std::numeric_limits<float>::max()) * 0.8f;
        tau = magnitude_key(lowered);
        count = scan(t, n, tau, s);
    }
    count = std::min(count, k);
    std::copy(s.candidates.begin(), s.candidates.begin() + count, indices);
    return count;
}

void random_indices(std::uint64_t key, std::int64_t n, std::int64_t k, std::int32_t* indices,
                    std::vector<std::uint64_t>& bitmap) {
    const std::int64_t words = (n + 63) / 64;
    // Draw the smaller of the chosen set and its complement.
    const bool complement = 2 * k > n;
    const std::int64_t draws = complement ? n - k : k;
    bitmap.assign(static_cast<size_t>(words), 0);
    Rng rng(key);
    for (std::int64_t d = 0; d < draws;) {
        auto i = rng.below(static_cast<std::uint64_t>(n));
        std::uint64_t& word = bitmap[i / 64];
        std::uint64_t bit = 1ull << (i % 64);
        if (!(word & bit)) {
            word |= bit;
            ++d;
        }
    }
    std::int64_t out = 0;
    for (std::int64_t w = 0; w < words; ++w) {
        std::uint64_t word = complement ? ~bitmap[static_cast<size_t>(w)] : bitmap[static_cast<size_t>(w)];
        if (w == words - 1 && n % 64) word &= (1ull << (n % 64)) - 1;
        while (word) {
            indices[out++] = static_cast<std::int32_t>(w * 64 + __builtin_ctzll(word));
            word &= word - 1;
        }
    }
}

bool scatter_add(const std::uint8_t* values, const std::uint8_t* indices, std::int64_t k, std::int64_t n,
                 float weight, float* out) {
    for (std::int64_t j = 0; j < k; ++j) {
        std::int32_t i = load_i32(indices + 4 * j);
        if (i < 0 || i >= n) return false;
        out[i] += weight * load_f32(values + 4 * j);
    }
    return true;
}

}  // namespace acc::compress::kernels
