// The per-layer planner: the error model against direct computations, and the
// dynamic program against every combination of levels.
#include "base/error.hpp"
#include "compress/spec.hpp"
#include "regime/plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>

using namespace acc::regime;

namespace {

using Layers = std::vector<std::vector<Candidate>>;
using Choice = std::vector<std::int64_t>;

// Runs `f` and checks that it throws exactly E (not a subclass) with `part` in its message.
template <class E>
void expect_error(const std::function<void()>& f, const std::string& part) {
    try {
        f();
        ADD_FAILURE() << "no exception; expected " << typeid(E).name() << " with '" << part << "'";
    } catch (const acc::Error& e) {
        EXPECT_EQ(typeid(e), typeid(E)) << e.what();
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

struct Found {
    bool found = false;
    Choice choice;
    double cost = 0, error = 0;
    std::int64_t bins_used = 0;
};

// Every combination, in lexicographic order (layer 0 most significant); a later
// one replaces the best only when strictly cheaper, or as cheap with a strictly
// smaller error, so equal ones keep the lowest indices. Sums in layer order.
Found brute_force(const Layers& layers, const std::function<bool(const Found&)>& admits, double bin_width,
                  std::int64_t bins) {
    Found best;
    Found now;
    now.choice.assign(layers.size(), 0);
    while (true) {
        now.cost = now.error = 0;
        now.bins_used = 0;
        for (size_t l = 0; l < layers.size(); ++l) {
            const Candidate& c = layers[l][static_cast<size_t>(now.choice[l])];
            now.cost += c.cost;
            now.error += c.error;
            now.bins_used += error_bins(c.error, bin_width, bins);
        }
        if (admits(now) && (!best.found || now.cost < best.cost || (now.cost == best.cost && now.error < best.error))) {
            best = now;
            best.found = true;
        }
        size_t l = layers.size();
        while (l > 0) {
            --l;
            if (++now.choice[l] < static_cast<std::int64_t>(layers[l].size())) break;
            now.choice[l] = 0;
            if (l == 0) return best;
        }
    }
}

// The plan the header describes, found by enumeration: the best combination
// within `usable` bins, given up for fewer bins while its summed error is over
// the budget by rounding, else the least-error plan.
LevelPlan expected_plan(const Layers& layers, double budget, std::int64_t bins) {
    LevelPlan p;
    p.budget = budget;
    p.bins = bins;
    p.bin_width = budget / static_cast<double>(bins);
    const auto L = static_cast<std::int64_t>(layers.size());
    std::int64_t usable = bins;
    while (usable >= 0) {
        Found f = brute_force(
            layers, [&](const Found& c) { return c.bins_used <= usable; }, p.bin_width, bins);
        if (!f.found) break;
        if (f.error <= budget) {
            p.status = PlanStatus::optimal;
            p.choice = f.choice;
            p.cost = f.cost;
            p.error = f.error;
            p.bins_used = f.bins_used;
            p.budget_lost = std::min(budget, static_cast<double>(L + bins - usable) * p.bin_width);
            return p;
        }
        usable = f.bins_used - 1;
    }
    // Least error per layer, then lower cost, then lower index.
    for (const auto& options : layers) {
        size_t best = 0;
        for (size_t j = 1; j < options.size(); ++j)
            if (options[j].error < options[best].error ||
                (options[j].error == options[best].error && options[j].cost < options[best].cost))
                best = j;
        p.choice.push_back(static_cast<std::int64_t>(best));
        p.cost += options[best].cost;
        p.error += options[best].error;
        p.bins_used += error_bins(options[best].error, p.bin_width, bins);
    }
    p.status = p.error <= budget ? PlanStatus::least_error : PlanStatus::infeasible;
    p.budget_lost = std::min(budget, static_cast<double>(L + bins - usable) * p.bin_width);
    return p;
}

// Cheapest cost over plans whose true summed error is at most `budget`; NaN if none.
double true_optimum(const Layers& layers, double budget) {
    Found f = brute_force(
        layers, [&](const Found& c) { return c.error <= budget; }, 1.0, 1);
    return f.found ? f.cost : std::numeric_limits<double>::quiet_NaN();
}

// Checks one instance against enumeration. `exact`: costs and errors add up
// without rounding, so the chosen levels themselves must agree.
void check_instance(const Layers& layers, double budget, std::int64_t bins, bool exact, const std::string& what) {
    SCOPED_TRACE(what);
    const LevelPlan got = plan_levels(layers, budget, bins);
    const LevelPlan want = expected_plan(layers, budget, bins);
    ASSERT_EQ(got.status, want.status);
    EXPECT_EQ(got.choice, want.choice);
    EXPECT_EQ(got.bins_used, want.bins_used);
    if (exact) {
        EXPECT_EQ(got.cost, want.cost);
        EXPECT_EQ(got.error, want.error);
    } else {
        EXPECT_NEAR(got.cost, want.cost, 1e-12 * (1 + want.cost));
        EXPECT_NEAR(got.error, want.error, 1e-12 * (1 + want.error));
    }
    EXPECT_EQ(got.bin_width, want.bin_width);
    EXPECT_EQ(got.budget_lost, want.budget_lost);
    ASSERT_EQ(got.choice.size(), layers.size());

    // The reported totals are those of the reported choice.
    double cost = 0, error = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        cost += layers[l][static_cast<size_t>(got.choice[l])].cost;
        error += layers[l][static_cast<size_t>(got.choice[l])].error;
    }
    EXPECT_EQ(got.cost, cost);
    EXPECT_EQ(got.error, error);

    // Against the true (undiscretised) errors.
    const double best_within_budget = true_optimum(layers, budget);
    if (got.feasible()) {
        EXPECT_LE(got.error, budget);
        EXPECT_GE(got.cost, best_within_budget);  // nothing within the budget is cheaper than the optimum
        const double best_within_reduced = true_optimum(layers, budget - got.budget_lost);
        if (!std::isnan(best_within_reduced)) {
            EXPECT_LE(got.cost, best_within_reduced);
        }
    } else {
        EXPECT_GT(got.error, budget);
        EXPECT_TRUE(std::isnan(best_within_budget));
    }
}

}  // namespace

// ---------------------------------------------------------------------------
// Error model

TEST(PlanErrorModel, PowerSgdResidualOfADiagonalMatrixIsTheNormOfWhatRankRDrops) {
    // diag(-1, 5, 2, 3): singular values 5, 3, 2, 1. The best rank-r
    // approximation keeps the r largest diagonal entries in magnitude.
    const std::vector<double> diagonal = {-1, 5, 2, 3};
    const std::vector<double> singular = {5, 3, 2, 1};
    for (std::int64_t r = 0; r <= 5; ++r) {
        std::vector<double> magnitudes;
        for (double d : diagonal) magnitudes.push_back(std::abs(d));
        std::sort(magnitudes.begin(), magnitudes.end(), std::greater<>());
        double dropped = 0;  // squared Frobenius norm of the matrix minus its approximation
        for (size_t i = static_cast<size_t>(std::min<std::int64_t>(r, 4)); i < magnitudes.size(); ++i)
            dropped += magnitudes[i] * magnitudes[i];
        EXPECT_DOUBLE_EQ(powersgd_residual(singular, r), std::sqrt(dropped)) << "rank " << r;
    }
    EXPECT_DOUBLE_EQ(powersgd_residual(singular, 0), std::sqrt(39.0));
    EXPECT_DOUBLE_EQ(powersgd_residual(singular, 2), std::sqrt(5.0));
    EXPECT_EQ(powersgd_residual(singular, 4), 0.0);
    EXPECT_EQ(powersgd_residual(singular, 100), 0.0);
    EXPECT_EQ(powersgd_residual({}, 1), 0.0);
}

TEST(PlanErrorModel, PowerSgdResidualOfAFullMatrix) {
    // [[3, 1], [1, 3]] = 4 u u^T + 2 v v^T with u = (1, 1)/sqrt2, v = (1, -1)/sqrt2.
    // Rank 1 keeps [[2, 2], [2, 2]]; the residual [[1, -1], [-1, 1]] has norm 2.
    const double m[2][2] = {{3, 1}, {1, 3}};
    double residual = 0;
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) residual += (m[i][j] - 2) * (m[i][j] - 2);
    EXPECT_DOUBLE_EQ(powersgd_residual({4, 2}, 1), std::sqrt(residual));
    EXPECT_DOUBLE_EQ(powersgd_residual({4, 2}, 0), std::sqrt(9.0 + 1 + 1 + 9));
}

TEST(PlanErrorModel, PowerSgdResidualRejectsBadSpectra) {
    expect_error<acc::UsageError>([] { powersgd_residual({2, 1}, -1); }, "rank -1");
    expect_error<acc::Error>([] { powersgd_residual({2, 3, 1}, 1); }, "singular value 1 (3) is larger");
    expect_error<acc::Error>([] { powersgd_residual({2, -1}, 1); }, "singular value 1 is -1");
    expect_error<acc::Error>([] { powersgd_residual({std::nan(""), 1}, 1); }, "singular value 0 is NaN");
    expect_error<acc::Error>([] { powersgd_residual({HUGE_VAL, 1}, 1); }, "singular value 0 is infinite");
}

TEST(PlanErrorModel, TopkTailFractionsByHand) {
    // Ten entries, squares 25, 16, 9, 4, 1 and five zeros: 55 in all. The Top-k
    // compressor keeps max(1, floor(f * 10)): 1 entry up to f = 0.1, 3 at 0.3, all at 1.
    const std::vector<float> g = {1, 0, -2, 0, 3, 0, -4, 0, 5, 0};
    const std::vector<double> tails = topk_tail_fractions(g);
    ASSERT_EQ(tails.size(), kTopkFractions.size());
    for (size_t f = 0; f < kTopkFractions.size(); ++f) {
        const double f_value = kTopkFractions[f];
        const double want = f_value <= 0.1 ? 30.0 / 55 : f_value == 0.3 ? 5.0 / 55 : 0.0;
        EXPECT_DOUBLE_EQ(tails[f], want) << "fraction " << f_value;
    }
    // The residual: the norm of what Top-k leaves out.
    EXPECT_DOUBLE_EQ(topk_residual(std::sqrt(55.0), tails, 0.3), std::sqrt(5.0));
    EXPECT_DOUBLE_EQ(topk_residual(std::sqrt(55.0), tails, 0.1), std::sqrt(30.0));
    EXPECT_DOUBLE_EQ(topk_residual(std::sqrt(55.0), tails, 1.0), 0.0);
}

TEST(PlanErrorModel, TopkTailFractionsEqualADirectComputation) {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> normal(0, 1);
    for (std::int64_t n : {1, 2, 7, 999, 4096, 30011}) {
        std::vector<float> g(static_cast<size_t>(n));
        for (float& v : g) v = normal(rng) * (rng() % 4 == 0 ? 100.0f : 1.0f);
        const std::vector<double> tails = topk_tail_fractions(g);
        double total = 0;
        for (float v : g) total += static_cast<double>(v) * v;
        for (size_t f = 0; f < kTopkFractions.size(); ++f) {
            // What Top-k sends: the k largest magnitudes; the residual is the rest.
            const std::int64_t k = acc::compress::kept_entries(kTopkFractions[f], n);
            std::vector<double> magnitudes(g.begin(), g.end());
            for (double& m : magnitudes) m = std::abs(m);
            std::nth_element(magnitudes.begin(), magnitudes.begin() + k - 1, magnitudes.end(), std::greater<>());
            double outside = 0;
            for (size_t i = static_cast<size_t>(k); i < magnitudes.size(); ++i) outside += magnitudes[i] * magnitudes[i];
            SCOPED_TRACE("n " + std::to_string(n) + ", fraction " + std::to_string(kTopkFractions[f]));
            EXPECT_NEAR(tails[f], outside / total, 1e-12);
            EXPECT_NEAR(topk_residual(std::sqrt(total), tails, kTopkFractions[f]), std::sqrt(outside),
                        1e-9 * std::sqrt(total));
            EXPECT_GE(tails[f], 0.0);
            EXPECT_LE(tails[f], 1.0);
        }
        EXPECT_EQ(tails.back(), 0.0);  // fraction 1 keeps everything
    }
}

TEST(PlanErrorModel, TopkTailFractionsOfNothingAreZero) {
    EXPECT_EQ(topk_tail_fractions(std::vector<float>{}), std::vector<double>(kTopkFractions.size(), 0.0));
    EXPECT_EQ(topk_tail_fractions(std::vector<float>(5, 0.0f)), std::vector<double>(kTopkFractions.size(), 0.0));
}

TEST(PlanErrorModel, TopkRejectsBadProfiles) {
    const std::vector<double> ok(kTopkFractions.size(), 0.5);
    expect_error<acc::Error>([] { topk_tail_fractions(std::vector<float>{1, std::nanf("")}); }, "entry 1 of the gradient is NaN");
    expect_error<acc::Error>([] { topk_tail_fractions(std::vector<float>{HUGE_VALF}); }, "entry 0 of the gradient is infinite");
    expect_error<acc::UsageError>([&] { topk_residual(1, ok, 0.05); }, "Top-k fraction 0.05");
    expect_error<acc::Error>([] { topk_residual(1, {0.5, 0.5}, 0.1); }, "has 2 tail fractions; expected 9");
    expect_error<acc::Error>([&] { topk_residual(-1, ok, 0.1); }, "gradient norm is -1");
    auto bad = ok;
    bad[3] = 1.5;
    expect_error<acc::Error>([&] { topk_residual(1, bad, 0.1); }, "must be in [0, 1]");
    bad[3] = std::nan("");
    expect_error<acc::Error>([&] { topk_residual(1, bad, 0.1); }, "must be in [0, 1]");
}

TEST(PlanErrorModel, ErrorMeasures) {
    EXPECT_EQ(kDefaultErrorMeasure, ErrorMeasure::summed_norms);
    for (ErrorMeasure m : {ErrorMeasure::summed_norms, ErrorMeasure::summed_squares})
        EXPECT_EQ(parse_error_measure(error_measure_name(m)), m);
    EXPECT_STREQ(error_measure_name(ErrorMeasure::summed_squares), "summed_squares");
    expect_error<acc::UsageError>([] { parse_error_measure("squares"); },
                                  "--plan-error: must be summed_norms or summed_squares, not 'squares'");
    EXPECT_EQ(layer_error(3, ErrorMeasure::summed_norms), 3.0);
    EXPECT_EQ(layer_error(3, ErrorMeasure::summed_squares), 9.0);
    expect_error<acc::Error>([] { layer_error(-2, ErrorMeasure::summed_norms); }, "residual norm is -2");
    expect_error<acc::Error>([] { layer_error(std::nan(""), ErrorMeasure::summed_squares); }, "residual norm is NaN");
}

// ---------------------------------------------------------------------------
// The dynamic program

TEST(PlanLevels, ErrorsAreRoundedUpToWholeBins) {
    EXPECT_EQ(error_bins(0, 0.25, 8), 0);
    EXPECT_EQ(error_bins(0.25, 0.25, 8), 1);
    EXPECT_EQ(error_bins(0.3, 0.25, 8), 2);
    EXPECT_EQ(error_bins(2.0, 0.25, 8), 8);
    EXPECT_EQ(error_bins(2.01, 0.25, 8), 9);     // does not fit: bins + 1
    EXPECT_EQ(error_bins(1e300, 1e-300, 8), 9);  // no overflow
    EXPECT_EQ(error_bins(0, 0, 8), 0);           // a zero budget fits zero errors only
    EXPECT_EQ(error_bins(1e-300, 0, 8), 9);
    // Here error / width rounds down to exactly 3, but 3 bins fall short of the error.
    const double edge_error = 1.509829050982545, edge_width = 0.5032763503275149;
    ASSERT_EQ(edge_error / edge_width, 3.0);
    ASSERT_LT(3 * edge_width, edge_error);
    EXPECT_EQ(error_bins(edge_error, edge_width, 10), 4);
    // Wherever a quotient rounds, the bins cover the error.
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < 10000; ++i) {
        const double width = u(rng) / 1000 + 1e-9, error = u(rng);
        const std::int64_t bins = 1000000;
        const std::int64_t d = error_bins(error, width, bins);
        if (d == bins + 1) {
            ASSERT_GT(error, static_cast<double>(bins) * width);
        } else {
            ASSERT_GE(static_cast<double>(d) * width, error);
            ASSERT_LT(static_cast<double>(d - 1) * width, error);
        }
    }
}

TEST(PlanLevels, PicksTheCheapestLevelsWithinTheBudget) {
    // PowerSGD ranks 1, 2, 4 on three layers: cost = floats, error = residual norm.
    const Layers layers = {
        {{100, 3.0}, {200, 2.0}, {400, 1.0}},
        {{50, 1.0}, {100, 0.5}, {200, 0.25}},
        {{10, 4.0}, {20, 1.0}, {40, 0.5}},
    };
    const double budget = uniform_budget(layers, {1, 1, 1});  // rank 2 everywhere: 3.5, 320 floats
    EXPECT_EQ(budget, 3.5);
    const LevelPlan p = plan_levels(layers, budget, 14);  // bins of 0.25: every error on an edge
    EXPECT_EQ(p.status, PlanStatus::optimal);
    EXPECT_TRUE(p.feasible());
    // Of the 27 plans, those within 3.5 by cost: (1, 0, 2) 290, (1, 1, 1) 320, (1, 1, 2) 340, ...:
    // rank 2 on the large layer, rank 1 on the middle one and rank 4 on the small one.
    EXPECT_EQ(p.choice, (Choice{1, 0, 2}));
    EXPECT_EQ(p.cost, 290.0);
    EXPECT_EQ(p.error, 3.5);
    EXPECT_EQ(p.budget, 3.5);
    EXPECT_EQ(p.bins, 14);
    EXPECT_EQ(p.bins_used, 14);
    EXPECT_EQ(p.bin_width, 0.25);
    EXPECT_EQ(p.budget_lost, 0.75);  // 3 layers x 0.25
    // With 1000 bins of 0.0035 the errors 2, 1 and 0.5 round up to 572 + 286 + 143 = 1001 bins, and
    // the uniform plan's to 572 + 143 + 286: neither fits. The result is the cheapest plan within
    // 3.5 - budget_lost (3 x 0.0035): (1, 1, 2) at 340, error 3.
    const LevelPlan fine = plan_levels(layers, budget, 1000);
    EXPECT_EQ(fine.status, PlanStatus::optimal);
    EXPECT_EQ(fine.choice, (Choice{1, 1, 2}));
    EXPECT_EQ(fine.cost, 340.0);
    EXPECT_DOUBLE_EQ(fine.budget_lost, 3 * 0.0035);
}

TEST(PlanLevels, EqualCostPrefersTheSmallerError) {
    // One layer: two levels of one cost.
    EXPECT_EQ(plan_levels({{{1, 0.5}, {1, 0.25}}}, 1.0).choice, (Choice{1}));
    // Two layers: (0, 0) and (1, 1) both cost 3 and fit; (1, 1) has the smaller
    // summed error (1.0 against 1.25) and wins over the lower indices.
    // (0, 1) costs 2 but its error 1.5 is over the budget.
    const Layers layers = {{{1, 0.75}, {2, 0.25}}, {{2, 0.5}, {1, 0.75}}};
    const LevelPlan p = plan_levels(layers, 1.25, 20);  // bins of 1/16: no rounding
    EXPECT_EQ(p.status, PlanStatus::optimal);
    EXPECT_EQ(p.choice, (Choice{1, 1}));
    EXPECT_EQ(p.cost, 3.0);
    EXPECT_EQ(p.error, 1.0);
}

TEST(PlanLevels, EqualCostAndErrorPreferTheLowerIndicesFromTheFirstLayer) {
    // Identical levels: the first.
    EXPECT_EQ(plan_levels({{{2, 1}, {2, 1}, {2, 1}}}, 1.0).choice, (Choice{0}));
    // (0, 1) and (1, 0) both cost 3 with error 3; (0, 0) is over the budget,
    // (1, 1) dearer. The first layer's lower index decides.
    const Layers layers = {{{1, 2}, {2, 1}}, {{1, 2}, {2, 1}}};
    const LevelPlan p = plan_levels(layers, 3, 3);
    EXPECT_EQ(p.choice, (Choice{0, 1}));
    // The same with the layers' levels listed the other way round.
    const Layers swapped = {{{2, 1}, {1, 2}}, {{2, 1}, {1, 2}}};
    EXPECT_EQ(plan_levels(swapped, 3, 3).choice, (Choice{0, 1}));
    // And when the tie is decided at the last layer only.
    const Layers last = {{{5, 0}}, {{1, 2}, {2, 1}}, {{1, 2}, {2, 1}}, {{1, 1}, {1, 1}}};
    EXPECT_EQ(plan_levels(last, 4, 4).choice, (Choice{0, 0, 1, 0}));
}

TEST(PlanLevels, AnInfeasibleBudgetGivesTheLeastErrorPlan) {
    // The least error is 1 + 0.5 = 1.5 > 1: no plan fits. Per layer the least
    // error, then the lower cost (3 against 5), then the lower index (1 against 2).
    const Layers layers = {{{5, 1}, {3, 1}, {3, 1}, {1, 2}}, {{1, 0.75}, {9, 0.5}}};
    LevelPlan p;
    ASSERT_NO_THROW(p = plan_levels(layers, 1.0, 100));
    EXPECT_EQ(p.status, PlanStatus::infeasible);
    EXPECT_FALSE(p.feasible());
    EXPECT_EQ(p.choice, (Choice{1, 1}));
    EXPECT_EQ(p.cost, 12.0);
    EXPECT_EQ(p.error, 1.5);
    EXPECT_GT(p.error, p.budget);
    EXPECT_STREQ(plan_status_name(p.status), "infeasible");
}

TEST(PlanLevels, ABudgetMetOnlyBetweenBinEdgesGivesTheLeastErrorPlan) {
    // Each level's error 0.375 takes 2 bins of 0.25, 4 in all > 3, but their
    // sum 0.75 is the budget: the least-error plan, which fits.
    const Layers layers = {{{5, 0.375}, {1, 0.5}}, {{5, 0.375}, {1, 0.5}}};
    const LevelPlan p = plan_levels(layers, 0.75, 3);
    EXPECT_EQ(p.status, PlanStatus::least_error);
    EXPECT_TRUE(p.feasible());
    EXPECT_EQ(p.choice, (Choice{0, 0}));
    EXPECT_EQ(p.error, 0.75);
    EXPECT_EQ(p.bins_used, 4);
    // With finer bins the program finds it itself.
    EXPECT_EQ(plan_levels(layers, 0.75, 8).status, PlanStatus::optimal);
}

TEST(PlanLevels, RoundingOverTheBudgetGivesUpABin) {
    // Bins of 0.1: 0.2, 0.4 and 0.3 take 2 + 4 + 3 = 9 bins, all there are, but
    // 0.2 + 0.4 + 0.3 adds up to 0.9000000000000001 > 0.9. The program is rerun
    // with 8 bins and takes 0.1 for the last layer instead.
    const Layers layers = {{{1, 0.2}}, {{1, 0.4}}, {{1, 0.3}, {3, 0.1}}};
    const LevelPlan p = plan_levels(layers, 0.9, 9);
    EXPECT_EQ(p.status, PlanStatus::optimal);
    EXPECT_EQ(p.choice, (Choice{0, 0, 1}));
    EXPECT_LE(p.error, 0.9);
    EXPECT_EQ(p.cost, 5.0);
    EXPECT_DOUBLE_EQ(p.budget_lost, 4 * p.bin_width);  // 3 layers and the bin given up
    // Without the alternative, the plan is over the budget: infeasible.
    EXPECT_EQ(plan_levels({{{1, 0.2}}, {{1, 0.4}}, {{1, 0.3}}}, 0.9, 9).status, PlanStatus::infeasible);
}

TEST(PlanLevels, AZeroBudgetAdmitsOnlyZeroErrors) {
    const LevelPlan p = plan_levels({{{1, 0}, {0, 0.1}}, {{7, 0}}}, 0.0);
    EXPECT_EQ(p.status, PlanStatus::optimal);
    EXPECT_EQ(p.choice, (Choice{0, 0}));
    EXPECT_EQ(p.budget_lost, 0.0);
    EXPECT_EQ(plan_levels({{{1, 0.5}}}, 0.0).status, PlanStatus::infeasible);
}

TEST(PlanLevels, EqualsBruteForceOnExactInstances) {
    // Whole costs (with many ties) and errors in eighths: every sum is exact, so
    // the program and the enumeration must pick the very same levels.
    std::mt19937_64 rng(2024);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const std::int64_t bin_choices[] = {1, 2, 3, 4, 7, 8, 10, 16, 64, 100, 1000};
    int counted[3] = {0, 0, 0};
    for (int t = 0; t < 600; ++t) {
        Layers layers(static_cast<size_t>(pick(1, 5)));
        for (auto& options : layers) {
            options.resize(static_cast<size_t>(pick(1, 4)));
            for (auto& c : options) c = {static_cast<double>(pick(0, 9)), static_cast<double>(pick(0, 24)) / 8};
        }
        double budget;
        if (t % 3 == 0) {
            Choice uniform;
            for (const auto& options : layers) uniform.push_back(pick(0, static_cast<std::int64_t>(options.size()) - 1));
            budget = uniform_budget(layers, uniform, static_cast<double>(pick(2, 12)) / 8);
        } else {
            budget = static_cast<double>(pick(0, 12 * static_cast<std::int64_t>(layers.size()))) / 8;
        }
        const std::int64_t bins = bin_choices[pick(0, 10)];
        check_instance(layers, budget, bins, true, "instance " + std::to_string(t));
        ++counted[static_cast<int>(plan_levels(layers, budget, bins).status)];
        if (HasFatalFailure()) return;
    }
    // The instances reach every outcome.
    EXPECT_GT(counted[0], 100);
    EXPECT_GT(counted[1], 5);
    EXPECT_GT(counted[2], 20);
}

TEST(PlanLevels, EqualsBruteForceOnRealValuedInstances) {
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> u(0, 1);
    const std::int64_t bin_choices[] = {5, 10, 33, 100, 1000, 10000};
    for (int t = 0; t < 300; ++t) {
        Layers layers(1 + rng() % 5);
        for (auto& options : layers) {
            options.resize(1 + rng() % 4);
            for (auto& c : options) c = {1000 * u(rng), 2 * u(rng) * u(rng)};
        }
        Choice uniform;
        for (const auto& options : layers) uniform.push_back(static_cast<std::int64_t>(rng() % options.size()));
        const double budget = uniform_budget(layers, uniform, 0.5 + u(rng));
        check_instance(layers, budget, bin_choices[rng() % 6], false, "instance " + std::to_string(t));
        if (HasFatalFailure()) return;
    }
}

TEST(PlanLevels, WithErrorsOnBinEdgesTheUniformPlanIsNeverCheaper) {
    // Errors in sixteenths and bins of 1/16: the uniform plan takes exactly the
    // budget's bins, so it fits, and the result can only be cheaper.
    std::mt19937_64 rng(5);
    for (int t = 0; t < 200; ++t) {
        Layers layers(1 + rng() % 6);
        Choice uniform;
        for (auto& options : layers) {
            options.resize(1 + rng() % 5);
            for (auto& c : options) c = {static_cast<double>(rng() % 1000), static_cast<double>(rng() % 64) / 16};
            uniform.push_back(static_cast<std::int64_t>(rng() % options.size()));
        }
        const double budget = uniform_budget(layers, uniform);
        const auto bins = std::max<std::int64_t>(1, static_cast<std::int64_t>(budget * 16));
        const LevelPlan p = plan_levels(layers, budget, bins);
        double uniform_cost = 0;
        for (size_t l = 0; l < layers.size(); ++l) uniform_cost += layers[l][static_cast<size_t>(uniform[l])].cost;
        SCOPED_TRACE("instance " + std::to_string(t));
        ASSERT_EQ(p.status, PlanStatus::optimal);
        EXPECT_LE(p.error, budget);
        EXPECT_LE(p.cost, uniform_cost);
    }
}

TEST(PlanLevels, RejectsBadInput) {
    const Layers ok = {{{1, 1}}};
    expect_error<acc::Error>([] { plan_levels({}, 1); }, "at least one layer");
    expect_error<acc::Error>([] { plan_levels({{{1, 1}}, {}}, 1); }, "layer 1 has no candidate levels");
    const double nan = std::nan(""), inf = HUGE_VAL;
    expect_error<acc::Error>([&] { plan_levels({{{1, 1}, {nan, 1}}}, 1); }, "layer 0, candidate 1: cost is NaN");
    expect_error<acc::Error>([&] { plan_levels({{{inf, 1}}}, 1); }, "layer 0, candidate 0: cost is infinite");
    expect_error<acc::Error>([&] { plan_levels({{{1, 1}}, {{-2, 1}}}, 1); }, "layer 1, candidate 0: cost is -2");
    expect_error<acc::Error>([&] { plan_levels({{{1, nan}}}, 1); }, "layer 0, candidate 0: error is NaN");
    expect_error<acc::Error>([&] { plan_levels({{{1, inf}}}, 1); }, "error is infinite");
    expect_error<acc::Error>([&] { plan_levels({{{1, -0.5}}}, 1); }, "error is -0.5");
    expect_error<acc::Error>([&] { plan_levels(ok, -1); }, "error budget is -1");
    expect_error<acc::Error>([&] { plan_levels(ok, nan); }, "error budget is NaN");
    expect_error<acc::Error>([&] { plan_levels(ok, inf); }, "error budget is infinite");
    expect_error<acc::UsageError>([&] { plan_levels(ok, 1, 0); }, "error bins 0 is outside [1, 10000000]");
    expect_error<acc::UsageError>([&] { plan_levels(ok, 1, -3); }, "error bins -3");
    expect_error<acc::UsageError>([&] { plan_levels(ok, 1, kMaxErrorBins + 1); }, "outside");
    expect_error<acc::UsageError>([&] { plan_levels(Layers(100, {{1, 1}}), 1, kMaxErrorBins); }, "use at most");
}

TEST(PlanLevels, UniformBudget) {
    const Layers layers = {{{4, 1.5}, {2, 3}}, {{8, 0.25}, {1, 2}}};
    EXPECT_EQ(uniform_budget(layers, {0, 1}), 3.5);
    EXPECT_EQ(uniform_budget(layers, {1, 0}, 2), 6.5);
    EXPECT_EQ(uniform_budget(layers, {1, 0}, 0), 0.0);
    expect_error<acc::UsageError>([&] { uniform_budget(layers, {0, 0}, -1); }, "budget factor -1");
    expect_error<acc::UsageError>([&] { uniform_budget(layers, {0, 0}, HUGE_VAL); }, "budget factor inf");
    expect_error<acc::Error>([&] { uniform_budget(layers, {0}); }, "name 1 layers, but there are 2");
    expect_error<acc::Error>([&] { uniform_budget(layers, {0, 2}); }, "layer 1 is candidate 2, but the layer has 2");
    expect_error<acc::Error>([&] { uniform_budget(layers, {-1, 0}); }, "layer 0 is candidate -1");
    expect_error<acc::Error>([] { uniform_budget({{{1, std::nan("")}}}, {0}); }, "error is NaN");
}
