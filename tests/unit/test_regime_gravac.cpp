// GraVAC's decision core: hand-computed cases for every branch of Algorithm 1's
// per-step choice and of CheckGraVAC, the throughput table a window's steps fill
// (median or mean), the gains' reset, the EWMA, the factor-to-rank mapping and bad
// inputs.
#include "base/error.hpp"
#include "regime/gravac.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using namespace acc::regime;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Smoothing 1: each gain is the last step's ratio, so cases are easy to compute by hand.
GravacSettings unsmoothed(std::int64_t window = 1000000) {
    GravacSettings s;
    s.smoothing = 1;
    s.window = window;
    return s;
}

// One step: decide on the given norms, then end it with `throughput` samples/s.
GravacDecision step(GravacController& c, double grad_sq, double min_sq, double candidate_sq, double throughput = 1000) {
    GravacDecision d = c.decide({grad_sq, min_sq, candidate_sq});
    c.end_step(throughput);
    return d;
}

double table_at(const GravacState& s, double factor) {
    for (const auto& e : s.throughput)
        if (e.factor == factor) return e.throughput;
    return kNaN;
}

}  // namespace

TEST(GravacSettings, DefaultsAreThePapers) {
    GravacSettings s;
    EXPECT_EQ(s.theta_min, 10);
    EXPECT_EQ(s.theta_max, 1000);
    EXPECT_EQ(s.epsilon, 0.7);
    EXPECT_EQ(s.window, 500);
    EXPECT_EQ(s.omega, 0.01);
    EXPECT_EQ(s.theta_s, 2);
    EXPECT_EQ(s.policy, GravacPolicy::exponential);
    EXPECT_EQ(s.statistic, GravacStatistic::median);
    EXPECT_FALSE(s.reset_gains);
    EXPECT_EQ(s.gain, GravacGain::squared);
    EXPECT_DOUBLE_EQ(gravac_defaults(4).smoothing, 0.04);
    EXPECT_DOUBLE_EQ(gravac_smoothing(32), 0.32);
    EXPECT_EQ(gravac_smoothing(500), 1.0);
    EXPECT_THROW(gravac_smoothing(0), acc::UsageError);

    GravacController c(s);
    EXPECT_EQ(c.theta_min(), 10);
    EXPECT_EQ(c.candidate(), 20);
    EXPECT_EQ(c.candidate_scale(), 2);
}

// The released code's unsquared gain is the square root of Algorithm 1's: a step
// keeping 49 % of the squared norm has gain 0.49 or 0.7, and only the second
// passes epsilon 0.7.
TEST(GravacSettings, NormGainIsTheSquareRootOfTheSquaredOne) {
    EXPECT_STREQ(gravac_gain_name(GravacGain::norm), "norm");
    EXPECT_EQ(parse_gravac_gain("squared"), GravacGain::squared);
    EXPECT_EQ(parse_gravac_gain("norm"), GravacGain::norm);
    try {
        parse_gravac_gain("plain");
        ADD_FAILURE() << "accepted 'plain'";
    } catch (const acc::UsageError& e) {
        EXPECT_STREQ(e.what(), "--gravac-gain: must be 'squared' or 'norm', not 'plain'");
    }
    const GravacNorms norms{100.0, 49.0, 16.0};
    for (GravacGain gain : {GravacGain::squared, GravacGain::norm}) {
        GravacSettings s;
        s.gain = gain;
        GravacController c(s);
        const GravacDecision d = c.decide(norms);
        const GravacState st = c.state();
        if (gain == GravacGain::squared) {
            EXPECT_DOUBLE_EQ(st.gain_min, 0.49);
            EXPECT_DOUBLE_EQ(st.gain_candidate, 0.16);
            EXPECT_EQ(d.choice, GravacChoice::dense);
        } else {
            EXPECT_DOUBLE_EQ(st.gain_min, 0.7);
            EXPECT_DOUBLE_EQ(st.gain_candidate, 0.4);
            EXPECT_EQ(d.choice, GravacChoice::theta_min);
            EXPECT_DOUBLE_EQ(d.gain, 0.7);
        }
    }
}

TEST(GravacSettings, InvalidSettingsNameTheirOption) {
    struct Case {
        std::function<void(GravacSettings&)> change;
        std::string option;
    };
    std::vector<Case> cases = {
        {[](GravacSettings& s) { s.theta_min = 1; }, "--gravac-theta-min: "},
        {[](GravacSettings& s) { s.theta_min = 0.1; }, "--gravac-theta-min: "},
        {[](GravacSettings& s) { s.theta_min = kNaN; }, "--gravac-theta-min: "},
        {[](GravacSettings& s) { s.theta_min = kInf; }, "--gravac-theta-min: "},
        {[](GravacSettings& s) { s.theta_max = 5; }, "--gravac-theta-max: "},
        {[](GravacSettings& s) { s.theta_max = kNaN; }, "--gravac-theta-max: "},
        {[](GravacSettings& s) { s.theta_max = kInf; }, "--gravac-theta-max: "},
        {[](GravacSettings& s) { s.epsilon = 0; }, "--gravac-epsilon: "},
        {[](GravacSettings& s) { s.epsilon = 1.5; }, "--gravac-epsilon: "},
        {[](GravacSettings& s) { s.epsilon = kNaN; }, "--gravac-epsilon: "},
        {[](GravacSettings& s) { s.window = 0; }, "--gravac-window: "},
        {[](GravacSettings& s) { s.window = -3; }, "--gravac-window: "},
        {[](GravacSettings& s) { s.omega = -0.01; }, "--gravac-omega: "},
        {[](GravacSettings& s) { s.omega = 1; }, "--gravac-omega: "},
        {[](GravacSettings& s) { s.omega = kNaN; }, "--gravac-omega: "},
        {[](GravacSettings& s) { s.theta_s = 1; }, "--gravac-theta-s: "},
        {[](GravacSettings& s) { s.theta_s = kInf; }, "--gravac-theta-s: "},
        {[](GravacSettings& s) { s.theta_s = kNaN; }, "--gravac-theta-s: "},
        {[](GravacSettings& s) { s.smoothing = 0; }, "--gravac-smoothing: "},
        {[](GravacSettings& s) { s.smoothing = 1.01; }, "--gravac-smoothing: "},
        {[](GravacSettings& s) { s.smoothing = kNaN; }, "--gravac-smoothing: "},
        {[](GravacSettings& s) { s.policy = static_cast<GravacPolicy>(7); }, "--gravac-policy: "},
        {[](GravacSettings& s) { s.statistic = static_cast<GravacStatistic>(7); }, "--gravac-throughput: "},
        {[](GravacSettings& s) { s.gain = static_cast<GravacGain>(7); }, "--gravac-gain: "},
    };
    for (const auto& k : cases) {
        GravacSettings s;
        k.change(s);
        try {
            GravacController c(s);
            ADD_FAILURE() << "accepted, expected " << k.option;
        } catch (const acc::UsageError& e) {
            EXPECT_EQ(std::string(e.what()).rfind(k.option, 0), 0u) << e.what();
        }
    }
    // Edges that are valid.
    GravacSettings s;
    s.theta_max = s.theta_min;
    s.epsilon = 1;
    s.omega = 0;
    s.smoothing = 1;
    s.window = 1;
    EXPECT_NO_THROW(validate(s));
    GravacController c(s);
    EXPECT_EQ(c.candidate(), 10);  // theta_max caps the first candidate
    EXPECT_EQ(c.candidate_scale(), 1);
}

TEST(GravacSettings, PolicyNames) {
    EXPECT_EQ(parse_gravac_policy("exponential"), GravacPolicy::exponential);
    EXPECT_EQ(parse_gravac_policy("geometric"), GravacPolicy::geometric);
    EXPECT_STREQ(gravac_policy_name(GravacPolicy::geometric), "geometric");
    try {
        parse_gravac_policy("linear");
        FAIL() << "accepted 'linear'";
    } catch (const acc::UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "--gravac-policy: must be 'exponential' or 'geometric', not 'linear'");
    }
    EXPECT_STREQ(gravac_choice_name(GravacChoice::theta_min), "theta_min");
}

TEST(GravacSettings, StatisticNames) {
    EXPECT_EQ(parse_gravac_statistic("median"), GravacStatistic::median);
    EXPECT_EQ(parse_gravac_statistic("mean"), GravacStatistic::mean);
    EXPECT_STREQ(gravac_statistic_name(GravacStatistic::mean), "mean");
    try {
        parse_gravac_statistic("last");
        FAIL() << "accepted 'last'";
    } catch (const acc::UsageError& e) {
        EXPECT_EQ(std::string(e.what()), "--gravac-throughput: must be 'median' or 'mean', not 'last'");
    }
}

TEST(GravacEwma, MatchesTheDirectSum) {
    // y_t = (1-a)^(t-1) x_1 + sum_{k=2..t} a (1-a)^(t-k) x_k
    const double a = 0.04;
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<double> x(300);
    for (double& v : x) v = u(rng);
    GravacEwma ewma(a);
    EXPECT_TRUE(ewma.empty());
    EXPECT_TRUE(std::isnan(ewma.value()));
    for (size_t t = 1; t <= x.size(); ++t) {
        ewma.add(x[t - 1]);
        double direct = std::pow(1 - a, static_cast<double>(t - 1)) * x[0];
        for (size_t k = 2; k <= t; ++k) direct += a * std::pow(1 - a, static_cast<double>(t - k)) * x[k - 1];
        ASSERT_NEAR(ewma.value(), direct, 1e-12 * std::max(1.0, direct)) << "t = " << t;
    }
    EXPECT_EQ(ewma.samples(), 300);
}

TEST(GravacEwma, ControllerGainsAreEwmasOfTheRatios) {
    GravacSettings s;
    s.smoothing = 0.04;
    GravacController c(s);
    GravacEwma want_min(0.04), want_cand(0.04);
    std::mt19937_64 rng(11);
    std::uniform_real_distribution<double> u(0.5, 2.0);
    for (int i = 0; i < 200; ++i) {
        double g = u(rng) * 1e3, m = g * u(rng) / 2, k = m * u(rng) / 2;
        want_min.add(m / g);
        want_cand.add(k / g);
        step(c, g, m, k);
    }
    GravacState st = c.state();
    EXPECT_EQ(st.gain_min, want_min.value());
    EXPECT_EQ(st.gain_candidate, want_cand.value());
    EXPECT_EQ(st.gain_samples, 200);
}

// Lines 10-24 of Algorithm 1.

TEST(GravacDecide, CandidateAcceptedWhenItsGainMeetsEpsilon) {
    GravacController c(unsmoothed());
    // gains 90/100 = 0.9 and 80/100 = 0.8 >= 0.7
    GravacDecision d = c.decide({100, 90, 80});
    EXPECT_EQ(d.choice, GravacChoice::candidate);
    EXPECT_EQ(d.factor, 20);
    EXPECT_DOUBLE_EQ(d.gain, 0.8);
    c.end_step(1000);
    // Exactly epsilon qualifies (>=): 7 / 10 is the double nearest 0.7.
    d = c.decide({10, 10, 7});
    EXPECT_EQ(d.choice, GravacChoice::candidate);
}

TEST(GravacDecide, FallsBackToThetaMin) {
    GravacController c(unsmoothed());
    GravacDecision d = c.decide({100, 90, 60});  // 0.6 < 0.7 <= 0.9
    EXPECT_EQ(d.choice, GravacChoice::theta_min);
    EXPECT_EQ(d.factor, 10);
    EXPECT_DOUBLE_EQ(d.gain, 0.9);
    c.end_step(1000);
    d = c.decide({10, 7, 6});  // theta_min's gain exactly epsilon
    EXPECT_EQ(d.choice, GravacChoice::theta_min);
}

TEST(GravacDecide, FallsBackToDense) {
    GravacController c(unsmoothed());
    GravacDecision d = c.decide({100, 69, 40});
    EXPECT_EQ(d.choice, GravacChoice::dense);
    EXPECT_EQ(d.factor, 1);
    EXPECT_EQ(d.gain, 1);
    GravacState st = c.state();
    EXPECT_TRUE(st.decided);
    EXPECT_EQ(st.choice, GravacChoice::dense);
    EXPECT_EQ(st.factor_used, 1);
    EXPECT_EQ(st.evaluated, 20);
    EXPECT_DOUBLE_EQ(st.gain_min, 0.69);
    EXPECT_DOUBLE_EQ(st.gain_candidate, 0.4);
}

TEST(GravacDecide, DecisionsFollowTheSmoothedGains) {
    GravacSettings s = unsmoothed();
    s.smoothing = 0.5;
    GravacController c(s);
    EXPECT_EQ(step(c, 100, 100, 100).choice, GravacChoice::candidate);  // 1
    // one bad step: candidate gain 0.5*0.2 + 0.5*1 = 0.6
    EXPECT_EQ(step(c, 100, 100, 20).choice, GravacChoice::theta_min);
    // recovers: 0.5*1 + 0.5*0.6 = 0.8
    EXPECT_EQ(step(c, 100, 100, 100).choice, GravacChoice::candidate);
    EXPECT_DOUBLE_EQ(c.state().gain_candidate, 0.8);
}

TEST(GravacDecide, ZeroGradientLeavesTheGainsAlone) {
    GravacController c(unsmoothed());
    // No gain yet: dense.
    GravacDecision d = step(c, 0, 0, 0);
    EXPECT_EQ(d.choice, GravacChoice::dense);
    GravacState st = c.state();
    EXPECT_EQ(st.gain_samples, 0);
    EXPECT_EQ(st.zero_norm_steps, 1);
    EXPECT_TRUE(std::isnan(st.gain_min));
    EXPECT_TRUE(std::isnan(st.gain_candidate));
    EXPECT_EQ(step(c, 100, 90, 80).choice, GravacChoice::candidate);
    // A zero gradient later (even with an inconsistent compressed norm) keeps 0.9 / 0.8.
    EXPECT_EQ(step(c, 0, 5, 0).choice, GravacChoice::candidate);
    st = c.state();
    EXPECT_DOUBLE_EQ(st.gain_min, 0.9);
    EXPECT_DOUBLE_EQ(st.gain_candidate, 0.8);
    EXPECT_EQ(st.gain_samples, 1);
    EXPECT_EQ(st.zero_norm_steps, 2);
}

TEST(GravacDecide, NonFiniteOrNegativeNormsAreErrors) {
    GravacController c(unsmoothed());
    const std::vector<GravacNorms> bad = {
        {kNaN, 1, 1}, {1, kNaN, 1}, {1, 1, kNaN}, {kInf, 1, 1}, {1, kInf, 1}, {1, 1, -kInf}, {-1, 1, 1}, {1, -0.5, 1},
    };
    for (const auto& n : bad) {
        try {
            c.decide(n);
            ADD_FAILURE() << "accepted " << n.grad_sq << " " << n.min_sq << " " << n.candidate_sq;
        } catch (const acc::Error& e) {
            EXPECT_NE(std::string(e.what()).find("GraVAC: the squared norm of"), std::string::npos) << e.what();
        }
    }
    // Nothing was counted, and the controller still works.
    GravacState st = c.state();
    EXPECT_FALSE(st.decided);
    EXPECT_EQ(st.gain_samples, 0);
    EXPECT_EQ(step(c, 100, 90, 80).choice, GravacChoice::candidate);
}

TEST(GravacDecide, BadThroughputAndCallOrder) {
    GravacController c(unsmoothed());
    EXPECT_THROW(c.end_step(1000), std::logic_error);
    c.decide({100, 90, 80});
    EXPECT_THROW(c.decide({100, 90, 80}), std::logic_error);
    for (double t : {0.0, -5.0, kNaN, kInf}) EXPECT_THROW(c.end_step(t), acc::Error) << t;
    EXPECT_EQ(c.state().steps, 0);
    c.end_step(1000);
    GravacState st = c.state();
    EXPECT_EQ(st.steps, 1);
    ASSERT_EQ(st.throughput.size(), 1u);
    EXPECT_EQ(st.throughput[0].factor, 20);
    EXPECT_DOUBLE_EQ(st.throughput[0].throughput, 800);  // 1000 samples/s x gain 0.8
}

TEST(GravacDecide, ThroughputTableHoldsTheWindowsMedianPerFactor) {
    GravacController c(unsmoothed(6));
    step(c, 100, 90, 80, 1000);   // candidate 20: 800
    step(c, 100, 50, 40, 2000);   // dense: 2000 x 1
    step(c, 100, 90, 60, 1000);   // theta_min 10: 900
    step(c, 100, 90, 75, 2000);   // candidate 20 again: 1500
    GravacState st = c.state();
    ASSERT_EQ(st.throughput.size(), 3u);
    EXPECT_EQ(st.throughput[0].factor, 1);
    EXPECT_EQ(st.throughput[1].factor, 10);
    EXPECT_EQ(st.throughput[2].factor, 20);
    EXPECT_DOUBLE_EQ(st.throughput[0].throughput, 2000);
    EXPECT_DOUBLE_EQ(st.throughput[1].throughput, 900);
    EXPECT_DOUBLE_EQ(st.throughput[2].throughput, 1150);  // median of 800 and 1500
    EXPECT_EQ(st.checks, 0);
    step(c, 100, 90, 80, 200);    // candidate 20: 160, an outlier
    step(c, 100, 90, 80, 1250);   // candidate 20: 1000; the check runs
    st = c.state();
    EXPECT_EQ(st.checks, 1);
    EXPECT_DOUBLE_EQ(table_at(st, 20), 900);  // median of 800, 1500, 160 and 1000
    // The next window replaces the entries of the factors it uses; the others stay.
    step(c, 100, 90, 10, 2000);   // theta_min 10: 1800
    st = c.state();
    EXPECT_DOUBLE_EQ(table_at(st, 10), 1800);
    EXPECT_DOUBLE_EQ(table_at(st, 1), 2000);
    EXPECT_DOUBLE_EQ(table_at(st, 20), 900);
}

TEST(GravacDecide, ThroughputTableCanHoldTheWindowsMean) {
    GravacSettings s = unsmoothed(4);
    s.statistic = GravacStatistic::mean;
    GravacController c(s);
    for (double t : {1000.0, 1000.0, 1000.0, 125.0}) step(c, 100, 90, 80, t);  // candidate 20: 800, ..., 100
    EXPECT_DOUBLE_EQ(table_at(c.state(), 20), 625);  // (3 x 800 + 100) / 4; the median would be 800
}

// CheckGraVAC.

TEST(GravacCheck, ExponentialPolicyGivesThePapersCandidates) {
    // theta_min 10x, theta_max 1000x: 10x, 20x, 40x, 160x, 1000x (section IV-B1).
    GravacController c(unsmoothed(1));
    std::vector<double> seen = {c.candidate()};
    for (int i = 0; i < 5; ++i) {
        // gains 1 and 0.8 (no theta_min raise); throughput grows with the factor (no saturation)
        step(c, 100, 100, 80, 100 * c.candidate());
        seen.push_back(c.candidate());
    }
    EXPECT_EQ(seen, (std::vector<double>{20, 40, 160, 1000, 1000, 1000}));
    EXPECT_EQ(c.theta_min(), 10);
    EXPECT_EQ(c.candidate_scale(), 100);
    GravacState st = c.state();
    EXPECT_EQ(st.checks, 5);
    EXPECT_FALSE(st.saturated);
    EXPECT_FALSE(st.raised_theta_min);
}

TEST(GravacCheck, GeometricPolicyGivesThePapersCandidates) {
    // theta_min 10x, theta_max 2000x: 20x, 40x, ..., 1280x, 2000x (section IV-B2).
    GravacSettings s = unsmoothed(1);
    s.policy = GravacPolicy::geometric;
    s.theta_max = 2000;
    GravacController c(s);
    std::vector<double> seen = {c.candidate()};
    for (int i = 0; i < 8; ++i) {
        step(c, 100, 100, 80, 100 * c.candidate());
        seen.push_back(c.candidate());
    }
    EXPECT_EQ(seen, (std::vector<double>{20, 40, 80, 160, 320, 640, 1280, 2000, 2000}));

    // Random-k run of section IV-D1: theta_min 1.5x gives 3x, 6x, 12x, 24x, 48x.
    s.theta_min = 1.5;
    s.theta_max = 1000;
    GravacController r(s);
    seen = {r.candidate()};
    for (int i = 0; i < 4; ++i) {
        step(r, 100, 100, 80, 100 * r.candidate());
        seen.push_back(r.candidate());
    }
    EXPECT_EQ(seen, (std::vector<double>{3, 6, 12, 24, 48}));
}

TEST(GravacCheck, RunsOnlyEveryWindowSteps) {
    GravacController c(unsmoothed(3));
    std::vector<double> seen;
    for (int i = 0; i < 7; ++i) {
        step(c, 100, 100, 80, 100 * c.candidate());
        seen.push_back(c.candidate());
    }
    EXPECT_EQ(seen, (std::vector<double>{20, 20, 40, 40, 40, 160, 160}));
    EXPECT_EQ(c.state().checks, 2);
    EXPECT_EQ(c.state().steps, 7);
}

TEST(GravacCheck, OmegaRuleRaisesThetaMinToTheEvaluatedCandidate) {
    GravacController c(unsmoothed(1));
    // gains 0.9 and 0.895: |0.9 - 0.895| / 0.9 = 0.0056 <= 1 %
    step(c, 100, 90, 89.5);
    GravacState st = c.state();
    EXPECT_TRUE(st.raised_theta_min);
    EXPECT_EQ(st.theta_min, 20);       // the candidate evaluated this window
    EXPECT_EQ(st.candidate, 40);       // the policy's next candidate
    EXPECT_EQ(st.candidate_scale, 2);  // multi-level step from the new theta_min
    // The raised minimum is what a failing candidate now falls back to.
    GravacDecision d = c.decide({100, 90, 60});
    EXPECT_EQ(d.choice, GravacChoice::theta_min);
    EXPECT_EQ(d.factor, 20);
}

TEST(GravacCheck, OmegaRuleBoundaries) {
    {  // 2 % apart: no raise
        GravacController c(unsmoothed(1));
        step(c, 100, 90, 88);  // |0.9 - 0.88| / 0.9 = 0.022
        EXPECT_FALSE(c.state().raised_theta_min);
        EXPECT_EQ(c.theta_min(), 10);
        EXPECT_EQ(c.candidate(), 40);
    }
    {  // exactly omega (values exact in binary): raise
        GravacSettings s = unsmoothed(1);
        s.omega = 0.25;
        GravacController c(s);
        step(c, 4, 4, 3);  // |1 - 0.75| / 1 = 0.25
        EXPECT_TRUE(c.state().raised_theta_min);
        EXPECT_EQ(c.theta_min(), 20);
    }
    {  // theta_min's gain zero: 0/0 must not count as "within omega"
        GravacController c(unsmoothed(1));
        step(c, 100, 0, 0);
        EXPECT_FALSE(c.state().raised_theta_min);
        EXPECT_EQ(c.theta_min(), 10);
    }
    {  // no gain at all yet (zero gradients only): no raise
        GravacController c(unsmoothed(1));
        step(c, 0, 0, 0);
        EXPECT_FALSE(c.state().raised_theta_min);
        EXPECT_EQ(c.theta_min(), 10);
        EXPECT_EQ(c.candidate(), 40);
    }
}

TEST(GravacCheck, SaturationStopsAtTheSecondBestThroughput) {
    // The geometric run of section IV-B2: 1280x and 2000x reach compression
    // throughputs 1029.9 and 1035.4, within 1 %: GraVAC stays at 1280x.
    GravacSettings s = unsmoothed(1);
    s.policy = GravacPolicy::geometric;
    s.theta_max = 2000;
    GravacController c(s);
    while (c.candidate() < 1280) step(c, 100, 100, 80, c.candidate() / 0.8);  // table: CF -> CF
    EXPECT_FALSE(c.state().saturated);
    step(c, 100, 100, 80, 1029.9 / 0.8);  // at 1280x
    EXPECT_EQ(c.candidate(), 2000);
    step(c, 100, 100, 80, 1035.4 / 0.8);  // at 2000x
    GravacState st = c.state();
    EXPECT_TRUE(st.saturated);
    EXPECT_EQ(st.candidate, 1280);
    EXPECT_DOUBLE_EQ(table_at(st, 2000), 1035.4);
    // Still saturated at the next check: stays.
    step(c, 100, 100, 80, 1029.9 / 0.8);
    EXPECT_TRUE(c.state().saturated);
    EXPECT_EQ(c.candidate(), 1280);
    // 1280x now clearly ahead: saturation gone, the search goes on from 1280x.
    step(c, 100, 100, 80, 1500 / 0.8);
    EXPECT_FALSE(c.state().saturated);
    EXPECT_EQ(c.candidate(), 2000);
}

TEST(GravacCheck, SaturationTieTakesTheLowerFactor) {
    GravacSettings s = unsmoothed(2);
    s.omega = 0;
    GravacController c(s);
    step(c, 4, 4, 3, 1000);  // candidate 20x, gain 0.75: 750
    step(c, 4, 3, 2, 1000);  // theta_min 10x, gain 0.75: 750 (exact in binary)
    GravacState st = c.state();
    EXPECT_TRUE(st.saturated);
    EXPECT_EQ(st.candidate, 10);
    EXPECT_EQ(st.candidate_scale, 1);
}

TEST(GravacCheck, SaturationOnDenseClampsToThetaMinAndTheSearchResumes) {
    GravacController c(unsmoothed(2));
    step(c, 100, 50, 40, 1000);       // dense: 1000
    step(c, 100, 100, 80, 1256.25);   // candidate 20x: 1256.25 x 0.8 = 1005
    // best 20x (1005), second dense (1000): within 1 %, theta_ideal = 1x,
    // clamped to theta_min.
    GravacState st = c.state();
    EXPECT_TRUE(st.saturated);
    EXPECT_FALSE(st.raised_theta_min);
    EXPECT_EQ(st.candidate, 10);
    EXPECT_EQ(st.candidate_scale, 1);
    // 10x now measured far ahead: no saturation; the exponential policy moves
    // a scale of 1 on by theta_s rather than squaring it in place.
    step(c, 100, 100, 80, 6250);  // 10x: 5000
    step(c, 100, 100, 80, 6250);
    st = c.state();
    EXPECT_FALSE(st.saturated);
    EXPECT_EQ(st.candidate, 20);
}

// One outlying step (an epoch's short batch, the evaluation) in a window does not
// move the median, so it does not decide saturation; it would move the last value.
TEST(GravacCheck, OneOutlyingStepDoesNotDecideSaturation) {
    GravacSettings s = unsmoothed(5);
    GravacController c(s);
    for (int i = 0; i < 5; ++i) step(c, 100, 100, 80, 1250);  // 20x: 1000
    EXPECT_EQ(c.candidate(), 40);
    for (int i = 0; i < 4; ++i) step(c, 100, 100, 80, 1253);  // 40x: 1002.4, within 1 % of 20x
    step(c, 100, 100, 80, 125);                                // an outlier, last in the window
    GravacState st = c.state();
    EXPECT_TRUE(st.saturated);
    EXPECT_EQ(st.candidate, 20);
    EXPECT_DOUBLE_EQ(table_at(st, 40), 1002.4);
}

TEST(GravacCheck, ResetGainsRestartsTheCandidatesAverage) {
    for (bool reset : {false, true}) {
        GravacSettings s = unsmoothed(2);
        s.smoothing = 0.5;
        s.reset_gains = reset;
        GravacController c(s);
        step(c, 100, 90, 50);  // gains 0.9 and 0.5
        step(c, 100, 90, 50);  // the check moves the candidate from 20x to 40x
        ASSERT_EQ(c.candidate(), 40);
        GravacState st = c.state();
        if (reset) {
            EXPECT_TRUE(std::isnan(st.gain_candidate)) << "the new candidate has no gain yet";
        } else {
            EXPECT_DOUBLE_EQ(st.gain_candidate, 0.5);
        }
        EXPECT_DOUBLE_EQ(st.gain_min, 0.9);  // theta_min did not change
        c.decide({100, 90, 10});            // 40x keeps 0.1
        // Reset: the first sample starts the average; else 0.5 x 0.1 + 0.5 x 0.5.
        EXPECT_DOUBLE_EQ(c.state().gain_candidate, reset ? 0.1 : 0.3);
        c.end_step(1000);
    }
    // A raised theta_min takes over the candidate's average, which measured that factor.
    GravacSettings s = unsmoothed(1);
    s.smoothing = 0.5;
    s.reset_gains = true;
    GravacController c(s);
    step(c, 100, 90, 89.5);  // within omega: theta_min 10x -> 20x
    GravacState st = c.state();
    ASSERT_TRUE(st.raised_theta_min);
    EXPECT_DOUBLE_EQ(st.gain_min, 0.895);
    EXPECT_TRUE(std::isnan(st.gain_candidate));
    EXPECT_EQ(st.candidate, 40);
}

TEST(GravacCheck, SameInputsSameDecisions) {
    auto run = [](std::uint64_t seed) {
        GravacSettings s = gravac_defaults(4);
        s.window = 7;
        GravacController c(s);
        std::mt19937_64 rng(seed);
        std::uniform_real_distribution<double> u(0, 1);
        std::vector<double> out;
        for (int i = 0; i < 400; ++i) {
            double g = 1 + u(rng), m = g * (0.6 + 0.4 * u(rng)), k = m * (0.4 + 0.6 * u(rng));
            GravacDecision d = c.decide({g, m, k});
            c.end_step(500 + 500 * u(rng));
            out.push_back(d.factor);
            out.push_back(c.candidate());
            out.push_back(c.theta_min());
        }
        return out;
    };
    std::vector<double> a = run(3), b = run(3);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, run(4));
}

// Factor to PowerSGD rank.

TEST(GravacRank, HandComputed) {
    EXPECT_EQ(powersgd_rank_for_factor(100, 100, 10), 5);     // 10000 / (10 * 200)
    EXPECT_EQ(powersgd_rank_for_factor(512, 4608, 100), 4);   // 2359296 / 512000 = 4.6
    EXPECT_EQ(powersgd_rank_for_factor(300, 200, 1.5), 80);   // 60000 / 750
    EXPECT_EQ(powersgd_rank_for_factor(4, 4, 1), 2);          // 16 / 8
    EXPECT_EQ(powersgd_rank_for_factor(64, 27, 10), 1);       // 1728 / 910 = 1.9
    EXPECT_EQ(powersgd_rank_for_factor(1, 1000, 10), 1);      // 0.1, at least rank 1
    EXPECT_EQ(powersgd_rank_for_factor(4096, 4096, 1000), 2); // 16777216 / 8192000 = 2.05
}

TEST(GravacRank, KeepsAboutOneOverFactor) {
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<std::int64_t> dim(1, 5000);
    std::uniform_real_distribution<double> f(1, 2000);
    for (int i = 0; i < 2000; ++i) {
        std::int64_t rows = dim(rng), cols = dim(rng);
        double factor = f(rng);
        std::int64_t r = powersgd_rank_for_factor(rows, cols, factor);
        double budget = static_cast<double>(rows * cols) / factor;
        ASSERT_GE(r, 1);
        ASSERT_LE(r, std::min(rows, cols));
        if (r > 1) {
            ASSERT_LE(static_cast<double>(r * (rows + cols)), budget);  // at most 1/f of the floats
        }
        ASSERT_GT(static_cast<double>((r + 1) * (rows + cols)), budget);      // the largest such rank
    }
}

TEST(GravacRank, BadArguments) {
    EXPECT_THROW(powersgd_rank_for_factor(0, 10, 10), acc::Error);
    EXPECT_THROW(powersgd_rank_for_factor(10, -1, 10), acc::Error);
    EXPECT_THROW(powersgd_rank_for_factor(10, 10, 0.5), acc::Error);
    EXPECT_THROW(powersgd_rank_for_factor(10, 10, kNaN), acc::Error);
    EXPECT_THROW(powersgd_rank_for_factor(10, 10, kInf), acc::Error);
    EXPECT_DOUBLE_EQ(keep_fraction_for_factor(10), 0.1);
    EXPECT_EQ(keep_fraction_for_factor(1), 1);
    EXPECT_THROW(keep_fraction_for_factor(0.5), acc::Error);
    EXPECT_THROW(keep_fraction_for_factor(kNaN), acc::Error);
}
