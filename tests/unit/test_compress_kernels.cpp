// The compressors' loops and codecs, without LibTorch: hand-computed cases, the
// vector and portable loops against each other, and properties on random inputs.
#include "base/error.hpp"
#include "compress/codecs.hpp"
#include "compress/kernels.hpp"
#include "compress/shapes.hpp"
#include "compress/spec.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <set>

using namespace acc::compress;
namespace k = acc::compress::kernels;

namespace {

std::vector<float> normal(std::int64_t n, std::uint32_t seed, float scale = 1.0f) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = d(gen);
    return v;
}

// Every instruction-set level this CPU offers, best first.
std::vector<k::SimdLevel> levels() {
    std::vector<k::SimdLevel> out;
    for (int l = static_cast<int>(k::detected_simd()); l >= 0; --l) out.push_back(static_cast<k::SimdLevel>(l));
    return out;
}

// Caps the instruction set for a scope.
struct Limit {
    explicit Limit(k::SimdLevel cap) : old(k::limit_simd(cap)) {}
    ~Limit() { k::limit_simd(old); }
    k::SimdLevel old;
};

// Runs f at every level.
template <class F>
void all_levels(F f) {
    for (auto level : levels()) {
        Limit limit(level);
        f();
    }
}

}  // namespace

TEST(Random, NumpyRandomStateMatchesNumpy) {
    // numpy: RandomState(0).randint(1000) x5 and RandomState(0).randint(10**9) x3.
    k::NumpyRandomState a(0);
    std::vector<std::int64_t> got;
    for (int i = 0; i < 5; ++i) got.push_back(a.randint(1000));
    EXPECT_EQ(got, (std::vector<std::int64_t>{684, 559, 629, 192, 835}));
    k::NumpyRandomState b(0);
    EXPECT_EQ(b.randint(1000000000), 209652396);
    EXPECT_EQ(b.randint(1000000000), 398764591);
    EXPECT_EQ(b.randint(1000000000), 924231285);
    // The reference MT19937 output for seed 5489.
    k::NumpyRandomState c(5489);
    EXPECT_EQ(c.next_u32(), 3499211612u);
}

TEST(Random, NumpyRandomStateRoundTripsItsState) {
    k::NumpyRandomState a(7);
    for (int i = 0; i < 700; ++i) a.next_u32();  // past one reload
    k::NumpyRandomState b(1);
    ASSERT_TRUE(b.set_state(a.state()));
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(a.next_u32(), b.next_u32());
    EXPECT_FALSE(b.set_state({1, 2, 3}));
}

TEST(Random, UniformNumbersAreUniformAndKeyed) {
    double sum = 0, squares = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
        float u = k::uniform_at(k::stream_key(1, 2, 3, 4), i);
        ASSERT_GE(u, 0.0f);
        ASSERT_LT(u, 1.0f);
        sum += u;
        squares += u * u;
    }
    EXPECT_NEAR(sum / n, 0.5, 0.005);
    EXPECT_NEAR(squares / n - (sum / n) * (sum / n), 1.0 / 12, 0.002);
    EXPECT_NE(k::uniform_at(k::stream_key(1, 2, 3, 4), 0), k::uniform_at(k::stream_key(1, 2, 3, 5), 0));
    k::Rng rng(9);
    std::vector<int> counts(7, 0);
    for (int i = 0; i < 70000; ++i) counts[rng.below(7)]++;
    for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(Fp16, HandComputedValues) {
    EXPECT_EQ(k::float_to_half(1.0f), 0x3c00);
    EXPECT_EQ(k::float_to_half(-2.0f), 0xc000);
    EXPECT_EQ(k::float_to_half(65504.0f), 0x7bff);
    EXPECT_EQ(k::float_to_half(65519.0f), 0x7bff);
    EXPECT_EQ(k::float_to_half(65520.0f), 0x7c00);            // rounds to infinity
    EXPECT_EQ(k::float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
    EXPECT_EQ(k::float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // halfway: ties to even
    EXPECT_EQ(k::float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: ties to even
    EXPECT_EQ(k::float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // halfway between 1 and next
    EXPECT_EQ(k::float_to_half(1.0f + std::ldexp(3.0f, -11)), 0x3c02);
    EXPECT_EQ(k::half_to_float(0x3c00), 1.0f);
    EXPECT_EQ(k::half_to_float(0x0001), std::ldexp(1.0f, -24));
    EXPECT_EQ(k::half_to_float(0xfbff), -65504.0f);
    EXPECT_TRUE(std::isinf(k::half_to_float(0x7c00)));
}

TEST(Fp16, VectorAndPortableLoopsAgree) {
    std::vector<float> x = normal(10007, 1, 100.0f);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = std::ldexp(x[i], -20);  // subnormal halves
    x[5] = 65519.0f;
    std::vector<std::uint16_t> a(x.size()), b(x.size());
    std::vector<float> back(x.size());
    ASSERT_TRUE(k::to_half(x.data(), static_cast<std::int64_t>(x.size()), 3.0f, a.data()));
    k::from_half(a.data(), static_cast<std::int64_t>(a.size()), back.data());
    for (auto level : levels()) {
        Limit limit(level);
        ASSERT_TRUE(k::to_half(x.data(), static_cast<std::int64_t>(x.size()), 3.0f, b.data()));
        EXPECT_EQ(a, b) << "level " << static_cast<int>(level);
        std::vector<float> back2(x.size());
        k::from_half(a.data(), static_cast<std::int64_t>(a.size()), back2.data());
        EXPECT_EQ(back, back2);
    }
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_EQ(a[i], k::float_to_half(x[i] / 3.0f));
        EXPECT_EQ(back[i], k::half_to_float(a[i]));
        if (std::fabs(x[i] / 3) > 1e-4f) {
            EXPECT_NEAR(back[i], x[i] / 3, std::fabs(x[i] / 3) * 0x1p-11f);
        }
    }
}

TEST(Fp16, RefusesOverflowAndNaN) {
    all_levels([] {
        std::vector<float> x(40, 1.0f);
        std::vector<std::uint16_t> h(40);
        x[33] = 70000.0f;
        EXPECT_FALSE(k::to_half(x.data(), 40, 1.0f, h.data()));
        EXPECT_TRUE(k::to_half(x.data(), 40, 2.0f, h.data()));  // 35000 fits
        x[3] = std::nanf("");
        EXPECT_FALSE(k::to_half(x.data(), 40, 2.0f, h.data()));
    });
}

TEST(Signs, PackingFollowsTheDocumentedLayout) {
    all_levels([] {
        std::vector<float> x = normal(77, 3);
        x[0] = 0.0f;   // zero counts as positive
        x[1] = -0.0f;  // so does negative zero
        std::vector<std::uint8_t> packed(static_cast<size_t>(k::sign_bytes(77)), 0xff);
        ASSERT_EQ(packed.size(), 12u);
        ASSERT_TRUE(k::pack_signs(x.data(), 77, packed.data()));
        for (int i = 0; i < 77; ++i) {
            int bit = (packed[i / 8] >> (i % 8)) & 1;
            EXPECT_EQ(bit, x[i] < 0 ? 1 : 0) << i;
        }
        EXPECT_EQ(packed[11] >> 5, 0);  // the unused bits of the last word
        std::vector<float> out(77);
        k::add_signs(packed.data(), 77, 0.5f, true, out.data());
        k::add_signs(packed.data(), 77, 0.25f, false, out.data());
        for (int i = 0; i < 77; ++i) EXPECT_EQ(out[i], x[i] < 0 ? -0.75f : 0.75f);
        x[70] = std::numeric_limits<float>::infinity();
        EXPECT_FALSE(k::pack_signs(x.data(), 77, packed.data()));
    });
}

TEST(Signs, ScaledUpdateLeavesTheError) {
    all_levels([] {
        std::vector<float> t = normal(100, 4);
        std::vector<float> before = t;
        std::vector<std::uint8_t> packed(static_cast<size_t>(k::sign_bytes(100)));
        ASSERT_TRUE(k::pack_signs_update(t.data(), 100, 0.5f, packed.data()));
        for (int i = 0; i < 100; ++i) EXPECT_EQ(t[i], before[i] - (before[i] < 0 ? -0.5f : 0.5f));
    });
}

TEST(Qsgd, VectorAndPortableLoopsAgree) {
    for (int levels : {1, 4, 127, 128, 32767}) {
        std::vector<float> x = normal(1000, 5);
        std::fill(x.begin() + 256, x.begin() + 384, 0.0f);  // a zero bucket
        const std::int64_t bytes = k::qsgd_bytes(1000, levels);
        // Encode at an odd offset too: payloads of several tensors are packed back to back.
        std::vector<std::uint8_t> a(static_cast<size_t>(bytes) + 1);
        {
            Limit portable(k::SimdLevel::portable);
            ASSERT_TRUE(k::qsgd_encode(x.data(), 1000, levels, 99, a.data() + 1));
        }
        for (auto level : ::levels()) {
            Limit limit(level);
            std::vector<std::uint8_t> b(static_cast<size_t>(bytes) + 1);
            ASSERT_TRUE(k::qsgd_encode(x.data(), 1000, levels, 99, b.data() + 1));
            EXPECT_EQ(a, b) << "levels " << levels << ", instruction set " << static_cast<int>(level);
        }
    }
}

TEST(Qsgd, SubnormalBucketsKeepZerosAndReachTheTopLevel) {
    // Buckets whose norm is below levels / FLT_MAX (levels / norm overflows float32): one
    // value among zeros, only the smallest subnormals, two values of either sign; then
    // normal values. Every instruction set codes them alike, by |x| / norm * levels.
    const float tiny = std::numeric_limits<float>::denorm_min();
    std::vector<float> x = normal(700, 15);
    std::fill(x.begin(), x.begin() + 384, 0.0f);
    x[5] = 2e-39f;
    for (int i = 128; i < 256; ++i) x[i] = i % 3 == 0 ? -tiny : tiny;
    x[300] = -2e-39f;
    x[301] = 1e-39f;
    for (int levels : {1, 127, 32767}) {
        const std::int64_t bytes = k::qsgd_bytes(700, levels);
        std::vector<std::uint8_t> a(static_cast<size_t>(bytes) + 1);
        {
            Limit portable(k::SimdLevel::portable);
            ASSERT_TRUE(k::qsgd_encode(x.data(), 700, levels, 5, a.data() + 1));
        }
        const std::int64_t width = levels < 128 ? 1 : 2;
        auto code = [&](const std::vector<std::uint8_t>& p, int i) {
            const std::uint8_t* c = p.data() + 1 + 4 * 6 + width * i;
            return width == 1 ? static_cast<int>(static_cast<std::int8_t>(c[0]))
                              : static_cast<int>(static_cast<std::int16_t>(c[0] | c[1] << 8));
        };
        // Zeros code 0, the lone value its bucket's whole norm: exactly the top level; the
        // others one of the two levels around |x| / norm * levels.
        EXPECT_EQ(code(a, 5), levels);
        for (int i = 0; i < 384; ++i) {
            const float norm = k::load_f32(a.data() + 1 + 4 * (i / 128));
            ASSERT_GT(norm, 0.0f);
            ASSERT_FALSE(std::isfinite(static_cast<float>(levels) / norm)) << "bucket " << i / 128;
            const float l = std::fabs(x[i]) / norm * static_cast<float>(levels);
            const int c = code(a, i);
            if (x[i] == 0.0f) {
                EXPECT_EQ(c, 0) << "levels " << levels << ", value " << i;
            }
            EXPECT_TRUE(std::abs(c) == static_cast<int>(std::floor(l)) ||
                        std::abs(c) == std::min(levels, static_cast<int>(std::floor(l)) + 1))
                << "levels " << levels << ", value " << i << ": " << c << " for " << l;
            if (c != 0) {
                EXPECT_EQ(c < 0, x[i] < 0) << i;
            }
        }
        for (auto level : ::levels()) {
            Limit limit(level);
            std::vector<std::uint8_t> b(a.size());
            ASSERT_TRUE(k::qsgd_encode(x.data(), 700, levels, 5, b.data() + 1));
            EXPECT_EQ(a, b) << "levels " << levels << ", instruction set " << static_cast<int>(level);
        }
    }
}

TEST(Qsgd, CodesFollowTheDefinition) {
    // One bucket, checked element by element against the formula in kernels.hpp.
    std::vector<float> x = normal(128, 6);
    const int levels = 4;
    std::vector<std::uint8_t> payload(static_cast<size_t>(k::qsgd_bytes(128, levels)));
    ASSERT_EQ(payload.size(), 4u + 128u);
    ASSERT_TRUE(k::qsgd_encode(x.data(), 128, levels, 7, payload.data()));
    double squares = 0;
    for (float v : x) squares += double(v) * v;
    const float norm = k::load_f32(payload.data());
    EXPECT_FLOAT_EQ(norm, static_cast<float>(std::sqrt(squares)));
    const float scale = levels / norm;
    for (int i = 0; i < 128; ++i) {
        float l = std::fabs(x[i]) * scale;
        float f = std::floor(l);
        float q = std::min<float>(levels, f + (k::uniform_at(7, i) < l - f ? 1.0f : 0.0f));
        auto code = static_cast<std::int8_t>(payload[4 + i]);
        EXPECT_EQ(code, static_cast<int>(x[i] < 0 ? -q : q)) << i;
        EXPECT_LE(std::abs(code), levels);
    }
}

TEST(Qsgd, IsUnbiased) {
    // E[decode(encode(x))] = x: the mean over many independent keys converges to x.
    std::vector<float> x = normal(300, 8);
    std::vector<double> mean(300, 0.0);
    std::vector<std::uint8_t> payload(static_cast<size_t>(k::qsgd_bytes(300, 2)));
    std::vector<float> out(300);
    const int trials = 4000;
    for (int t = 0; t < trials; ++t) {
        ASSERT_TRUE(k::qsgd_encode(x.data(), 300, 2, k::stream_key(1, t, 0, 0), payload.data()));
        k::qsgd_add(payload.data(), 300, 2, 1.0f, true, out.data());
        for (int i = 0; i < 300; ++i) mean[i] += out[i] / trials;
    }
    // Stochastic rounding with step d = norm / levels has variance d^2 p (1 - p), p the fraction.
    for (int i = 0; i < 300; ++i) {
        double squares = 0;
        for (int j = i / 128 * 128; j < std::min(300, i / 128 * 128 + 128); ++j) squares += double(x[j]) * x[j];
        double step = std::sqrt(squares) / 2, l = std::fabs(x[i]) / step, p = l - std::floor(l);
        double sd = step * std::sqrt(p * (1 - p) / trials);
        EXPECT_NEAR(mean[i], x[i], 5 * sd + 1e-6) << i;
    }
}

TEST(Qsgd, RefusesNaN) {
    all_levels([] {
        std::vector<float> x = normal(300, 9);
        x[200] = std::nanf("");
        std::vector<std::uint8_t> payload(static_cast<size_t>(k::qsgd_bytes(300, 8)));
        EXPECT_FALSE(k::qsgd_encode(x.data(), 300, 8, 1, payload.data()));
    });
}

TEST(TernGrad, VectorAndPortableLoopsAgree) {
    std::vector<float> x = normal(1001, 14);
    std::vector<std::uint8_t> a(static_cast<size_t>(k::terngrad_bytes(1001)));
    {
        Limit portable(k::SimdLevel::portable);
        ASSERT_TRUE(k::terngrad_encode(x.data(), 1001, 77, a.data()));
    }
    for (auto level : levels()) {
        Limit limit(level);
        std::vector<std::uint8_t> b(a.size());
        ASSERT_TRUE(k::terngrad_encode(x.data(), 1001, 77, b.data()));
        EXPECT_EQ(a, b) << "instruction set " << static_cast<int>(level);
    }
}

TEST(TernGrad, SubnormalValuesKeepZeros) {
    // s subnormal, so that 1 / s overflows: zeros stay 0 and every instruction set agrees.
    const float tiny = std::numeric_limits<float>::denorm_min();
    std::vector<float> x(300, 0.0f);
    for (int i = 0; i < 300; i += 7) x[i] = i % 2 ? -3 * tiny : 3 * tiny;
    std::vector<std::uint8_t> a(static_cast<size_t>(k::terngrad_bytes(300)));
    {
        Limit portable(k::SimdLevel::portable);
        ASSERT_TRUE(k::terngrad_encode(x.data(), 300, 21, a.data()));
    }
    ASSERT_GT(k::load_f32(a.data()), 0.0f);
    ASSERT_FALSE(std::isfinite(1.0f / k::load_f32(a.data())));
    for (int i = 0; i < 300; ++i) {
        const int code = (a[4 + i / 4] >> (2 * (i % 4)) & 3) - 1;
        const int expected = x[i] == 0.0f ? 0 : x[i] < 0 ? -1 : 1;  // each is at least s: clipped, always +-1
        EXPECT_EQ(code, expected) << i;
    }
    for (auto level : levels()) {
        Limit limit(level);
        std::vector<std::uint8_t> b(a.size());
        ASSERT_TRUE(k::terngrad_encode(x.data(), 300, 21, b.data()));
        EXPECT_EQ(a, b) << "instruction set " << static_cast<int>(level);
    }
}

TEST(TernGrad, IsUnbiasedForTheClippedValues) {
    std::vector<float> x = normal(200, 10);
    x[17] = 40.0f;  // an outlier, clipped to 2.5 standard deviations
    double sum = 0, squares = 0;
    for (float v : x) {
        sum += v;
        squares += double(v) * v;
    }
    const double sigma = std::sqrt(squares / 200 - (sum / 200) * (sum / 200));
    const float clip = static_cast<float>(2.5 * sigma);
    std::vector<std::uint8_t> payload(static_cast<size_t>(k::terngrad_bytes(200)));
    std::vector<double> mean(200, 0.0);
    std::vector<float> out(200);
    const int trials = 4000;
    for (int t = 0; t < trials; ++t) {
        ASSERT_TRUE(k::terngrad_encode(x.data(), 200, k::stream_key(2, t, 0, 0), payload.data()));
        EXPECT_FLOAT_EQ(k::load_f32(payload.data()), clip);
        k::terngrad_add(payload.data(), 200, 1.0f, true, out.data());
        for (int i = 0; i < 200; ++i) {
            ASSERT_TRUE(out[i] == 0.0f || std::fabs(out[i]) == clip);
            mean[i] += out[i] / trials;
        }
    }
    // Each entry is clip * Bernoulli(|x| / clip): variance |x| (clip - |x|).
    for (int i = 0; i < 200; ++i) {
        double a = std::min(std::fabs(x[i]), clip);
        EXPECT_NEAR(mean[i], std::clamp(x[i], -clip, clip), 5 * std::sqrt(a * (clip - a) / trials) + 1e-6) << i;
    }
}

namespace {

// The k largest magnitudes by sorting: ties to the lower index, NaN largest.
std::vector<std::int32_t> brute_top_k(const std::vector<float>& x, std::int64_t kk) {
    std::vector<std::int32_t> idx(x.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto key = [&](std::int32_t i) {
        float a = std::fabs(x[static_cast<size_t>(i)]);
        return std::isnan(a) ? std::numeric_limits<float>::infinity() * 2 : a;
    };
    std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) {
        float ka = key(a), kb = key(b);
        if (std::isnan(x[a]) != std::isnan(x[b])) return std::isnan(x[a]);
        return ka > kb;
    });
    idx.resize(static_cast<size_t>(kk));
    std::sort(idx.begin(), idx.end());
    return idx;
}

}  // namespace

TEST(TopK, ExactSelectionMatchesSorting) {
    all_levels([] {
        for (std::int64_t n : {1, 5, 100, 4096, 300000}) {
            std::vector<float> x = normal(n, static_cast<std::uint32_t>(n));
            for (std::int64_t kk : {std::int64_t{1}, std::max<std::int64_t>(1, n / 100), n / 2 + 1, n}) {
                std::vector<std::int32_t> got(static_cast<size_t>(kk));
                k::SelectScratch scratch;
                k::top_k_exact(x.data(), n, kk, 11, got.data(), scratch);
                EXPECT_EQ(got, brute_top_k(x, kk)) << "n " << n << " k " << kk;
            }
        }
    });
}

TEST(TopK, TiesNaNAndConstantInputs) {
    std::vector<float> x(1000, 1.0f);
    x[500] = -3.0f;
    x[10] = std::nanf("");
    std::vector<std::int32_t> got(5);
    k::SelectScratch scratch;
    k::top_k_exact(x.data(), 1000, 5, 1, got.data(), scratch);
    // NaN first, then -3, then the first of the tied ones.
    EXPECT_EQ(got, (std::vector<std::int32_t>{0, 1, 2, 10, 500}));
    std::vector<float> zeros(200000, 0.0f);
    std::vector<std::int32_t> z(2000);
    k::top_k_exact(zeros.data(), 200000, 2000, 1, z.data(), scratch);
    for (int j = 0; j < 2000; ++j) EXPECT_EQ(z[static_cast<size_t>(j)], j);
}

TEST(TopK, SampledSelectionKeepsItsCountWithinTolerance) {
    for (std::int64_t n : {20000, 1000000}) {
        std::vector<float> x = normal(n, 12);
        for (double fraction : {0.001, 0.01, 0.1}) {
            std::int64_t kk = kept_entries(fraction, n);
            std::vector<std::int32_t> got(static_cast<size_t>(kk));
            k::SelectScratch scratch;
            std::int64_t chosen = k::top_k_sampled(x.data(), n, kk, 13, got.data(), scratch);
            EXPECT_LE(chosen, kk);
            EXPECT_GE(chosen, static_cast<std::int64_t>(0.8 * static_cast<double>(kk))) << n << " " << fraction;
            EXPECT_TRUE(std::is_sorted(got.begin(), got.begin() + chosen));
            EXPECT_EQ(std::set<std::int32_t>(got.begin(), got.begin() + chosen).size(), static_cast<size_t>(chosen));
            // Everything chosen is large: above the smallest magnitude of the exact top 2k.
            std::vector<std::int32_t> exact = brute_top_k(x, std::min(n, 2 * kk));
            float floor_magnitude = std::numeric_limits<float>::infinity();
            for (auto i : exact) floor_magnitude = std::min(floor_magnitude, std::fabs(x[static_cast<size_t>(i)]));
            for (std::int64_t j = 0; j < chosen; ++j) EXPECT_GE(std::fabs(x[static_cast<size_t>(got[static_cast<size_t>(j)])]), floor_magnitude * 0.5f);
        }
    }
}

TEST(RandomK, IndicesAreDistinctSortedAndShared) {
    std::vector<std::uint64_t> bitmap;
    for (std::int64_t kk : {1, 10, 600, 999, 1000}) {
        std::vector<std::int32_t> a(static_cast<size_t>(kk)), b(static_cast<size_t>(kk)), c(static_cast<size_t>(kk));
        k::random_indices(5, 1000, kk, a.data(), bitmap);
        k::random_indices(5, 1000, kk, b.data(), bitmap);
        k::random_indices(6, 1000, kk, c.data(), bitmap);
        EXPECT_EQ(a, b);
        if (kk > 1 && kk < 1000) {
            EXPECT_NE(a, c);
        }
        EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
        EXPECT_EQ(std::set<std::int32_t>(a.begin(), a.end()).size(), static_cast<size_t>(kk));
        EXPECT_GE(a.front(), 0);
        EXPECT_LT(a.back(), 1000);
    }
}

TEST(Sparse, ScatterAddRefusesIndicesOutOfRange) {
    std::vector<std::uint8_t> payload(16);
    k::store_f32(payload.data(), 2.0f);
    k::store_f32(payload.data() + 4, 3.0f);
    k::store_i32(payload.data() + 8, 1);
    k::store_i32(payload.data() + 12, 1);
    std::vector<float> out(3, 0.0f);
    ASSERT_TRUE(k::scatter_add(payload.data(), payload.data() + 8, 2, 3, 0.5f, out.data()));
    EXPECT_EQ(out, (std::vector<float>{0.0f, 2.5f, 0.0f}));
    k::store_i32(payload.data() + 12, 3);
    EXPECT_FALSE(k::scatter_add(payload.data(), payload.data() + 8, 2, 3, 1.0f, out.data()));
    k::store_i32(payload.data() + 12, -1);
    EXPECT_FALSE(k::scatter_add(payload.data(), payload.data() + 8, 2, 3, 1.0f, out.data()));
}

TEST(PowerSgdProducts, MatchNaiveLoops) {
    all_levels([] {
        const std::int64_t rows = 13, cols = 37;
        for (int r : {1, 2, 3}) {
            std::vector<float> t = normal(rows * cols, 20), g = normal(rows * cols, 21), qt = normal(r * cols, 22);
            std::vector<float> t_in = t, p(static_cast<size_t>(rows * r));
            ASSERT_TRUE(k::project_rows(t.data(), g.data(), rows, cols, qt.data(), r, p.data()));
            for (std::int64_t i = 0; i < rows; ++i)
                for (int c = 0; c < r; ++c) {
                    double want = 0;
                    for (std::int64_t j = 0; j < cols; ++j) {
                        ASSERT_EQ(t[i * cols + j], t_in[i * cols + j] + g[i * cols + j]);
                        want += double(t[i * cols + j]) * qt[c * cols + j];
                    }
                    EXPECT_NEAR(p[i * r + c], want, 1e-4);
                }
            std::vector<float> q2(static_cast<size_t>(r * cols));
            k::project_columns(t.data(), rows, cols, p.data(), r, q2.data());
            for (int c = 0; c < r; ++c)
                for (std::int64_t j = 0; j < cols; ++j) {
                    double want = 0;
                    for (std::int64_t i = 0; i < rows; ++i) want += double(p[i * r + c]) * t[i * cols + j];
                    EXPECT_NEAR(q2[c * cols + j], want, 1e-3);
                }
            std::vector<float> out(static_cast<size_t>(rows * cols)), memory = t;
            k::expand_low_rank(p.data(), q2.data(), rows, cols, r, out.data(), memory.data());
            for (std::int64_t i = 0; i < rows; ++i)
                for (std::int64_t j = 0; j < cols; ++j) {
                    double want = 0;
                    for (int c = 0; c < r; ++c) want += double(p[i * r + c]) * q2[c * cols + j];
                    EXPECT_NEAR(out[i * cols + j], want, 1e-2);
                    EXPECT_EQ(memory[i * cols + j], t[i * cols + j] - out[i * cols + j]);
                }
        }
        std::vector<float> bad(6, 1.0f), p(2), qt(3, 1.0f);
        bad[4] = std::nanf("");
        EXPECT_FALSE(k::project_rows(bad.data(), nullptr, 2, 3, qt.data(), 1, p.data()) &&
                     k::all_finite(bad.data(), 6));
    });
}

TEST(PowerSgdProducts, GramSchmidtGivesOrthonormalColumnsAndKeepsZeroColumns) {
    const std::int64_t n = 50;
    const int r = 3;
    std::vector<float> m = normal(n * r, 30);
    k::gram_schmidt(m.data(), n, r, 0.0f);
    for (int a = 0; a < r; ++a)
        for (int b = 0; b < r; ++b) {
            double dot = 0;
            for (std::int64_t i = 0; i < n; ++i) dot += double(m[i * r + a]) * m[i * r + b];
            EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-5);
        }
    std::vector<float> z(n * 2, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) z[i * 2 + 1] = 2.0f;
    k::gram_schmidt(z.data(), n, 2, 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(z[i * 2], 0.0f);  // no NaN from the zero column
        EXPECT_NEAR(z[i * 2 + 1], 1.0 / std::sqrt(50.0), 1e-6);
    }
}

// --------------------------------------------------------------------- codecs

namespace {

const std::vector<std::string> kGatherSpecs = {"topk:0.01", "topk:0.3", "dgc:0.01", "signsgd", "efsignsgd",
                                               "qsgd:4",    "qsgd:255", "terngrad"};

}  // namespace

TEST(Codecs, PayloadSizesEqualTheDocumentedFormula) {
    for (const auto& text : kGatherSpecs)
        for (std::int64_t n : {1, 31, 33, 127, 129, 36864}) {
            Spec spec = parse_spec(text);
            auto codec = make_gather_codec(spec, n, {});
            EXPECT_EQ(codec->payload_bytes(), wire_bytes(spec, {n})) << text << " n " << n;
        }
}

TEST(Codecs, ErrorFeedbackLosesNothing) {
    // W = 1: t == decode(encode(t)) + new error, for every codec with error feedback.
    for (const auto& text : kGatherSpecs) {
        Spec spec = parse_spec(text);
        for (auto selection : {TopkSelection::exact, TopkSelection::sampled}) {
            CodecOptions options;
            options.topk.selection = selection;
            auto codec = make_gather_codec(spec, 5000, options);
            if (!codec->error_feedback()) continue;
            std::vector<float> t = normal(5000, 40), before = t, out(5000);
            std::vector<std::uint8_t> payload(static_cast<size_t>(codec->payload_bytes()));
            ASSERT_TRUE(codec->encode(t.data(), true, 3, payload.data()));
            ASSERT_TRUE(codec->decode({payload.data()}, out.data()));
            // Exact for the sparsifiers; within rounding where a scale is subtracted.
            for (int i = 0; i < 5000; ++i)
                ASSERT_NEAR(before[i], out[i] + t[i], 1e-6f * (std::fabs(out[i]) + std::fabs(t[i]))) << text << " at " << i;
        }
    }
}

TEST(Codecs, AggregateIsTheMeanOfTheDecodedPayloads) {
    for (const auto& text : kGatherSpecs) {
        Spec spec = parse_spec(text);
        const std::int64_t n = 20001;  // more than two decode blocks, and no whole number of words
        const int W = 3;
        std::vector<std::vector<std::uint8_t>> payloads;
        std::vector<std::vector<float>> decoded;
        for (int w = 0; w < W; ++w) {
            auto codec = make_gather_codec(spec, n, {});
            std::vector<float> t = normal(n, 50 + w);
            payloads.emplace_back(static_cast<size_t>(codec->payload_bytes()));
            ASSERT_TRUE(codec->encode(t.data(), false, k::stream_key(0, 0, 0, w), payloads.back().data()));
            decoded.emplace_back(n);
            ASSERT_TRUE(codec->decode({payloads.back().data()}, decoded.back().data()));
        }
        auto codec = make_gather_codec(spec, n, {});
        std::vector<float> out(n);
        ASSERT_TRUE(codec->decode({payloads[0].data(), payloads[1].data(), payloads[2].data()}, out.data()));
        for (std::int64_t i = 0; i < n; ++i) {
            double sum = decoded[0][i] + decoded[1][i] + decoded[2][i];
            if (spec.name == "signsgd")
                ASSERT_EQ(out[i], sum > 0 ? 1.0f : -1.0f) << text;  // majority of three signs
            else
                ASSERT_NEAR(out[i], sum / W, 1e-6 * (1 + std::fabs(sum))) << text << " at " << i;
        }
    }
}

TEST(Codecs, SignSgdVoteTiesGiveZero) {
    auto codec = make_gather_codec(parse_spec("signsgd"), 2, {});
    std::vector<float> a = {1.0f, -1.0f}, b = {-1.0f, -1.0f}, out(2);
    std::vector<std::uint8_t> pa(4), pb(4);
    codec->encode(a.data(), false, 0, pa.data());
    codec->encode(b.data(), false, 0, pb.data());
    ASSERT_TRUE(codec->decode({pa.data(), pb.data()}, out.data()));
    EXPECT_EQ(out, (std::vector<float>{0.0f, -1.0f}));
}

TEST(Codecs, DgcCorrectsMomentumAndMasksIt) {
    auto codec = make_gather_codec(parse_spec("dgc:0.5"), 4, {});
    // n = 4 is below DGC's sampling size, so the selection is exact: k = 2.
    std::vector<float> g = {1.0f, -4.0f, 2.0f, 0.5f}, v(4, 0.0f);
    ASSERT_TRUE(codec->compensate(g.data(), v.data(), true));
    EXPECT_EQ(v, g);  // u = g, v = u
    std::vector<std::uint8_t> payload(16);
    ASSERT_TRUE(codec->encode(v.data(), true, 0, payload.data()));
    EXPECT_EQ(v, (std::vector<float>{1.0f, 0.0f, 0.0f, 0.5f}));  // sent entries cleared
    auto state = codec->state();
    ASSERT_EQ(state.size(), 1u);
    EXPECT_EQ(*state[0].second, (std::vector<float>{1.0f, 0.0f, 0.0f, 0.5f}));  // momentum masked too
    ASSERT_TRUE(codec->compensate(g.data(), v.data(), false));
    // u = 0.9 u + g; v += u
    EXPECT_FLOAT_EQ(v[0], 1.0f + (0.9f * 1.0f + 1.0f));
    EXPECT_FLOAT_EQ(v[1], -4.0f);
    EXPECT_FLOAT_EQ(v[3], 0.5f + (0.9f * 0.5f + 0.5f));
}

TEST(Codecs, RefuseTensorsTooLargeForTheirIndices) {
    EXPECT_THROW(make_gather_codec(parse_spec("topk:0.1"), std::int64_t{1} << 32, {}), acc::UsageError);
    EXPECT_THROW(make_gather_codec(parse_spec("none"), 10, {}), acc::UsageError);
}

TEST(Codecs, EveryCompressorHasACodecOfItsWireSize) {
    // The allreduce compressors too: the exchange places each codec's payload in its
    // channel's buffer, so the payload must be the documented size.
    for (const auto& c : compressors()) {
        std::string text = c.name;
        if (c.parameter_info.name) text += std::string(":") + c.parameter_info.example;
        Spec spec = parse_spec(text);
        for (const std::vector<std::int64_t>& shape :
             std::vector<std::vector<std::int64_t>>{{}, {1}, {33}, {129}, {64, 576}, {4, 3}, {0}}) {
            auto codec = make_codec(spec, shape, {});
            EXPECT_EQ(codec->payload_bytes(), wire_bytes(spec, shape)) << text;
            EXPECT_EQ(codec->numel(), acc::shape_numel(shape)) << text;
            const bool gathered = codec->channel() == Channel::gather;
            EXPECT_EQ(gathered, c.collective == Collective::allgather) << text;
            if (codec->channel() == Channel::low_rank) {
                EXPECT_TRUE(powersgd_compresses(shape, 2)) << text;
                EXPECT_EQ(codec->low_rank().rank, 2);
            } else {
                EXPECT_EQ(codec->buffer_bytes(), codec->payload_bytes()) << text;
            }
        }
    }
}

TEST(Codecs, AllreduceCodecsDecodeTheMeanOfTheSum) {
    const int W = 4;
    std::vector<float> t = {1.0f, -2.0f, 3.5f, 0.25f, 8.0f}, out(5), memory(5, 0.0f);
    {
        auto codec = make_codec(parse_spec("none"), {5}, {});
        std::vector<float> sum(5);
        ASSERT_TRUE(codec->encode(t.data(), false, 0, reinterpret_cast<std::uint8_t*>(sum.data())));
        EXPECT_EQ(sum, t);
        codec->decode_sum(reinterpret_cast<const std::uint8_t*>(sum.data()), W, out.data(), nullptr);
        for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], t[i] / 4.0f);
    }
    {
        // PowerSGD on a vector sends it whole; PyTorch's hook keeps local minus mean as its error.
        auto codec = make_codec(parse_spec("powersgd:2"), {5}, {});
        ASSERT_EQ(codec->channel(), Channel::fp32_sum);
        EXPECT_TRUE(codec->error_feedback());
        memory = t;
        codec->decode_sum(reinterpret_cast<const std::uint8_t*>(t.data()), W, out.data(), memory.data());
        for (int i = 0; i < 5; ++i) EXPECT_EQ(memory[i], t[i] - t[i] / 4.0f);
        CodecOptions reference;
        reference.uncompressed_error_feedback = false;
        EXPECT_FALSE(make_codec(parse_spec("powersgd:2"), {5}, reference)->error_feedback());
    }
    {
        CodecOptions options;
        options.world = W;
        auto codec = make_codec(parse_spec("fp16"), {5}, options);
        std::vector<std::uint16_t> halves(5);
        ASSERT_TRUE(codec->encode(t.data(), false, 0, reinterpret_cast<std::uint8_t*>(halves.data())));
        codec->decode_sum(reinterpret_cast<const std::uint8_t*>(halves.data()), W, out.data(), nullptr);
        for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], t[i] / 4.0f);  // exact in half precision
        std::vector<float> huge = {70000.0f * W};
        auto one = make_codec(parse_spec("fp16"), {1}, options);
        EXPECT_FALSE(one->encode(huge.data(), false, 0, reinterpret_cast<std::uint8_t*>(halves.data())));
        EXPECT_TRUE(one->encode_failure_fatal());
        EXPECT_NE(one->encode_failure_detail().find("4 workers"), std::string::npos);
    }
    {
        // randomk: every worker with the same key picks the same entries; the rest decode to 0.
        auto codec = make_codec(parse_spec("randomk:0.4"), {5}, {});
        EXPECT_TRUE(codec->shared_stream());
        std::vector<float> e = t, values(2);
        ASSERT_TRUE(codec->encode(e.data(), true, 7, reinterpret_cast<std::uint8_t*>(values.data())));
        codec->decode_sum(reinterpret_cast<const std::uint8_t*>(values.data()), 1, out.data(), nullptr);
        int kept = 0;
        for (int i = 0; i < 5; ++i) {
            EXPECT_EQ(out[i] + e[i], t[i]);  // sent, or kept in the error
            kept += out[i] != 0.0f;
        }
        EXPECT_EQ(kept, 2);
    }
}

TEST(Codecs, CallingTheOtherChannelsDecodeIsAnInternalError) {
    std::vector<float> out(4);
    std::vector<std::uint8_t> payload(16);
    EXPECT_THROW(make_codec(parse_spec("none"), {4}, {})->decode({payload.data()}, out.data()), acc::Error);
    EXPECT_THROW(make_codec(parse_spec("signsgd"), {4}, {})->decode_sum(payload.data(), 1, out.data(), nullptr),
                 acc::Error);
}

TEST(Random, OneSplitMix64) {
    // Reference values of SplitMix64 seeded with 0 (Vigna's splitmix64.c).
    acc::SplitMix64 g(0);
    EXPECT_EQ(g.next(), 0xe220a8397b1dcdafull);
    EXPECT_EQ(g.next(), 0x6e789e6aa1b965f4ull);
    EXPECT_EQ(k::mix64(0), 0xe220a8397b1dcdafull);
    k::Rng rng(0);
    EXPECT_EQ(rng.next(), 0xe220a8397b1dcdafull);
}

// --------------------------------------------------------------------- shapes

TEST(Shapes, PresetsHaveTheirModelsParameterCounts) {
    struct Expected {
        const char* name;
        size_t tensors;
        std::int64_t values;
    };
    // Counts of the PyTorch models (torchvision's resnet50 and vgg19, Hugging Face's
    // bert-base-uncased BertModel and gpt2-medium GPT2Model, the CIFAR ResNet-18 of
    // examples/synth_grads.py).
    for (auto e : {Expected{"resnet18", 62, 11173962}, Expected{"resnet50", 161, 25557032},
                   Expected{"vgg19", 38, 143667240}, Expected{"bert-base", 199, 109482240},
                   Expected{"lstm", 14, 31819578}, Expected{"gpt2-medium", 292, 354823168}}) {
        auto shapes = preset_shapes(e.name);
        std::int64_t values = 0;
        std::set<std::string> names;
        for (const auto& t : shapes) {
            values += t.numel();
            names.insert(t.name);
        }
        EXPECT_EQ(shapes.size(), e.tensors) << e.name;
        EXPECT_EQ(values, e.values) << e.name;
        EXPECT_EQ(names.size(), shapes.size()) << e.name << ": names are not unique";
    }
    auto r18 = preset_shapes("resnet18");
    EXPECT_EQ(r18[0].name, "conv1.weight");
    EXPECT_EQ(r18[0].shape, (std::vector<std::int64_t>{64, 3, 3, 3}));
    EXPECT_EQ(r18.back().name, "linear.bias");
    auto r50 = preset_shapes("resnet50");
    EXPECT_EQ(r50[12].name, "layer1.0.downsample.0.weight");
    EXPECT_EQ(r50[12].shape, (std::vector<std::int64_t>{256, 64, 1, 1}));
    EXPECT_EQ(preset_shapes("vgg19")[32].name, "classifier.0.weight");
    EXPECT_THROW(preset_shapes("alexnet"), acc::UsageError);
}

namespace {

std::string write_text(const acc::test::TempDir& dir, const std::string& name, const std::string& text) {
    std::string path = dir.file(name);
    std::ofstream(path) << text;
    return path;
}

}  // namespace

TEST(Shapes, FileFormat) {
    acc::test::TempDir dir;
    auto shapes = read_shapes_file(write_text(dir, "ok.txt", "# a model\n\nfc.weight 10x512\nfc.bias 10\n  scale scalar\n"));
    ASSERT_EQ(shapes.size(), 3u);
    EXPECT_EQ(shapes[0].shape, (std::vector<std::int64_t>{10, 512}));
    EXPECT_EQ(shapes[1].shape, (std::vector<std::int64_t>{10}));
    EXPECT_TRUE(shapes[2].shape.empty());
    EXPECT_EQ(shapes[2].numel(), 1);
    auto message = [&dir](const std::string& text) {
        try {
            read_shapes_file(write_text(dir, "bad.txt", text));
        } catch (const acc::FileError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    EXPECT_NE(message("a 3\nb\n").find("bad.txt: line 2: 'b' has no shape"), std::string::npos);
    EXPECT_NE(message("a 3x0\n").find("line 1: shape '3x0' of 'a' must be positive whole numbers"), std::string::npos);
    EXPECT_NE(message("a 3x\n").find("line 1"), std::string::npos);
    EXPECT_NE(message("a x3\n").find("line 1"), std::string::npos);
    EXPECT_NE(message("a 3 4\n").find("line 1: unexpected '4'"), std::string::npos);
    EXPECT_NE(message("a 3\na 4\n").find("line 2: 'a' appears twice"), std::string::npos);
    EXPECT_NE(message("# nothing\n").find("lists no tensor"), std::string::npos);
    EXPECT_THROW(read_shapes_file(dir.file("missing.txt")), acc::FileError);
}
