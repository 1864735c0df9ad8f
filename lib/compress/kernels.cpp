// The loops every compressor shares: the choice of instruction set, random numbers,
// dense helpers and sums. Each compressor's own loops are in compressors/<name>.cpp.
#include "compress/kernels.hpp"

#include "base/splitmix64.hpp"
#include "compress/kernel_support.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <cmath>
#include <limits>

namespace acc::compress::kernels {
namespace detail {
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

}  // namespace

const SimdLevel g_detected = detect();
std::atomic<int> g_cap{initial_cap()};

#if ACC_X86
ACC_SIMD void moments_simd(const float* x, std::int64_t n, bool all, Moments& m) { moments_body(x, n, all, m); }
#endif

namespace {
#if ACC_X86
ACC_SIMD bool add_into_simd(float* dst, const float* src, std::int64_t n) { return add_into_body(dst, src, n); }
ACC_SIMD bool copy_checked_simd(float* dst, const float* src, std::int64_t n) {
    return copy_checked_body(dst, src, n);
}
ACC_SIMD bool all_finite_simd(const float* x, std::int64_t n) { return all_finite_body(x, n); }
#endif
}  // namespace
}  // namespace detail

using namespace detail;

SimdLevel detected_simd() { return g_detected; }
SimdLevel limit_simd(SimdLevel cap) { return static_cast<SimdLevel>(g_cap.exchange(static_cast<int>(cap))); }

// ---------------------------------------------------------------- random numbers

std::uint64_t mix64(std::uint64_t x) { return splitmix64_mix(x); }

std::uint64_t stream_key(std::uint64_t seed, std::uint64_t step, std::uint64_t parameter, std::uint64_t rank) {
    return mix64(mix64(mix64(mix64(seed) ^ step) ^ parameter) ^ rank);
}

float uniform_at(std::uint64_t key, std::int64_t index) {
    return uniform_from(static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(index));
}

std::uint64_t Rng::next() { return generator_.next(); }

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

}  // namespace acc::compress::kernels
