// The automatic mode's planner (lib/plan/auto_plan): its choice against a brute
// force over every level of every parameter (the fastest plan within the budget,
// and the least error within the margin of it) under a prescribed link and compute
// time, the guard on a fast and a slow link, the drift test that triggers a new
// measurement, and its refusals.
#include "plan/auto_plan.hpp"
#include "base/error.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace acc::plan;
using acc::compress::parse_spec;
using acc::compress::Spec;
using acc::io::Parameter;

namespace {

std::vector<Spec> specs(const std::vector<std::string>& texts) {
    std::vector<Spec> out;
    for (const auto& t : texts) out.push_back(parse_spec(t));
    return out;
}

// A profile drawn at random: a descending spectrum whose squares sum to norm^2, and
// Top-k tails that shrink as more entries are kept (0 when all are).
LayerProfile random_profile(const Parameter& p, std::mt19937& rng) {
    std::uniform_real_distribution<double> u(0.05, 1.0);
    LayerProfile profile;
    if (p.is_matrix()) {
        const std::int64_t rows = p.shape[0], cols = p.numel() / rows;
        double s = u(rng) * 10;
        for (std::int64_t i = 0; i < std::min(rows, cols); ++i) {
            profile.spectrum.push_back(s);
            s *= u(rng);
        }
    }
    double sq = 0;
    for (double s : profile.spectrum) sq += s * s;
    profile.norm = profile.spectrum.empty() ? u(rng) : std::sqrt(sq);
    double tail = 1.0;
    for (size_t i = 0; i < acc::regime::kTopkFractions.size(); ++i) {
        tail *= u(rng);
        profile.tail.push_back(i + 1 == acc::regime::kTopkFractions.size() ? 0.0 : tail);
    }
    return profile;
}

// The residual norm written out from the definitions, apart from the library's.
double residual(const Spec& spec, const Parameter& p, const LayerProfile& profile) {
    if (spec.name == "none") return 0;
    if (spec.name == "powersgd") {
        const auto rank = static_cast<size_t>(spec.parameter);
        const std::int64_t rows = p.shape[0], cols = p.numel() / rows;
        const std::int64_t r = std::min<std::int64_t>({static_cast<std::int64_t>(rank), rows, cols});
        // PowerSGD sends a matrix whole unless its factors take under half its size.
        if (2 * r * (rows + cols) >= rows * cols) return 0;
        double sum = 0;
        for (size_t i = rank; i < profile.spectrum.size(); ++i) sum += profile.spectrum[i] * profile.spectrum[i];
        return std::sqrt(sum);
    }
    for (size_t i = 0; i < acc::regime::kTopkFractions.size(); ++i)
        if (acc::regime::kTopkFractions[i] == spec.parameter) return profile.norm * std::sqrt(profile.tail[i]);
    ADD_FAILURE() << "no fraction " << spec.parameter;
    return 0;
}

AutoInputs inputs_for(std::mt19937& rng, double bandwidth, double alpha) {
    AutoInputs in;
    in.parameters = {{"a.weight", {24, 16}}, {"a.bias", {24}}, {"b.weight", {40, 24}}, {"c.weight", {12, 40}}};
    in.candidates = specs({"none", "powersgd:1", "powersgd:2", "powersgd:4", "topk:0.01", "topk:0.1"});
    in.low = parse_spec("powersgd:4");
    in.high = parse_spec("powersgd:1");
    std::bernoulli_distribution coin(0.5);
    for (const auto& p : in.parameters) {
        in.critical.push_back(coin(rng) ? 1 : 0);
        in.profile.push_back(random_profile(p, rng));
    }
    in.link.world = 8;
    in.link.allreduce = acc::perf::Network(alpha, bandwidth);
    in.link.allgather = acc::perf::Network(alpha * 1.5, bandwidth * 0.8);
    in.compute.seconds = 0.002;
    std::uniform_real_distribution<double> codec(1e-5, 3e-4);
    in.codec_seconds.assign(in.candidates.size(), std::vector<double>(in.parameters.size(), 0));
    for (size_t c = 1; c < in.candidates.size(); ++c)
        for (auto& s : in.codec_seconds[c]) s = codec(rng);
    return in;
}

// The slow link's model with PowerSGD's ranks alone, nothing critical (the budget is
// rank 1's error on every matrix), no codec time.
AutoInputs powersgd_ranks_on_a_slow_link() {
    std::mt19937 rng(3);
    AutoInputs in = inputs_for(rng, 1e5, 1e-5);
    in.candidates = specs({"none", "powersgd:1", "powersgd:2", "powersgd:4"});
    in.low = parse_spec("powersgd:2");
    in.high = parse_spec("powersgd:1");
    in.critical.assign(4, 0);
    in.codec_seconds.clear();
    return in;
}

struct Best {
    double seconds = std::numeric_limits<double>::infinity();
    double error = std::numeric_limits<double>::infinity();
    std::vector<std::int32_t> level;
};

struct BruteForce {
    Best fastest;   // the fastest plan that compresses something within the budget
    Best accurate;  // the least error among the plans within the margin of it
};

// Every combination of levels on the matrices; vectors stay at none.
BruteForce brute_force(const AutoInputs& in) {
    std::vector<size_t> matrices;
    for (size_t p = 0; p < in.parameters.size(); ++p)
        if (in.parameters[p].is_matrix()) matrices.push_back(p);
    double budget = 0;
    for (size_t p : matrices)
        budget += residual(in.critical[p] ? in.low : in.high, in.parameters[p], in.profile[p]);
    const size_t C = in.candidates.size();
    size_t combos = 1;
    for (size_t i = 0; i < matrices.size(); ++i) combos *= C;
    std::vector<Best> compressed;
    BruteForce out;
    for (size_t k = 0; k < combos; ++k) {
        Best plan{0, 0, std::vector<std::int32_t>(in.parameters.size(), 0)};
        size_t rest = k;
        bool compresses = false;
        for (size_t p : matrices) {
            plan.level[p] = static_cast<std::int32_t>(rest % C);
            rest /= C;
            plan.error += residual(in.candidates[static_cast<size_t>(plan.level[p])], in.parameters[p], in.profile[p]);
            compresses = compresses || plan.level[p] != 0;
        }
        if (!compresses) continue;
        plan.seconds = step_seconds(in, plan.level);
        compressed.push_back(plan);
        if (plan.error <= budget * (1 + 1e-12) && plan.seconds < out.fastest.seconds) out.fastest = plan;
    }
    const double bound = out.fastest.seconds / (1 - in.margin);
    for (const Best& plan : compressed)
        if (plan.seconds <= bound && (plan.error < out.accurate.error ||
                                      (plan.error == out.accurate.error && plan.seconds < out.accurate.seconds)))
            out.accurate = plan;
    return out;
}

}  // namespace

TEST(AutoPlan, ChoosesTheLeastErrorWithinTheMarginOfTheFastestPlanAsABruteForceDoes) {
    std::mt19937 rng(7);
    int paying = 0, refused = 0, accurate = 0;
    for (int trial = 0; trial < 40; ++trial) {
        // From a slow link (compression pays) to a fast one (it does not).
        const double bandwidth = std::pow(10.0, 5 + (trial % 8) * 0.5);
        AutoInputs in = inputs_for(rng, bandwidth, 2e-5);
        in.compute.seconds = (trial % 3 == 0) ? 0.05 : 0.002;  // some where compute bounds the step
        if (trial % 4 == 1) in.link.burst_seconds = 0.5 * in.compute.seconds;  // a token bucket's burst
        const BruteForce best = brute_force(in);
        const AutoPlan plan = plan_auto(in);
        ASSERT_TRUE(std::isfinite(best.fastest.seconds));
        EXPECT_NEAR(plan.compressed_seconds, best.fastest.seconds, 1e-12 * best.fastest.seconds) << "trial " << trial;
        // The uncompressed step: DDP's schedule on the allreduce's ring.
        EXPECT_DOUBLE_EQ(plan.uncompressed_seconds, step_seconds(in, std::vector<std::int32_t>(4, 0)));
        const bool pays = best.fastest.seconds < (1 - in.margin) * plan.uncompressed_seconds;
        EXPECT_EQ(plan.pays, pays) << "trial " << trial;
        if (pays) {
            ++paying;
            // The least-error plan, unless it would not pass the guard.
            const Best& expected = best.accurate.seconds < (1 - in.margin) * plan.uncompressed_seconds
                                       ? best.accurate
                                       : best.fastest;
            EXPECT_EQ(plan.level, expected.level) << "trial " << trial;
            EXPECT_DOUBLE_EQ(plan.seconds, expected.seconds);
            EXPECT_NEAR(plan.error, expected.error, 1e-12 * expected.error);
            if (plan.level != best.fastest.level) ++accurate;
        } else {
            ++refused;
            EXPECT_EQ(plan.level, std::vector<std::int32_t>(4, 0));
            EXPECT_DOUBLE_EQ(plan.seconds, plan.uncompressed_seconds);
        }
    }
    // Both sides of the guard were exercised, and plans of less error than the fastest.
    EXPECT_GT(paying, 5);
    EXPECT_GT(refused, 5);
    EXPECT_GT(accurate, 2);
}

TEST(AutoPlan, OnAFastLinkEveryStepIsUncompressed) {
    std::mt19937 rng(11);
    AutoInputs in = inputs_for(rng, 1e12, 1e-7);
    for (bool profiled : {true, false}) {
        if (!profiled) in.profile.clear();
        const AutoPlan plan = plan_auto(in);
        EXPECT_FALSE(plan.pays);
        EXPECT_EQ(plan.level, std::vector<std::int32_t>(4, 0));
        EXPECT_EQ(plan.reason, (std::vector<AutoReason>{AutoReason::does_not_pay, AutoReason::vector,
                                                        AutoReason::does_not_pay, AutoReason::does_not_pay}));
        EXPECT_GT(plan.compressed_seconds, (1 - in.margin) * plan.uncompressed_seconds);
        EXPECT_STREQ(auto_reason_name(plan.reason[0]), "does not pay");
    }
}

TEST(AutoPlan, OnASlowLinkTheCheapestLevelWithinTheBudgetIsChosen) {
    std::mt19937 rng(3);
    AutoInputs in = inputs_for(rng, 1e5, 1e-5);
    in.candidates = specs({"none", "powersgd:1", "powersgd:2", "powersgd:4"});
    in.codec_seconds.clear();
    // Nothing critical: the budget is powersgd:1's error everywhere, the cheapest level there is.
    in.critical.assign(4, 0);
    const AutoPlan plan = plan_auto(in);
    ASSERT_TRUE(plan.pays);
    EXPECT_EQ(plan.level, (std::vector<std::int32_t>{1, 0, 1, 1}));
    EXPECT_EQ(plan.reason, (std::vector<AutoReason>{AutoReason::pays, AutoReason::vector, AutoReason::pays,
                                                    AutoReason::pays}));
    // Without a profile: Accordion's levels, low where critical.
    in.profile.clear();
    in.critical = {1, 0, 0, 1};
    const AutoPlan first = plan_auto(in);
    ASSERT_TRUE(first.pays);
    EXPECT_EQ(first.level, (std::vector<std::int32_t>{3, 0, 1, 3}));
    EXPECT_EQ(first.reason[0], AutoReason::regime);
    EXPECT_DOUBLE_EQ(first.seconds, step_seconds(in, first.level));
}

TEST(AutoPlan, WhatTheModelLeftOutOfCompressedStepsTurnsTheGuard) {
    std::mt19937 rng(3);
    AutoInputs in = inputs_for(rng, 1e5, 1e-5);
    const AutoPlan modelled = plan_auto(in);
    ASSERT_TRUE(modelled.pays);
    // Compressed steps measured slower than modelled by more than the gain: uncompressed.
    AutoInputs measured = in;
    measured.uncompressed_overhead = 0.001;
    measured.compressed_overhead = modelled.uncompressed_seconds - modelled.compressed_seconds + 0.001;
    const AutoPlan plan = plan_auto(measured);
    EXPECT_FALSE(plan.pays);
    EXPECT_EQ(plan.level, std::vector<std::int32_t>(4, 0));
    EXPECT_DOUBLE_EQ(plan.uncompressed_seconds, modelled.uncompressed_seconds + 0.001);
    EXPECT_DOUBLE_EQ(plan.compressed_seconds, modelled.uncompressed_seconds + 0.001);
    EXPECT_DOUBLE_EQ(plan.seconds, plan.uncompressed_seconds);
    // The same overhead on both: the plan and its margin over uncompressed hold.
    measured.compressed_overhead = measured.uncompressed_overhead = 0.0001;
    const AutoPlan both = plan_auto(measured);
    EXPECT_TRUE(both.pays);
    EXPECT_EQ(both.level, modelled.level);
    EXPECT_DOUBLE_EQ(both.seconds, modelled.seconds + 0.0001);
    // An overhead larger than the model's time (measured on another plan) halves it at most.
    measured.compressed_overhead = measured.uncompressed_overhead = -10;
    const AutoPlan negative = plan_auto(measured);
    EXPECT_DOUBLE_EQ(negative.uncompressed_seconds, modelled.uncompressed_seconds / 2);
    EXPECT_DOUBLE_EQ(negative.compressed_seconds, modelled.compressed_seconds / 2);
    EXPECT_GT(negative.seconds, 0);
}

TEST(AutoPlan, TheOverheadIsMeasuredAgainstTheEpochsOwnCompute) {
    std::mt19937 rng(3);
    AutoInputs in = inputs_for(rng, 1e5, 1e-5);
    const AutoPlan plan = plan_auto(in);
    ASSERT_TRUE(plan.pays);
    // The epoch computed 3 ms a step instead of 2 and took 1 ms a step more than the model with it.
    AutoInputs ran = in;
    ran.compute.seconds = 0.003;
    const double measured = step_seconds(ran, plan.level) + 0.001;
    EXPECT_DOUBLE_EQ(measured_overhead(ran, plan.level, measured), 0.001);
    // The next epoch, at the same compute and plan, is predicted at the measured time.
    ran.compressed_overhead = measured_overhead(ran, plan.level, measured);
    const AutoPlan next = plan_auto(ran);
    EXPECT_EQ(next.level, plan.level);
    EXPECT_NEAR(next.seconds, measured, 1e-12);
    // Uncompressed epochs are priced as DDP's overlapped schedule.
    const std::vector<std::int32_t> none(4, 0);
    EXPECT_DOUBLE_EQ(measured_overhead(ran, none, step_seconds(ran, none) - 0.0005), -0.0005);
    // Never below half the model's time.
    EXPECT_DOUBLE_EQ(measured_overhead(ran, none, 0), -0.5 * step_seconds(ran, none));
}

TEST(AutoPlan, TheLinkIsMeasuredUntilTheTimeGrowsThroughTwoSizes) {
    // 20 Mbit/s behind a 32 KB burst: 4, 16 KiB free, 64 KiB 14 ms, 256 KiB 95 ms.
    EXPECT_FALSE(link_sizes_enough({0.001}, false));
    EXPECT_FALSE(link_sizes_enough({0.001, 0.001, 0.014}, false));
    EXPECT_TRUE(link_sizes_enough({0.001, 0.001, 0.014, 0.095}, false));
    // A call stalled at 16 KiB by a busy machine does not end it there.
    EXPECT_FALSE(link_sizes_enough({0.001, 0.045}, false));
    EXPECT_FALSE(link_sizes_enough({0.001, 0.045, 0.009}, false));
    EXPECT_TRUE(link_sizes_enough({0.001, 0.045, 0.014, 0.095}, false));
    // A fast link: the largest size ends it; one size is never enough.
    EXPECT_TRUE(link_sizes_enough({1e-5, 2e-5}, true));
    EXPECT_FALSE(link_sizes_enough({0.5}, true));
}

TEST(AutoPlan, ABindingBudgetIsNamed) {
    std::mt19937 rng(5);
    AutoInputs in = inputs_for(rng, 1e5, 1e-5);
    in.candidates = specs({"none", "powersgd:1", "powersgd:4"});
    in.low = parse_spec("powersgd:4");
    in.high = parse_spec("powersgd:1");
    in.codec_seconds.clear();
    in.critical.assign(4, 1);  // every budget is rank 4's: rank 1 everywhere breaks it
    const AutoPlan plan = plan_auto(in);
    ASSERT_TRUE(plan.pays);
    EXPECT_LE(plan.error, plan.budget * (1 + 1e-12));
    int budget = 0;
    for (size_t p : {0u, 2u, 3u}) {
        if (plan.reason[p] == AutoReason::budget) {
            ++budget;
            EXPECT_EQ(plan.level[p], 2) << p;
        }
    }
    EXPECT_GT(budget, 0);
}

TEST(AutoPlan, WhereComputeBoundsTheStepTheMarginBuysLessError) {
    // A slow link (uncompressed 0.13 s of exchange a step) and 1 s of compute: every
    // PowerSGD rank is within 5 % of the fastest plan (rank 1, the budget's level on
    // every matrix).
    AutoInputs in = powersgd_ranks_on_a_slow_link();
    in.compute.seconds = 1.0;
    in.margin = 0;
    const AutoPlan fastest = plan_auto(in);
    ASSERT_TRUE(fastest.pays);
    EXPECT_EQ(fastest.level, (std::vector<std::int32_t>{1, 0, 1, 1}));
    EXPECT_EQ(fastest.reason, (std::vector<AutoReason>{AutoReason::pays, AutoReason::vector, AutoReason::pays,
                                                       AutoReason::pays}));
    EXPECT_NEAR(fastest.error, fastest.budget, 1e-12 * fastest.budget);

    in.margin = 0.05;
    const AutoPlan plan = plan_auto(in);
    ASSERT_TRUE(plan.pays);
    EXPECT_DOUBLE_EQ(plan.compressed_seconds, fastest.seconds);
    EXPECT_LE(plan.seconds * (1 - in.margin), fastest.seconds);
    EXPECT_LT(plan.error, 0.5 * fastest.error);
    const BruteForce best = brute_force(in);
    EXPECT_EQ(plan.level, best.accurate.level);
    for (size_t p : {0u, 2u, 3u}) {
        EXPECT_NE(plan.level[p], 1) << p;  // rank 2, rank 4 or whole: less error than rank 1
        EXPECT_EQ(plan.reason[p], AutoReason::accuracy) << p;
    }
    EXPECT_STREQ(auto_reason_name(AutoReason::accuracy), "accuracy");
    // Where the least-error plan would not pass the guard but the fastest does: the fastest.
    AutoInputs guarded = in;
    const double uncompressed = step_seconds(in, std::vector<std::int32_t>(4, 0));
    guarded.uncompressed_overhead = (plan.seconds + fastest.seconds) / 2 / (1 - in.margin) - uncompressed;
    const AutoPlan kept = plan_auto(guarded);
    ASSERT_TRUE(kept.pays);
    EXPECT_EQ(kept.level, fastest.level);
}

TEST(AutoPlan, ALinksBurstSendsACompressedStepsBandwidthTimeFreeUpToItsCompute) {
    // One 64 x 32 matrix and its bias on two ranks, an alpha-beta ring worked out by hand:
    // an allreduce of S bytes takes 2 (w - 1) alpha + 2 (w - 1) / w x S / B.
    AutoInputs in;
    in.parameters = {{"w", {64, 32}}, {"b", {64}}};
    in.candidates = specs({"none", "powersgd:1", "powersgd:4"});
    in.low = parse_spec("powersgd:4");
    in.high = parse_spec("powersgd:1");
    in.critical = {1, 1};
    in.link.world = 2;
    const double alpha = 1e-4, bandwidth = 1e6;
    in.link.allreduce = in.link.allgather = acc::perf::Network(alpha, bandwidth);
    in.compute.seconds = 0.01;
    auto allreduce = [&](double bytes) { return 2 * alpha + bytes / bandwidth; };
    // PowerSGD rank 4 on the matrix: P (64 x 4) and Q (32 x 4) in two rounds; the bias whole.
    const double p_bytes = 4.0 * 64 * 4, q_bytes = 4.0 * 32 * 4, bias_bytes = 4.0 * 64;
    const double bandwidth_seconds = (p_bytes + q_bytes + bias_bytes) / bandwidth;
    const double without = in.compute.seconds + allreduce(p_bytes / 2 + q_bytes / 2) * 2 + allreduce(bias_bytes);
    const std::vector<std::int32_t> rank4 = {2, 0};
    EXPECT_NEAR(step_seconds(in, rank4), without, 1e-12);
    // A burst of 1 ms: 1 ms of the bandwidth time goes free.
    in.link.burst_seconds = 0.001;
    EXPECT_NEAR(step_seconds(in, rank4), without - 0.001, 1e-12);
    // A burst larger than the step's bandwidth time: only the latencies are left.
    in.link.burst_seconds = 1.0;
    EXPECT_NEAR(step_seconds(in, rank4), without - bandwidth_seconds, 1e-12);
    // ... but the bucket refills only during the compute: at most the compute's seconds go free.
    in.compute.seconds = 0.0005;
    const double latencies = 4 * alpha + 2 * alpha;  // P, Q and the bias: three allreduces
    EXPECT_NEAR(step_seconds(in, rank4), in.compute.seconds + latencies + bandwidth_seconds - 0.0005, 1e-12);
    // An uncompressed step is DDP's, priced without it.
    in.link.burst_seconds = 0;
    const double ddp = step_seconds(in, {0, 0});
    in.link.burst_seconds = 1.0;
    EXPECT_DOUBLE_EQ(step_seconds(in, {0, 0}), ddp);
    in.link.burst_seconds = -1;
    EXPECT_THROW(step_seconds(in, rank4), acc::Error);
}

TEST(AutoPlan, WhereTheBurstCoversEveryCompressedExchangeTheLeastErrorLevelIsChosen) {
    // The slow link of the tests above: rank 1 is the fastest plan, and the margin buys
    // rank 2 on one matrix; with a burst that sends a step's bytes free, every PowerSGD
    // rank costs the same: rank 4 (or whole) it is.
    AutoInputs in = powersgd_ranks_on_a_slow_link();
    in.compute.seconds = 0.1;
    const AutoPlan without = plan_auto(in);
    ASSERT_TRUE(without.pays);
    EXPECT_EQ(without.level, brute_force(in).accurate.level);
    EXPECT_EQ(std::count(without.level.begin(), without.level.end(), 1), 2);  // rank 1 on two matrices
    in.link.burst_seconds = 0.1;  // rank 4 everywhere: 44 ms of bandwidth
    const AutoPlan with = plan_auto(in);
    ASSERT_TRUE(with.pays);
    EXPECT_EQ(with.level, brute_force(in).accurate.level);
    for (size_t p : {0u, 2u, 3u}) EXPECT_TRUE(with.level[p] == 3 || with.level[p] == 0) << p;
    EXPECT_LT(with.error, 0.5 * without.error);
}

TEST(AutoPlan, ARunIsMeasuredAgainOnlyWhenItsStepTimeDrifts) {
    EXPECT_FALSE(prediction_drifted(1.0, 1.2, 0.25));
    EXPECT_FALSE(prediction_drifted(1.0, 0.8, 0.25));
    EXPECT_TRUE(prediction_drifted(1.0, 1.3, 0.25));
    EXPECT_TRUE(prediction_drifted(1.0, 0.7, 0.25));
    EXPECT_TRUE(prediction_drifted(0.0, 0.7, 0.25));
    EXPECT_TRUE(prediction_drifted(1.0, std::nan(""), 0.25));
}

TEST(AutoPlan, RefusesWhatItCannotPlan) {
    std::mt19937 rng(1);
    AutoInputs in = inputs_for(rng, 1e6, 1e-5);
    AutoInputs fp16 = in;
    fp16.candidates.push_back(parse_spec("fp16"));
    fp16.codec_seconds.clear();
    EXPECT_THROW(plan_auto(fp16), acc::UsageError);
    AutoInputs no_low = in;
    no_low.low = parse_spec("powersgd:8");
    EXPECT_THROW(plan_auto(no_low), acc::UsageError);
    AutoInputs short_regimes = in;
    short_regimes.critical.pop_back();
    EXPECT_THROW(plan_auto(short_regimes), acc::Error);
    AutoInputs margin = in;
    margin.margin = 1;
    EXPECT_THROW(plan_auto(margin), acc::UsageError);
}
