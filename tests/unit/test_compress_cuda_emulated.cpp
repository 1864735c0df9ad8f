// The CUDA top-k selection's kernels (lib/compress/cuda/topk_select.cuh), run on the CPU
// (cuda_emulation.hpp: each block's threads as fibers) against the host codec: the same payload byte for byte
// and the same residual, ties, NaN and infinity included. On a GPU, gpu.unit checks the
// same kernels compiled by nvcc.
#include "cuda_emulation.hpp"

#include "compress/cuda/topk_select.cuh"

#include "compress/codecs.hpp"
#include "compress/spec.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace topk = acc::compress::cuda::topk;

struct Selected {
    std::vector<std::uint8_t> payload;  // k values, then k indices (int32), as the codec's
    std::vector<float> residual;
    bool ok = false;
};

Selected select_emulated(std::vector<float> x, std::int64_t k, bool clear) {
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<std::uint32_t> scratch(static_cast<size_t>(topk::scratch_bytes(n) / 4), 0xdeadbeefu);
    std::vector<float> values(static_cast<size_t>(k), -1.0f);
    std::vector<std::int32_t> indices(static_cast<size_t>(k), -1);
    bool ok = false;
    topk::select_top_k([](unsigned blocks, int threads, auto kernel,
                          auto... arguments) { acc::test::cuda_emulation::launch(blocks, threads, kernel, arguments...); },
                       [](void* p, std::int64_t bytes) { std::memset(p, 0, static_cast<size_t>(bytes)); },
                       [](bool* flag) { *flag = true; }, x.data(), n, k, clear, values.data(), indices.data(),
                       scratch.data(), &ok);
    Selected s;
    s.payload.resize(static_cast<size_t>(8 * k));
    std::memcpy(s.payload.data(), values.data(), static_cast<size_t>(4 * k));
    std::memcpy(s.payload.data() + 4 * k, indices.data(), static_cast<size_t>(4 * k));
    s.residual = std::move(x);
    s.ok = ok;
    return s;
}

// Bit patterns, so that NaN equals NaN and -0 differs from 0.
std::vector<std::uint32_t> bits(const std::vector<float>& v) {
    std::vector<std::uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), 4 * v.size());
    return b;
}

void expect_as_host(const std::vector<float>& x, const std::string& level, const std::string& what) {
    const auto n = static_cast<std::int64_t>(x.size());
    auto host = acc::compress::make_codec(acc::compress::parse_spec(level), {n}, acc::compress::CodecOptions());
    const std::int64_t k = host->buffer_bytes() / 8;
    ASSERT_GE(k, 1) << what;
    for (const bool clear : {false, true}) {
        const std::string case_ = what + ", " + level + (clear ? ", residual kept" : "");
        std::vector<float> residual = x;
        std::vector<std::uint8_t> expected(static_cast<size_t>(host->buffer_bytes()));
        const bool host_ok = host->encode(residual.data(), clear, 7, expected.data());
        const Selected got = select_emulated(x, k, clear);
        EXPECT_EQ(host_ok, got.ok) << case_;
        if (!host_ok) continue;  // the host stops at the first NaN it meets
        EXPECT_EQ(expected, got.payload) << case_;
        EXPECT_EQ(bits(residual), bits(got.residual)) << case_;
    }
}

TEST(CudaTopkEmulated, ChoosesWhatTheHostCodecChooses) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    // One value to several tiles (a tile is 4,096 values), the last one partial.
    for (const std::int64_t n : {1, 2, 33, 4096, 4097, 20000}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (auto& v : x) v = normal(rng);
        for (const std::string level : {"topk:0.001", "topk:0.01", "topk:0.3", "topk:1"})
            expect_as_host(x, level, std::to_string(n) + " normal values");
    }
}

TEST(CudaTopkEmulated, TakesTiesFirstByPosition) {
    // Many equal magnitudes of both signs around the k-th largest, zeros of both signs,
    // subnormals, and all values equal: which of the equal ones go is the host's choice.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> small(-3, 3);
    const auto n = std::int64_t{3} * topk::kTile + 123;
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = static_cast<float>(small(rng));
    for (const std::string level : {"topk:0.01", "topk:0.2", "topk:0.5"})
        expect_as_host(x, level, "values -3..3");
    for (auto& v : x) v = small(rng) > 0 ? std::numeric_limits<float>::denorm_min() * 3 : -0.0f;
    expect_as_host(x, "topk:0.1", "subnormals and zeros");
    std::vector<float> same(5000, -2.5f);
    expect_as_host(same, "topk:0.1", "all equal");
    std::vector<float> zeros(5000, 0.0f);
    expect_as_host(zeros, "topk:0.01", "all zero");
}

TEST(CudaTopkEmulated, FlagsNaNAndInfinityWhereverTheyLie) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::int64_t n = 9000;
    for (const float bad : {nan, -nan, inf, -inf})
        for (const std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
            std::vector<float> x(static_cast<size_t>(n));
            for (std::int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::sin(static_cast<float>(i)) * 100.0f;
            x[static_cast<size_t>(at)] = bad;
            const std::string what = std::to_string(bad) + " at " + std::to_string(at);
            const Selected got = select_emulated(x, 90, false);
            EXPECT_FALSE(got.ok) << what;
            // It is among the chosen: a NaN's magnitude counts as the largest.
            std::vector<std::int32_t> indices(90);
            std::memcpy(indices.data(), got.payload.data() + 4 * 90, 4 * 90);
            EXPECT_NE(std::find(indices.begin(), indices.end(), static_cast<std::int32_t>(at)), indices.end()) << what;
            x[static_cast<size_t>(at)] = 1.0f;
            EXPECT_TRUE(select_emulated(x, 90, false).ok) << what << " replaced by 1";
        }
}

}  // namespace
