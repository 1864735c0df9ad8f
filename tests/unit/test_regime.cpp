// Accordion's rule, schedule plans and summaries, checked against hand-computed cases.
#include "base/error.hpp"
#include "regime/detect.hpp"
#include "regime/levels.hpp"
#include "regime/summary.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace acc::regime;

namespace {

acc::compress::Spec level(const std::string& text) { return acc::compress::parse_spec(text); }


NormTable table(std::int64_t columns, const std::vector<double>& values) {
    NormTable t;
    t.columns = columns;
    t.epochs = static_cast<std::int64_t>(values.size()) / columns;
    t.values = values;
    return t;
}

std::vector<int> critical_column(const Decisions& d, std::int64_t column = 0) {
    std::vector<int> out;
    for (std::int64_t e = 0; e < d.epochs; ++e) out.push_back(d.critical[d.at(e, column)]);
    return out;
}

}  // namespace

TEST(Detect, DecisionsApplyToTheNextInterval) {
    // interval 2: decisions at the end of epochs 2, 4, 6 govern 3-4, 5-6, 7-8.
    //            e:  0   1  2  3  4  5  6  7  8
    auto norms = table(1, {10, 9, 8, 7, 2, 3, 2, 1, 1});
    std::vector<double> lr(9, 0.1);
    Decisions d = detect(norms, lr, {0.5, 2});
    // epoch 2 vs 0: |10-8|/10 = 0.2 -> 3,4 not critical; epoch 4 vs 2: |8-2|/8 = 0.75 -> 5,6 critical;
    // epoch 6 vs 4: |2-2|/2 = 0 -> 7,8 not critical. Epochs 0..2 are the first interval.
    EXPECT_EQ(critical_column(d), (std::vector<int>{1, 1, 1, 0, 0, 1, 1, 0, 0}));
    EXPECT_EQ(d.reason[d.at(0, 0)], Reason::first_interval);
    EXPECT_EQ(d.reason[d.at(2, 0)], Reason::first_interval);
    EXPECT_TRUE(std::isnan(d.ratio[d.at(1, 0)]));
    EXPECT_DOUBLE_EQ(d.ratio[d.at(3, 0)], 0.2);
    EXPECT_DOUBLE_EQ(d.ratio[d.at(6, 0)], 0.75);
    EXPECT_EQ(d.reason[d.at(5, 0)], Reason::at_least_eta);
    EXPECT_EQ(d.reason[d.at(8, 0)], Reason::below_eta);
}

TEST(Detect, RatioEqualToEtaIsCritical) {
    auto norms = table(1, {10, 1, 5, 1, 1});
    Decisions d = detect(norms, std::vector<double>(5, 1.0), {0.5, 2});
    EXPECT_DOUBLE_EQ(d.ratio[d.at(3, 0)], 0.5);
    EXPECT_EQ(d.critical[d.at(3, 0)], 1);
    EXPECT_EQ(d.critical[d.at(4, 0)], 1);
}

TEST(Detect, ZeroPreviousNormIsCritical) {
    //            e:  0  1  2  3  4  5  6
    auto norms = table(1, {0, 1, 0, 1, 0, 1, 1});
    Decisions d = detect(norms, std::vector<double>(7, 1.0), {0.5, 2});
    // Epoch 2 vs 0: previous 0 -> critical 3,4 with infinite ratio; epoch 4 vs 2: previous 0 again.
    EXPECT_EQ(critical_column(d), (std::vector<int>{1, 1, 1, 1, 1, 1, 1}));
    EXPECT_EQ(d.reason[d.at(3, 0)], Reason::zero_previous_norm);
    EXPECT_TRUE(std::isinf(d.ratio[d.at(3, 0)]));
    EXPECT_EQ(d.reason[d.at(5, 0)], Reason::zero_previous_norm);
}

TEST(Detect, LearningRateDecayMakesEveryColumnCriticalUntilTheNextDecision) {
    // interval 3, flat norms (nothing critical by ratio after the first interval).
    std::vector<double> flat(12 * 2, 1.0);
    std::vector<double> lr = {0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.001, 0.001, 0.001};
    Decisions d = detect(table(2, flat), lr, {0.5, 3});
    // Decay after epoch 4 (lr of 5 < lr of 4): critical 5..6 (6 is the next decision epoch).
    // Decay after epoch 8: critical 9 only (9 is a decision epoch); 10.. governed by epoch 9's decision.
    std::vector<int> expected = {1, 1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 0};
    EXPECT_EQ(critical_column(d, 0), expected);
    EXPECT_EQ(critical_column(d, 1), expected);
    EXPECT_EQ(d.reason[d.at(5, 1)], Reason::lr_decay);
    EXPECT_EQ(d.reason[d.at(9, 0)], Reason::lr_decay);
    // The ratio that would have decided stays on record.
    EXPECT_DOUBLE_EQ(d.ratio[d.at(5, 0)], 0.0);
}

TEST(Detect, LearningRateIncreaseDuringWarmupIsNotADecay) {
    std::vector<double> lr = {0.1, 0.2, 0.3, 0.4, 0.4, 0.4, 0.4};
    Decisions d = detect(table(1, std::vector<double>(7, 1.0)), lr, {0.5, 2});
    EXPECT_EQ(critical_column(d), (std::vector<int>{1, 1, 1, 0, 0, 0, 0}));
}

TEST(Detect, PerLayerAgainstWholeModel) {
    // Two parameters over 5 epochs, interval 2. Parameter 0 changes a lot, parameter 1 barely.
    //                 e0      e1      e2      e3      e4
    auto norms = table(2, {4, 30,  4, 30,  1, 29,  1, 29,  1, 29});
    std::vector<double> lr(5, 0.1);
    Decisions layer = detect(norms, lr, {0.5, 2});
    EXPECT_EQ(critical_column(layer, 0), (std::vector<int>{1, 1, 1, 1, 1}));  // |4-1|/4 = 0.75
    EXPECT_EQ(critical_column(layer, 1), (std::vector<int>{1, 1, 1, 0, 0}));  // |30-29|/30
    NormTable model = whole_model(norms);
    EXPECT_DOUBLE_EQ(model.at(0, 0), std::sqrt(16.0 + 900.0));
    Decisions whole = detect(model, lr, {0.5, 2});
    // sqrt(916) = 30.27 vs sqrt(842) = 29.02: ratio 0.041 -> not critical.
    EXPECT_EQ(critical_column(whole), (std::vector<int>{1, 1, 1, 0, 0}));
    EXPECT_NEAR(whole.ratio[whole.at(3, 0)], std::fabs(std::sqrt(916.0) - std::sqrt(842.0)) / std::sqrt(916.0), 1e-12);
    Decisions spread = whole.broadcast(2);
    EXPECT_EQ(critical_column(spread, 1), critical_column(whole));
}

TEST(Detect, FewerEpochsThanOneIntervalAreAllCritical) {
    Decisions d = detect(table(1, {5, 1, 9}), {1, 1, 1}, {0.5, 10});
    EXPECT_EQ(critical_column(d), (std::vector<int>{1, 1, 1}));
}

TEST(Detect, RejectsBadOptions) {
    auto norms = table(1, {1, 2, 3});
    std::vector<double> lr(3, 1.0);
    EXPECT_THROW(detect(norms, lr, {0.0, 10}), acc::UsageError);
    EXPECT_THROW(detect(norms, lr, {-1.0, 10}), acc::UsageError);
    EXPECT_THROW(detect(norms, lr, {NAN, 10}), acc::UsageError);
    EXPECT_THROW(detect(norms, lr, {0.5, 0}), acc::UsageError);
    EXPECT_THROW(detect(norms, {1.0}, {0.5, 1}), acc::Error);
}

TEST(Detect, DecidingOnlineGivesTheOfflineRowOfEachEpoch) {
    // Random norms and a learning-rate drop: deciding epoch e from epochs 0 .. e-1
    // alone gives detect()'s row e over the whole run, column by column.
    std::mt19937 rng(11);
    std::uniform_real_distribution<double> norm(0.1, 2.0);
    const std::int64_t epochs = 12, columns = 3;
    std::vector<double> values;
    for (std::int64_t i = 0; i < epochs * columns; ++i) values.push_back(norm(rng));
    std::vector<double> lr(epochs, 0.1);
    for (std::int64_t e = 7; e < epochs; ++e) lr[static_cast<size_t>(e)] = 0.01;
    const Decisions offline = detect(table(columns, values), lr, {0.3, 2});
    for (std::int64_t e = 0; e < epochs; ++e) {
        NormTable earlier = table(columns, std::vector<double>(values.begin(), values.begin() + e * columns));
        earlier.epochs = e;
        const Decisions row = decide_epoch(earlier, std::vector<double>(lr.begin(), lr.begin() + e + 1), {0.3, 2});
        ASSERT_EQ(row.epochs, 1);
        for (std::int64_t c = 0; c < columns; ++c) {
            const size_t i = offline.at(e, c);
            EXPECT_EQ(row.critical[static_cast<size_t>(c)], offline.critical[i]) << "epoch " << e << " column " << c;
            EXPECT_EQ(row.reason[static_cast<size_t>(c)], offline.reason[i]) << "epoch " << e << " column " << c;
        }
    }
    EXPECT_THROW(decide_epoch(table(columns, {}), {0.1, 0.1}, {0.3, 2}), acc::Error);  // lr of 2 epochs for epoch 0
}

// Property tests on random inputs.
class DetectProperties : public ::testing::TestWithParam<int> {};

TEST_P(DetectProperties, TinyEtaMakesEveryDecisionCriticalAndHugeEtaOnlyTheForcedOnes) {
    std::mt19937 rng(static_cast<unsigned>(GetParam()));
    std::uniform_real_distribution<double> norm(0.01, 100.0);
    std::uniform_int_distribution<int> epochs_dist(1, 120), columns_dist(1, 8), interval_dist(1, 15);
    const int E = epochs_dist(rng), C = columns_dist(rng), interval = interval_dist(rng);
    NormTable t;
    t.epochs = E;
    t.columns = C;
    for (int i = 0; i < E * C; ++i) t.values.push_back(norm(rng));
    std::vector<double> lr(static_cast<size_t>(E), 0.1);
    Decisions tiny = detect(t, lr, {1e-12, interval});
    for (auto c : tiny.critical) EXPECT_EQ(c, 1);
    Decisions huge = detect(t, lr, {kMaxEta, interval});  // ratios here stay below 1e4
    for (int e = 0; e < E; ++e)
        for (int c = 0; c < C; ++c) EXPECT_EQ(huge.critical[huge.at(e, c)], e <= interval ? 1 : 0) << e;
    // With a decay in the middle, the forced window appears and nothing else.
    if (E > 3) {
        int drop = E / 2;
        for (int e = drop + 1; e < E; ++e) lr[static_cast<size_t>(e)] = 0.01;
        Decisions decayed = detect(t, lr, {kMaxEta, interval});
        int next = ((drop + 1 + interval - 1) / interval) * interval;
        for (int e = 0; e < E; ++e) {
            bool forced = e <= interval || (e >= drop + 1 && e <= next);
            EXPECT_EQ(decayed.critical[decayed.at(e, 0)], forced ? 1 : 0) << "epoch " << e;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(RandomInputs, DetectProperties, ::testing::Range(1, 41));

TEST(Plan, CompressionLevelsFollowCriticalityAndVectorsStayUncompressed) {
    auto norms = table(2, {4, 30, 4, 30, 1, 29, 1, 29, 1, 29});
    Decisions d = detect(norms, std::vector<double>(5, 0.1), {0.5, 2});
    CompressionPlan plan = plan_compression(d, {true, true}, level("powersgd:2"), level("powersgd:1"));
    EXPECT_EQ(plan.levels, (std::vector<acc::compress::Spec>{{"none", 0}, {"powersgd", 2}, {"powersgd", 1}}));
    // Parameter 0 critical throughout (level 1); parameter 1 critical in 0..2, then level 2.
    EXPECT_EQ(plan.level, (std::vector<std::int32_t>{1, 1, 1, 1, 1, 1, 1, 2, 1, 2}));
    CompressionPlan with_bias = plan_compression(d, {true, false}, level("topk:0.5"), level("topk:0.1"));
    for (std::int64_t e = 0; e < 5; ++e) EXPECT_EQ(with_bias.level[static_cast<size_t>(e * 2 + 1)], 0);
}

TEST(Plan, BatchSizesWithAndWithoutMonotone) {
    // One column, interval 1, eta 0.5.  e: 0  1  2    3    4   5
    auto norms = table(1, {8, 8, 8, 2, 2, 8});
    Decisions d = detect(norms, std::vector<double>(6, 0.1), {0.5, 1});
    // Epoch e is governed by the decision at e-1 (n(e-2) against n(e-1)); e0 and e1 are the first interval.
    // e2: 8 vs 8 -> no; e3: 8 vs 8 -> no; e4: 8 vs 2 -> 0.75, yes; e5: 2 vs 2 -> no.
    ASSERT_EQ(critical_column(d), (std::vector<int>{1, 1, 0, 0, 1, 0}));
    BatchPlan free = plan_batch(d, 512, 4096, false);
    EXPECT_EQ(free.batch_size, (std::vector<std::int64_t>{512, 512, 4096, 4096, 512, 4096}));
    EXPECT_EQ(free.lr_scale, (std::vector<double>{1, 1, 8, 8, 1, 8}));
    BatchPlan monotone = plan_batch(d, 512, 4096, true);
    EXPECT_EQ(monotone.batch_size, (std::vector<std::int64_t>{512, 512, 4096, 4096, 4096, 4096}));
}

TEST(Summary, RegimesTimelineAndShares) {
    auto norms = table(1, {10, 9, 8, 7, 2, 3, 2, 1, 1});
    Decisions d = detect(norms, std::vector<double>(9, 0.1), {0.5, 2});
    std::vector<Regime> regimes = find_regimes(d, {true});
    ASSERT_EQ(regimes.size(), 2u);
    EXPECT_EQ(regimes[0].first, 0);
    EXPECT_EQ(regimes[0].last, 2);
    EXPECT_EQ(regimes[1].first, 5);
    EXPECT_EQ(regimes[1].last, 6);
    EXPECT_EQ(timeline(d, {true}, 1), "###..##..");
    EXPECT_EQ(timeline(d, {true}, 2), "#+++.");  // blocks 0-1 all, 2-3, 4-5, 6-7 half, 8 none
    EXPECT_EQ(timeline(d, {true}, 3), "#--");
    EXPECT_EQ(timeline_block(300, 10), 10);
    EXPECT_EQ(timeline_block(3000, 10), 30);
    CompressionPlan plan = plan_compression(d, {true}, level("powersgd:2"), level("powersgd:1"));
    auto shares = level_shares(plan, {true});
    ASSERT_EQ(shares.size(), 2u);  // "none" is unused and left out
    EXPECT_EQ(shares[0].level, "powersgd:2");
    EXPECT_DOUBLE_EQ(shares[0].share, 5.0 / 9.0);
    EXPECT_DOUBLE_EQ(shares[1].share, 4.0 / 9.0);
    // Two columns, the second a vector that is not counted.
    Decisions two = detect(table(2, {10, 1, 9, 1, 8, 1}), std::vector<double>(3, 0.1), {0.5, 1});
    CompressionPlan mixed = plan_compression(two, {true, false}, level("topk:0.5"), level("topk:0.1"));
    auto counted_only = level_shares(mixed, {true, false});
    ASSERT_EQ(counted_only.size(), 2u);
    EXPECT_DOUBLE_EQ(counted_only[0].share + counted_only[1].share, 1.0);
}

TEST(Summary, ReasonsSayWhyEachRunIsCritical) {
    // Column 0 changes by 60% at the decision of epoch 2, column 1 hardly
    // changes, column 2 (a vector, not counted) starts at zero; the learning
    // rate drops at epoch 6.
    auto norms = table(3, {10, 10, 0, 9, 10, 1, 4, 9, 1, 4, 9, 1, 3.9, 9, 1,
                           3.9, 9, 1, 3.9, 9, 1, 3.9, 9, 1, 3.9, 9, 1});
    std::vector<double> lr = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01};
    Decisions d = detect(norms, lr, {0.5, 2});
    std::vector<bool> counted = {true, true, false};
    std::vector<CriticalReasons> runs = critical_reasons(d, counted, lr);
    ASSERT_EQ(runs.size(), 3u);
    std::vector<std::string> text;
    for (const auto& run : runs) text.push_back(reasons_text(run, lr, 0.5, 2, 2));
    EXPECT_EQ(text[0], "epochs 0-2: first interval (epochs 0-2 are always critical)");
    EXPECT_EQ(text[1], "epochs 3-4: norm change r >= eta 0.5 (1/2 parameters)");
    EXPECT_EQ(text[2], "epoch 6: the learning rate drops from 0.1 to 0.01 at epoch 6");
    EXPECT_EQ(runs[2].decay_epoch, 6);
    EXPECT_EQ(runs[1].decay_epoch, -1);
    // The vector's zero previous norm would be a reason if it counted.
    std::vector<CriticalReasons> all = critical_reasons(d, {true, true, true}, lr);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_EQ(reasons_text(all[1], lr, 0.5, 2, 3),
              "epochs 3-4: norm change r >= eta 0.5 (1/3 parameters); zero previous norm (1/3 parameters)");
    // One column: no counts.
    EXPECT_EQ(reasons_text(runs[1], lr, 0.5, 2, 1), "epochs 3-4: norm change r >= eta 0.5");
}

TEST(Summary, CommunicationCountsFloatsPerStepTimesSteps) {
    // One 100x100 matrix and one vector of 100; two epochs, the first critical.
    auto norms = table(2, {1, 1, 1, 1});
    Decisions d = detect(norms, {0.1, 0.1}, {0.5, 10});
    d.critical[d.at(1, 0)] = 0;
    CompressionPlan plan = plan_compression(d, {true, false}, level("powersgd:2"), level("powersgd:1"));
    Communication c = compression_communication(plan, {{100, 100}, {100}}, {10, 20}, level("powersgd:2"), level("powersgd:1"));
    // rank 2: (100+100)*2 = 400 floats; rank 1: 200; the vector: 100 uncompressed.
    EXPECT_DOUBLE_EQ(c.schedule, 10 * (400 + 100) + 20 * (200 + 100));
    EXPECT_DOUBLE_EQ(c.low, 30 * (400 + 100));
    EXPECT_DOUBLE_EQ(c.high, 30 * (200 + 100));
    EXPECT_FALSE(c.per_step);
}

TEST(Summary, BatchCommunicationCountsRounds) {
    BatchPlan plan{{512, 4096}, {1, 8}};
    Communication c = batch_communication(plan, 1000, 8192, 512, 4096);
    EXPECT_DOUBLE_EQ(c.schedule, (16 + 2) * 1000.0);
    EXPECT_DOUBLE_EQ(c.low, 32 * 1000.0);
    EXPECT_DOUBLE_EQ(c.high, 4 * 1000.0);
}
