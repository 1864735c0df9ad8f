// What-if pricing: a plan's step times, the break-even bandwidth and the growth of an
// allgather's cost with the world size, against formulas worked out here by hand.
#include "base/error.hpp"
#include "perf/what_if.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace acc::perf;

namespace {

PlanStep compressed(std::vector<Transfer> transfers, double encode = 0, double decode = 0) {
    PlanStep s;
    s.uncompressed = false;
    s.transfers = std::move(transfers);
    s.encode_seconds = encode;
    s.decode_seconds = decode;
    return s;
}

PlanStep dense(std::vector<double> tensor_bytes) {
    PlanStep s;
    s.tensor_bytes = std::move(tensor_bytes);
    return s;
}

Link link_of(double alpha, double bandwidth) { return Link{Network{alpha, bandwidth}, Network{alpha, bandwidth}}; }

}  // namespace

TEST(WhatIf, CompressedStepIsComputeCodecAndItsCollectives) {
    const double alpha = 1e-4, bandwidth = 1e8;
    Compute compute;
    compute.seconds = 0.05;
    const PlanStep step =
        compressed({{Collective::allreduce, 1000}, {Collective::allgather, 400}}, 0.001, 0.002);
    // W = 4: allreduce 2 (W-1) alpha + 2 (W-1)/W m / B, allgather (W-1) alpha + (W-1) m / B.
    const double expected = 0.05 + 0.001 + 0.002 + (6 * alpha + 1.5 * 1000 / bandwidth) + (3 * alpha + 3 * 400 / bandwidth);
    EXPECT_NEAR(step_seconds(step, link_of(alpha, bandwidth), 4, compute), expected, 1e-15);
    EXPECT_NEAR(step_seconds(step, link_of(alpha, bandwidth), 1, compute), 0.053, 1e-15);
}

TEST(WhatIf, UncompressedStepIsDdpsBuckets) {
    const double alpha = 1e-4, bandwidth = 1e8;
    Compute compute;
    compute.seconds = 0.03;  // forward 0.01 s, backward 0.02 s
    // Two tensors of 2 MB. The last in model order is ready halfway through the backward
    // pass (0.02 s) and fills the 1 MiB first bucket: f1 = 0.02 + T_AR(2 MB); the other
    // is ready at 0.03 s: f2 = max(f1, 0.03) + T_AR(2 MB). W = 4: T_AR = 6 alpha + 1.5 m / B.
    const double t_ar = 6 * alpha + 1.5 * 2e6 / bandwidth;
    const double f1 = 0.02 + t_ar, f2 = std::max(f1, 0.03) + t_ar;
    EXPECT_NEAR(step_seconds(dense({2e6, 2e6}), link_of(alpha, bandwidth), 4, compute), f2, 1e-15);
}

TEST(WhatIf, PlanSecondsWeighsEachPartBySteps) {
    Compute compute;
    compute.seconds = 0.01;
    const Link link = link_of(0, 1e9);
    const std::vector<PlanPart> plan = {{100, compressed({{Collective::allreduce, 1e6}})},
                                        {50, compressed({{Collective::allgather, 1e5}}, 0.002)}};
    const double first = 0.01 + 2 * 7.0 / 8 * 1e6 / 1e9, second = 0.01 + 0.002 + 7 * 1e5 / 1e9;
    EXPECT_NEAR(plan_seconds(plan, link, 8, compute), 100 * first + 50 * second, 1e-12);
    const auto base = uncompressed_plan(plan, {4e7});
    ASSERT_EQ(base.size(), 2u);
    EXPECT_EQ(base[1].steps, 50);
    EXPECT_TRUE(base[1].step.uncompressed);
    // One 40 MB bucket, ready at the end of the backward pass.
    EXPECT_NEAR(plan_seconds(base, link, 8, compute), 150 * (0.01 + 2 * 7.0 / 8 * 4e7 / 1e9), 1e-12);
}

TEST(WhatIf, LinkAtAnotherBandwidthScalesAllgathersAlike) {
    const Link link{Network{1e-5, 1e9}, Network{2e-5, 5e8}};
    const Link at = link.at_bandwidth(4e9);
    EXPECT_EQ(at.allreduce.alpha, 1e-5);
    EXPECT_EQ(at.allreduce.bandwidth, 4e9);
    EXPECT_EQ(at.allgather.alpha, 2e-5);
    EXPECT_DOUBLE_EQ(at.allgather.bandwidth, 2e9);
}

TEST(WhatIf, BreakEvenBandwidthIsWhereTheTimesCross) {
    // DDP's one bucket of M bytes is ready at the end of the backward pass: T + T_AR(M).
    // The plan: T + e + T_AR(m). Equal where e = 2 (W-1)/W (M - m) / B, so
    // B* = 2 (W-1)/W (M - m) / e; below it the bytes saved outweigh the encoding.
    const double alpha = 50e-6, M = 4e7, m = 4e5, e = 0.01;
    const int W = 8;
    Compute compute;
    compute.seconds = 0.1;
    const std::vector<PlanPart> plan = {{1, compressed({{Collective::allreduce, m}}, e)}};
    const auto base = uncompressed_plan(plan, {M});
    const BreakEven be = break_even(plan, base, link_of(alpha, 1e9), W, compute);
    const double expected = 2.0 * (W - 1) / W * (M - m) / e;
    ASSERT_EQ(be.bandwidths.size(), 1u);
    EXPECT_NEAR(be.bandwidths[0] / expected, 1, 1e-9);
    EXPECT_TRUE(be.pays_at_low_bandwidth);
    // The predicted times cross there.
    auto time = [&](const std::vector<PlanPart>& p, double bandwidth) {
        return plan_seconds(p, link_of(alpha, 1e9).at_bandwidth(bandwidth), W, compute);
    };
    EXPECT_LT(time(plan, expected * 0.99), time(base, expected * 0.99));
    EXPECT_GT(time(plan, expected * 1.01), time(base, expected * 1.01));
    EXPECT_NEAR(time(plan, be.bandwidths[0]) / time(base, be.bandwidths[0]), 1, 1e-9);
    EXPECT_THROW(break_even(plan, base, link_of(alpha, 1e9), W, compute, 0, 1e9), acc::UsageError);
}

TEST(WhatIf, AllgathersStopPayingAsWorkersGrow) {
    // A sparse level's allgather of m bytes per worker against DDP's allreduce of M: with
    // alpha = 0 and no codec time, (W-1) m / B against 2 (W-1)/W M / B: the plan pays at
    // every bandwidth while W m < 2 M (here W < 20), and at none from there on.
    const double M = 4e7, m = 4e6;
    Compute compute;
    compute.seconds = 0.05;
    const std::vector<PlanPart> plan = {{1, compressed({{Collective::allgather, m}})}};
    const auto base = uncompressed_plan(plan, {M});
    const Link link = link_of(0, 1.25e9);
    double previous = INFINITY;
    for (int W = 8; W <= 1024; W *= 2) {
        const double speedup = plan_seconds(base, link, W, compute) / plan_seconds(plan, link, W, compute);
        EXPECT_LT(speedup, previous) << W;
        previous = speedup;
        const BreakEven be = break_even(plan, base, link, W, compute);
        EXPECT_TRUE(be.bandwidths.empty()) << W;
        EXPECT_EQ(be.pays_at_low_bandwidth, W * m < 2 * M) << W;
    }
    EXPECT_LT(previous, 0.1);  // 1024 workers: far slower than DDP
    // An allreduce plan of the same bytes keeps its speedup as workers grow: both sides'
    // ring terms grow alike, 2 (W-1)/W, from 1.75 at W = 8 to 2 at W = 1024.
    const std::vector<PlanPart> reduced = {{1, compressed({{Collective::allreduce, m}})}};
    const double at8 = plan_seconds(base, link, 8, compute) / plan_seconds(reduced, link, 8, compute);
    const double at1024 = plan_seconds(base, link, 1024, compute) / plan_seconds(reduced, link, 1024, compute);
    EXPECT_NEAR(at8, (0.05 + 1.75 * M / 1.25e9) / (0.05 + 1.75 * m / 1.25e9), 1e-12);
    EXPECT_GE(at1024, at8);
}
