// regime-detect --plan's glue (lib/app/regime_plan): candidates parsed and
// checked, errors predicted from the profile of the epoch before, the budget of
// Accordion's levels, and never more sent than they send.
#include "app/regime_plan.hpp"
#include "base/error.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

using namespace acc;

namespace {

// Three parameters: a large matrix whose spectrum has one value that matters, a
// small one whose spectrum decays slowly, and a vector.
io::GradStats sample(std::int64_t epochs) {
    io::GradStats g;
    g.parameters = {{"big.weight", {256, 128}}, {"small.weight", {32, 32}}, {"small.bias", {32}}};
    g.has_profile = true;
    g.profile.topk_fractions.assign(regime::kTopkFractions.begin(), regime::kTopkFractions.end());
    for (std::int64_t e = 0; e < epochs; ++e) {
        std::vector<double> big(128, 0.0), small(32, 0.0);
        if (e == 0) {
            big[0] = 10, big[1] = 0.01;
            small[0] = 5, small[1] = 4, small[2] = 3, small[3] = 2, small[4] = 1;
        } else {  // the reverse: planning epoch 1 on its own profile would choose otherwise
            for (int i = 0; i < 5; ++i) big[i] = 5 - i;
            small[0] = 10, small[1] = 0.01;
        }
        g.profile.singular_values.push_back({big, small, {}});
        std::vector<double> tail = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.0};
        g.profile.topk_tail.push_back({tail, tail, tail});
        io::EpochStats s;
        s.steps = 10;
        s.norm = {10, 7.4, 1};
        g.epochs.push_back(s);
    }
    return g;
}

regime::Decisions decisions(const std::vector<int>& critical_epochs, std::int64_t epochs) {
    regime::Decisions d;
    d.epochs = epochs;
    d.columns = 3;
    d.critical.assign(static_cast<size_t>(epochs * 3), 0);
    for (int e : critical_epochs)
        for (int p = 0; p < 3; ++p) d.critical[d.at(e, p)] = 1;
    return d;
}

compress::Spec level(const std::string& text) { return compress::parse_spec(text); }

std::vector<std::string> texts(const std::vector<compress::Spec>& specs) {
    std::vector<std::string> out;
    for (const auto& spec : specs) out.push_back(spec.text());
    return out;
}

app::PlanConfig ranks(const std::vector<std::string>& candidates) {
    app::PlanConfig c;
    for (const auto& text : candidates) c.candidates.push_back(level(text));
    return c;
}

std::vector<std::string> levels_of(const app::PlannedSchedule& s, std::int64_t epoch) {
    std::vector<std::string> out;
    for (size_t p = 0; p < 3; ++p) out.push_back(s.levels[static_cast<size_t>(s.level[static_cast<size_t>(epoch) * 3 + p])].text());
    return out;
}

}  // namespace

TEST(AppPlan, CandidatesAreCanonicalWithoutRepeats) {
    EXPECT_EQ(texts(app::parse_plan_candidates("powersgd:2, topk:0.010,powersgd:2,none")),
              (std::vector<std::string>{"powersgd:2", "topk:0.01", "none"}));
    EXPECT_THROW(app::parse_plan_candidates(" "), UsageError);
    EXPECT_THROW(app::parse_plan_candidates("powersgd:1,"), UsageError);
    EXPECT_THROW(app::parse_plan_candidates("topk:0.05"), UsageError);  // off the profile's grid
    EXPECT_THROW(app::parse_plan_candidates("randomk:0.1"), UsageError);
    EXPECT_NO_THROW(app::check_plannable("--low", level("topk:0.3")));
    EXPECT_THROW(app::check_plannable("--low", level("fp16")), UsageError);
}

TEST(AppPlan, CriticalEpochTradesRankBetweenLayersWithinTheBudget) {
    const io::GradStats g = sample(3);
    const auto s = app::plan_schedule(ranks({"powersgd:1", "powersgd:2", "powersgd:4"}), level("powersgd:2"), level("powersgd:1"),
                                      "grads.h5", g, decisions({0, 1}, 3));
    ASSERT_EQ(s.epochs.size(), 3u);
    // Epoch 0: rank 2 everywhere costs 384 x 2 + 64 x 2 floats and errs sqrt(9+4+1) on
    // the small matrix; rank 1 on the big one (error 0.01) buys rank 4 on the small one (error 1).
    const app::PlannedEpoch& e0 = s.epochs[0];
    EXPECT_EQ(levels_of(s, 0), (std::vector<std::string>{"powersgd:1", "powersgd:4", "none"}));
    EXPECT_FALSE(e0.kept_uniform);
    EXPECT_DOUBLE_EQ(e0.uniform_floats, 768 + 128 + 32);
    EXPECT_DOUBLE_EQ(e0.floats, 384 + 256 + 32);
    EXPECT_NEAR(e0.budget, std::sqrt(14.0), 1e-12);
    EXPECT_NEAR(e0.error, 0.01 + 1.0, 1e-12);
    // Epoch 1 is predicted by epoch 0's profile, so it plans the same.
    EXPECT_EQ(s.epochs[1].profile_epoch, 0);
    EXPECT_EQ(levels_of(s, 1), levels_of(s, 0));
    // Epoch 2, not critical, has rank 1 everywhere: nothing is cheaper, so Accordion's levels stay.
    EXPECT_EQ(s.epochs[2].profile_epoch, 1);
    EXPECT_TRUE(s.epochs[2].kept_uniform);
    EXPECT_EQ(levels_of(s, 2), (std::vector<std::string>{"powersgd:1", "powersgd:1", "none"}));
    EXPECT_EQ(s.levels.front().text(), "none");
}

TEST(AppPlan, NoPlanWithinTheBudgetKeepsAccordionsLevels) {
    app::PlanConfig c = ranks({"powersgd:1", "powersgd:4"});
    c.budget_factor = 0;  // only a lossless plan fits, and none is among the candidates
    const auto s = app::plan_schedule(c, level("powersgd:2"), level("powersgd:1"), "grads.h5", sample(1), decisions({0}, 1));
    EXPECT_TRUE(s.epochs[0].kept_uniform);
    EXPECT_EQ(s.epochs[0].status, regime::PlanStatus::infeasible);
    EXPECT_EQ(levels_of(s, 0), (std::vector<std::string>{"powersgd:2", "powersgd:2", "none"}));
    EXPECT_DOUBLE_EQ(s.epochs[0].floats, s.epochs[0].uniform_floats);
}

TEST(AppPlan, SummedSquaresLeaveLessRoom) {
    // The budget is then the squared residual of Accordion's levels, 0 + 14.
    app::PlanConfig c = ranks({"powersgd:1", "powersgd:2", "powersgd:4"});
    c.error = regime::ErrorMeasure::summed_squares;
    const auto s = app::plan_schedule(c, level("powersgd:2"), level("powersgd:1"), "grads.h5", sample(1), decisions({0}, 1));
    EXPECT_NEAR(s.epochs[0].budget, 14.0, 1e-12);
    EXPECT_LE(s.epochs[0].error, s.epochs[0].budget);
    EXPECT_LE(s.epochs[0].floats, s.epochs[0].uniform_floats);
}

TEST(AppPlan, RefusesInputsItCannotPlan) {
    io::GradStats g = sample(1);
    const auto d = decisions({0}, 1);
    g.has_profile = false;
    try {
        app::plan_schedule(ranks({"powersgd:1"}), level("powersgd:2"), level("powersgd:1"), "grads.h5", g, d);
        FAIL() << "planned without a profile";
    } catch (const FileError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("grads.h5: holds no compressibility profile", 0), 0u) << e.what();
    }
    g = sample(1);
    g.profile.topk_fractions = {0.01, 0.1};
    EXPECT_THROW(app::plan_schedule(ranks({"topk:0.01"}), level("powersgd:2"), level("powersgd:1"), "grads.h5", g, d), FileError);
    // Without Top-k levels, another grid does not matter.
    EXPECT_NO_THROW(app::plan_schedule(ranks({"powersgd:1"}), level("powersgd:2"), level("powersgd:1"), "grads.h5", g, d));
}

// A profile whose every number is in range can still give an infinite error
// (squares beyond a double): the error names the file, the dataset, the epoch and
// the parameter.
TEST(AppPlan, AnInfiniteErrorNamesTheFileDatasetEpochAndParameter) {
    io::GradStats g = sample(2);
    for (double& s : g.profile.singular_values[0][1]) s *= 1e300;
    const auto d = decisions({0}, 2);
    try {
        app::plan_schedule(ranks({"powersgd:1"}), level("powersgd:2"), level("powersgd:1"), "grads.h5", g, d);
        FAIL() << "planned with an infinite residual norm";
    } catch (const FileError& e) {
        EXPECT_EQ(std::string(e.what()), "grads.h5: /profile/singular_values/small.weight at epoch 0, parameter "
                                         "'small.weight': powersgd:2's residual norm is infinite; it must be a finite "
                                         "number >= 0");
    }
    g = sample(2);
    g.epochs[0].norm[0] = 1e200;  // finite, but its square is not
    app::PlanConfig squares = ranks({"topk:0.01"});
    squares.error = regime::ErrorMeasure::summed_squares;
    try {
        app::plan_schedule(squares, level("powersgd:2"), level("powersgd:1"), "grads.h5", g, d);
        FAIL() << "planned with an infinite error";
    } catch (const FileError& e) {
        EXPECT_EQ(std::string(e.what()), "grads.h5: /profile/topk_tail at epoch 0, parameter 'big.weight': "
                                         "topk:0.01's error (summed_squares) is infinite");
    }
}
