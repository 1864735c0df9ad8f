// Timing statistics, the alpha-beta fit (hand-computed cases) and the
// nccl-tests bandwidth definitions.
#include "base/error.hpp"
#include "perf/fit.hpp"
#include "perf/stats.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace acc::perf;

TEST(Stats, OddCountMedianIsTheMiddleValue) {
    TimingStats s = summarize({5, 1, 4, 2, 3});
    EXPECT_EQ(s.count, 5u);
    EXPECT_DOUBLE_EQ(s.min, 1);
    EXPECT_DOUBLE_EQ(s.median, 3);
    EXPECT_DOUBLE_EQ(s.max, 5);
    EXPECT_DOUBLE_EQ(s.mean, 3);
}

TEST(Stats, EvenCountMedianIsTheMeanOfTheTwoMiddleValues) {
    EXPECT_DOUBLE_EQ(median({4, 1, 10, 2}), 3);  // sorted 1 2 4 10
    EXPECT_DOUBLE_EQ(median({7}), 7);
    TimingStats s = summarize({0.25, 0.75});
    EXPECT_DOUBLE_EQ(s.median, 0.5);
    EXPECT_DOUBLE_EQ(s.mean, 0.5);
    // Three equal samples whose sum, rounded, divided by 3 is an ulp above them: the mean
    // stays within min and max, as the comm-profile file's readers require.
    const double t = 0.0008474337369372327;
    ASSERT_GT((t + t + t) / 3, t);
    const TimingStats equal = summarize({t, t, t});
    EXPECT_EQ(equal.mean, t);
    EXPECT_LE(equal.mean, equal.max);
}

TEST(Stats, RefusesEmptyAndNonFiniteSamples) {
    EXPECT_THROW(summarize({}), acc::Error);
    EXPECT_THROW(median({}), acc::Error);
    EXPECT_THROW(summarize({1, std::nan("")}), acc::Error);
    EXPECT_THROW(summarize({1, std::numeric_limits<double>::infinity()}), acc::Error);
}

TEST(Fit, RecoversAnExactLine) {
    // 20 us latency, 2.5 GB/s.
    std::vector<double> bytes{8, 1024, 65536, 1 << 20, 16 << 20}, seconds;
    for (double s : bytes) seconds.push_back(20e-6 + s / 2.5e9);
    AlphaBetaFit f = fit_alpha_beta(bytes, seconds);
    EXPECT_NEAR(f.alpha, 20e-6, 1e-12);
    EXPECT_NEAR(f.bandwidth, 2.5e9, 1e-3);
    EXPECT_NEAR(f.r2, 1, 1e-12);
    EXPECT_NEAR(f.rms_relative_residual, 0, 1e-9);
    EXPECT_NEAR(f.max_relative_residual, 0, 1e-9);
    EXPECT_EQ(f.points, 5u);
    EXPECT_NEAR(f.predict(1e6), 20e-6 + 1e6 / 2.5e9, 1e-15);
}

TEST(Fit, HandComputedWeightedCase) {
    // Points (1, 2), (2, 2), (3, 4) with weights 1/t^2 = 1/4, 1/4, 1/16.
    // Normal equations: [0.5625 0.9375; 0.9375 1.8125] [a; b] = [1.25; 2.25]
    // give a = 10/9, b = 2/3, so B = 3/2. Relative residuals 1/9, -2/9, 2/9.
    AlphaBetaFit f = fit_alpha_beta({1, 2, 3}, {2, 2, 4});
    EXPECT_NEAR(f.alpha, 10.0 / 9, 1e-12);
    EXPECT_NEAR(f.bandwidth, 1.5, 1e-12);
    EXPECT_NEAR(f.max_relative_residual, 2.0 / 9, 1e-12);
    EXPECT_NEAR(f.rms_relative_residual, std::sqrt(1.0 / 27), 1e-12);
    // Weighted mean t = 1.25 / 0.5625 = 20/9; SS_tot = 0.25(2/9)^2 * 2 + (1/16)(16/9)^2 = 2/9;
    // SS_res = 0.25(2/9)^2 + 0.25(4/9)^2 + (1/16)(8/9)^2 = 1/9; R^2 = 1 - (1/9)/(2/9) = 0.5.
    EXPECT_NEAR(f.r2, 0.5, 1e-12);
}

TEST(Fit, SmallMessagesCountAsMuchAsLargeOnes) {
    // 50 us latency and 1 GB/s, but the largest message is 10% slow. An
    // unweighted fit would let that one point drag alpha below zero; the
    // relative weighting keeps the latency close to 50 us.
    std::vector<double> bytes{64, 256, 1024, 4096, 16384, 65536, 1 << 20, 16 << 20, 64 << 20}, seconds;
    for (double s : bytes) seconds.push_back(50e-6 + s / 1e9);
    seconds.back() *= 1.10;
    AlphaBetaFit f = fit_alpha_beta(bytes, seconds);
    EXPECT_NEAR(f.alpha, 50e-6, 5e-6);
    EXPECT_NEAR(f.bandwidth, 1e9, 0.15e9);
    EXPECT_LT(f.max_relative_residual, 0.11);
}

TEST(Fit, NegativeLatencyIsClampedToZero) {
    // Time proportional to size but slightly super-linear: the free fit has alpha < 0.
    AlphaBetaFit f = fit_alpha_beta({1000, 2000, 3000}, {1.0, 2.1, 3.3});
    EXPECT_EQ(f.alpha, 0);
    // Through the origin: beta = sum w S t / sum w S^2 with w = 1/t^2.
    double w[] = {1 / 1.0, 1 / (2.1 * 2.1), 1 / (3.3 * 3.3)};
    double sst = w[0] * 1000 * 1.0 + w[1] * 2000 * 2.1 + w[2] * 3000 * 3.3;
    double sss = w[0] * 1e6 + w[1] * 4e6 + w[2] * 9e6;
    EXPECT_NEAR(f.bandwidth, sss / sst, 1e-9);
}

TEST(Fit, TimeThatDoesNotGrowGivesAnUnboundedBandwidth) {
    AlphaBetaFit f = fit_alpha_beta({8, 1024, 4096}, {3e-5, 2e-5, 2e-5});
    EXPECT_TRUE(std::isinf(f.bandwidth));
    // Weighted mean of the times: sum(1/t) / sum(1/t^2).
    double expected = (1 / 3e-5 + 2 / 2e-5) / (1 / 9e-10 + 2 / 4e-10);
    EXPECT_NEAR(f.alpha, expected, 1e-12);
    EXPECT_DOUBLE_EQ(f.predict(1e9), f.alpha);
}

TEST(Fit, RefusesBadInput) {
    EXPECT_THROW(fit_alpha_beta({8}, {1e-5}), acc::Error);
    EXPECT_THROW(fit_alpha_beta({8, 8, 8}, {1e-5, 2e-5, 3e-5}), acc::Error);
    EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-5}), acc::Error);
    EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-5, 0}), acc::Error);
    EXPECT_THROW(fit_alpha_beta({8, 16}, {1e-5, std::nan("")}), acc::Error);
    EXPECT_THROW(fit_alpha_beta({-8, 16}, {1e-5, 2e-5}), acc::Error);
    try {
        fit_alpha_beta({8, 8}, {1e-5, 2e-5});
        FAIL();
    } catch (const acc::Error& e) {
        EXPECT_STREQ(e.what(), "alpha-beta fit: needs at least two different message sizes");
    }
}

// A token bucket: the first 32 KiB of a message at the wire's 1 GB/s, the rest at the
// 12.5 MB/s it sustains, after a latency of 200 us.
namespace {
double token_bucket_seconds(double bytes) {
    const double burst = 32768;
    return 200e-6 + std::min(bytes, burst) / 1e9 + std::max(0.0, bytes - burst) / 12.5e6;
}
}  // namespace

TEST(Fit, BurstFoolsTheFitOverEverySizeButNotTheFitPastIt) {
    std::vector<double> bytes, seconds;
    for (double s = 4096; s <= 8 << 20; s *= 2) {
        bytes.push_back(s);
        seconds.push_back(token_bucket_seconds(s));
    }
    const AlphaBetaFit all = fit_alpha_beta(bytes, seconds);
    EXPECT_GT(all.bandwidth, 1.15 * 12.5e6);  // the burst's small messages pull it up
    EXPECT_EQ(burst_end(bytes, seconds), 131072);  // up to 128 KiB ran > 1.25x the largest's algbw

    const AlphaBetaFit past = fit_past_burst(bytes, seconds, 256 << 10);
    EXPECT_EQ(past.points, 6u);  // 256 KiB .. 8 MiB
    EXPECT_EQ(past.latency_points, 6u);
    EXPECT_NEAR(past.bandwidth, 12.5e6, 0.01 * 12.5e6);
    EXPECT_GT(past.alpha, 100e-6);  // the latency, not 0
    EXPECT_LT(past.alpha, 300e-6);
    // The burst's 32 KiB that went free is not in the model: 256 KiB is predicted 14 % too
    // slow, 1 MiB and up within 5 %.
    EXPECT_LT(past.max_relative_residual, 0.15);
    for (double s : {1024.0 * 1024, 4.0 * 1024 * 1024})
        EXPECT_NEAR(past.predict(s), token_bucket_seconds(s), 0.05 * token_bucket_seconds(s));

    // From the smallest size on is the plain fit; past every size but one is refused.
    const AlphaBetaFit same = fit_past_burst(bytes, seconds, 4096);
    EXPECT_EQ(same.alpha, all.alpha);
    EXPECT_EQ(same.bandwidth, all.bandwidth);
    EXPECT_EQ(same.latency_points, 0u);
    EXPECT_THROW(fit_past_burst(bytes, seconds, 8 << 20), acc::Error);
}

TEST(Fit, LatencyPastABurstIsTheMedianOfTheSmallSizesLatencyTimes) {
    // Small calls whose time is bimodal: each size's median sits on a mode (200 us or
    // 4 ms), its mean between them. Given the means, alpha is their median; the
    // bandwidth still comes from `seconds` past the burst.
    const std::vector<double> bytes = {8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20};
    std::vector<double> medians = {200e-6, 4e-3, 200e-6, 4e-3, 200e-6, 0, 0, 0};
    const std::vector<double> means = {1.1e-3, 2.0e-3, 1.3e-3, 2.5e-3, 1.6e-3, 1, 1, 1};
    for (size_t i = 5; i < bytes.size(); ++i) medians[i] = 1e-3 + bytes[i] / 12.5e6;
    const AlphaBetaFit by_median = fit_past_burst(bytes, medians, 256 << 10);
    EXPECT_DOUBLE_EQ(by_median.alpha, 200e-6);  // three of five sizes on the fast mode
    const AlphaBetaFit by_mean = fit_past_burst(bytes, medians, 256 << 10, means);
    EXPECT_DOUBLE_EQ(by_mean.alpha, 1.6e-3);  // the middle of 1.1, 1.3, 1.6, 2.0, 2.5 ms
    EXPECT_EQ(by_mean.latency_points, 5u);
    EXPECT_DOUBLE_EQ(by_mean.bandwidth, by_median.bandwidth);  // the means past the burst are not used
    EXPECT_NEAR(by_mean.bandwidth, 12.5e6, 1e-6 * 12.5e6);
    EXPECT_THROW(fit_past_burst(bytes, medians, 256 << 10, {1e-3}), acc::Error);
    std::vector<double> broken = means;
    broken[1] = std::nan("");
    EXPECT_THROW(fit_past_burst(bytes, medians, 256 << 10, broken), acc::Error);
}

TEST(Fit, NoBurstOnALinkWhoseLargestMessagesAreFastest) {
    std::vector<double> bytes, seconds;
    for (double s = 8; s <= 1 << 20; s *= 4) {
        bytes.push_back(s);
        seconds.push_back(50e-6 + s / 1e9);
    }
    EXPECT_EQ(burst_end(bytes, seconds), 0);
}

TEST(Bandwidth, BusFactorsAreNcclTests) {
    EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 2), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 4), 1.5);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 8), 1.75);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::allgather, 4), 0.75);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::reduce_scatter, 8), 0.875);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::broadcast, 16), 1.0);
    EXPECT_DOUBLE_EQ(bus_factor(Collective::allreduce, 1), 0.0);
    EXPECT_DOUBLE_EQ(algbw(4e9, 2), 2e9);
    EXPECT_THROW(bus_factor(Collective::allreduce, 0), acc::Error);
}

TEST(Bandwidth, CollectiveNamesRoundTrip) {
    for (Collective c : all_collectives()) EXPECT_EQ(parse_collective(collective_name(c)), c);
    try {
        parse_collective("alltoall");
        FAIL();
    } catch (const acc::UsageError& e) {
        EXPECT_STREQ(e.what(),
                     "'alltoall' is not a collective; valid ones are allreduce, allgather, broadcast, reduce_scatter");
    }
}
