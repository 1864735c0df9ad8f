// The run plan (lib/plan), without LibTorch: the levels of each epoch from a fixed
// level, from a schedule (checked against the model, every mismatch named), and from
// Accordion's rule online, which must decide as regime-detect does offline; for
// train-dist's fixed number of epochs and for the Python package's open-ended runs.
#include "plan/parameters.hpp"
#include "plan/run_plan.hpp"
#include "base/error.hpp"
#include "regime/levels.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace acc::plan;
using AccordionConfig = acc::plan::AccordionSettings;
using acc::compress::parse_spec;
using acc::io::Parameter;
using acc::test::usage_error_of;

namespace {

std::vector<Parameter> conv8_fc_parameters() {
    return {{"conv.weight", {8, 3, 3, 3}}, {"conv.bias", {8}}, {"fc.weight", {10, 72}}, {"fc.bias", {10}}};
}

std::string level_of(const RunPlan& plan, std::int64_t epoch, size_t p) {
    return plan.levels()[static_cast<size_t>(plan.levels_of(epoch).level[p])].text();
}

acc::io::Schedule compression_schedule(std::int64_t epochs) {
    acc::io::Schedule s;
    s.mode = acc::io::ScheduleMode::compression;
    s.parameters = conv8_fc_parameters();
    s.epochs = epochs;
    s.levels = {"none", "powersgd:2", "topk:0.1"};
    for (std::int64_t e = 0; e < epochs; ++e) {
        s.level.insert(s.level.end(), {e % 2 == 0 ? 1 : 2, 0, 1, 0});
        for (int p = 0; p < 4; ++p) {
            s.critical.push_back(0);
            s.ratio.push_back(0);
            s.reason.push_back(0);
        }
    }
    return s;
}

}  // namespace
TEST(Plan, FixedLevelOnMatricesOnly) {
    RunPlan plan = RunPlan::fixed(conv8_fc_parameters(), parse_spec("powersgd:2"), 3);
    EXPECT_EQ(plan.level_names(), (std::vector<std::string>{"none", "powersgd:2"}));
    for (std::int64_t e = 0; e < 3; ++e) {
        EXPECT_EQ(level_of(plan, e, 0), "powersgd:2");
        EXPECT_EQ(level_of(plan, e, 1), "none");
        EXPECT_EQ(level_of(plan, e, 2), "powersgd:2");
        EXPECT_EQ(level_of(plan, e, 3), "none");
    }
    EXPECT_FALSE(plan.batch_mode());
    EXPECT_EQ(RunPlan::fixed(conv8_fc_parameters(), parse_spec("none"), 1).level_names(), std::vector<std::string>{"none"});
    // Specs are canonical: "topk:.10" and "topk:0.1" are one level.
    EXPECT_EQ(RunPlan::fixed(conv8_fc_parameters(), parse_spec("topk:.10"), 1).level_names()[1], "topk:0.1");
    EXPECT_EQ(levels_summary(plan.levels(), plan.levels_of(0).level), "none x2, powersgd:2 x2");
}

TEST(Plan, ScheduleLevelsAndExtension) {
    acc::io::Schedule s = compression_schedule(3);
    const auto levels = check_schedule(s, "sched.h5", conv8_fc_parameters(), 3, false, 2, false);
    RunPlan plan = RunPlan::from_schedule(s, levels, conv8_fc_parameters(), 5);
    EXPECT_EQ(level_of(plan, 0, 0), "powersgd:2");
    EXPECT_EQ(level_of(plan, 1, 0), "topk:0.1");
    EXPECT_EQ(level_of(plan, 2, 0), "powersgd:2");
    EXPECT_EQ(level_of(plan, 1, 2), "powersgd:2");
    EXPECT_EQ(level_of(plan, 1, 1), "none");
    // --schedule-extend last: epochs 3 and 4 repeat epoch 2.
    EXPECT_EQ(plan.levels_of(3).level, plan.levels_of(2).level);
    EXPECT_EQ(plan.levels_of(4).level, plan.levels_of(2).level);
    EXPECT_TRUE(plan.levels_of(0).critical.empty());
}

TEST(Plan, ScheduleMismatchesAreAllNamed) {
    acc::io::Schedule s = compression_schedule(3);
    s.parameters[2].shape = {72, 10};
    s.parameters[3].name = "head.bias";
    s.levels[2] = "topk:7";
    const std::string message =
        usage_error_of([&] { check_schedule(s, "sched.h5", conv8_fc_parameters(), 10, false, 2, false); });
    EXPECT_CONTAINS(message, "sched.h5 does not fit this run: (1) ");
    EXPECT_CONTAINS(message, "'fc.weight' has shape 72x10, the model's is 10x72");
    EXPECT_CONTAINS(message, "the model's parameter 'fc.bias' is missing");
    EXPECT_CONTAINS(message, "it lists 'head.bias', which the model does not have");
    EXPECT_CONTAINS(message, "it covers 3 epochs, --epochs is 10 (--schedule-extend last repeats its last epoch)");
    EXPECT_CONTAINS(message, "its level 'topk:7' is not a compressor spec");
    EXPECT_CONTAINS(message, "(5) ");

    acc::io::Schedule fewer = compression_schedule(3);
    fewer.parameters.pop_back();
    EXPECT_CONTAINS(usage_error_of([&] { check_schedule(fewer, "s.h5", conv8_fc_parameters(), 3, false, 1, false); }),
                    "it lists 3 parameters, the model has 4");
    acc::io::Schedule reordered = compression_schedule(3);
    std::swap(reordered.parameters[0], reordered.parameters[2]);
    EXPECT_CONTAINS(usage_error_of([&] { check_schedule(reordered, "s.h5", conv8_fc_parameters(), 3, false, 1, false); }),
                    "'conv.weight' is parameter 2 in the schedule but 0 in the model");
    // Extending is allowed when asked for.
    check_schedule(compression_schedule(3), "s.h5", conv8_fc_parameters(), 10, true, 1, false);
}

TEST(Plan, BatchScheduleSplitsOverRanks) {
    acc::io::Schedule s;
    s.mode = acc::io::ScheduleMode::batch;
    s.parameters = conv8_fc_parameters();
    s.epochs = 4;
    s.batch_size = {64, 64, 512, 512};
    s.lr_scale = {1, 1, 8, 8};
    s.critical.assign(16, 0);
    s.ratio.assign(16, 0);
    s.reason.assign(16, 0);
    EXPECT_TRUE(check_schedule(s, "b.h5", conv8_fc_parameters(), 4, false, 4, false).empty());
    RunPlan plan = RunPlan::from_schedule(s, {}, conv8_fc_parameters(), 4);
    EXPECT_TRUE(plan.batch_mode());
    EXPECT_EQ(plan.global_batch(2), 512);
    EXPECT_EQ(plan.lr_scale(2), 8.0);
    EXPECT_EQ(plan.level_names(), std::vector<std::string>{"none"});
    for (auto l : plan.levels_of(3).level) EXPECT_EQ(l, 0);

    const std::string uneven = usage_error_of([&] { check_schedule(s, "b.h5", conv8_fc_parameters(), 4, false, 3, true); });
    EXPECT_CONTAINS(uneven, "leave out --batch-size");
    EXPECT_CONTAINS(uneven, "does not split evenly over 3 ranks in 4 epochs (epoch 0: 64, epoch 1: 64, epoch 2: 512, ...)");
}

// Online decisions, epoch by epoch, equal regime-detect's on the whole table.
TEST(Plan, OnlineAccordionDecidesAsTheOfflineRule) {
    std::mt19937 random(11);
    std::uniform_real_distribution<double> norm(0.0, 2.0);
    for (std::int64_t interval : {1, 2, 3, 5}) {
        const std::int64_t epochs = 23;
        std::vector<double> lr;
        for (std::int64_t e = 0; e < epochs; ++e) lr.push_back(e < 4 ? 0.1 * (e + 1) : e < 11 ? 0.4 : e < 17 ? 0.04 : 0.004);
        AccordionConfig config;
        config.low = parse_spec("powersgd:4");
        config.high = parse_spec("powersgd:1");
        config.eta = 0.5;
        config.interval = interval;
        RunPlan plan = RunPlan::accordion(conv8_fc_parameters(), config, lr);
        acc::regime::NormTable table{epochs, 4, {}};
        for (std::int64_t i = 0; i < epochs * 4; ++i) table.values.push_back(i % 7 == 3 ? 0.0 : norm(random));
        acc::regime::Decisions offline = acc::regime::detect(table, lr, {0.5, interval});
        acc::regime::CompressionPlan levels =
            acc::regime::plan_compression(offline, {true, false, true, false}, parse_spec("powersgd:4"),
                                          parse_spec("powersgd:1"));
        for (std::int64_t e = 0; e < epochs; ++e) {
            EpochLevels online = plan.levels_of(e);
            for (size_t p = 0; p < 4; ++p) {
                const size_t i = offline.at(e, static_cast<std::int64_t>(p));
                EXPECT_EQ(online.critical[p], offline.critical[i]) << "interval " << interval << " epoch " << e;
                EXPECT_EQ(online.reason[p], static_cast<std::int8_t>(offline.reason[i]));
                EXPECT_TRUE(online.ratio[p] == offline.ratio[i] || (std::isnan(online.ratio[p]) && std::isnan(offline.ratio[i])));
                EXPECT_EQ(plan.levels()[static_cast<size_t>(online.level[p])].text(),
                          levels.levels[static_cast<size_t>(levels.level[i])].text());
            }
            plan.record_norms(e, std::vector<double>(table.values.begin() + e * 4, table.values.begin() + e * 4 + 4));
        }
    }
}

TEST(Plan, OnlineAccordionByHand) {
    AccordionConfig config;
    config.low = parse_spec("topk:0.1");
    config.high = parse_spec("topk:0.01");
    config.interval = 2;
    RunPlan plan = RunPlan::accordion(conv8_fc_parameters(), config, std::vector<double>(8, 0.1));
    EXPECT_EQ(plan.level_names(), (std::vector<std::string>{"none", "topk:0.1", "topk:0.01"}));
    // Epochs 0..2 are the first interval: low on matrices, none on vectors.
    EXPECT_EQ(level_of(plan, 0, 0), "topk:0.1");
    EXPECT_EQ(level_of(plan, 0, 1), "none");
    plan.record_norms(0, {4, 4, 4, 4});
    plan.record_norms(1, {1, 1, 1, 1});
    EXPECT_EQ(level_of(plan, 2, 0), "topk:0.1");
    // Epoch 2 decides epochs 3 and 4: conv.weight changed by 0.25 (high), fc.weight by 0.5 (low).
    plan.record_norms(2, {3, 3, 2, 2});
    EXPECT_EQ(level_of(plan, 3, 0), "topk:0.01");
    EXPECT_EQ(level_of(plan, 3, 2), "topk:0.1");
    EXPECT_DOUBLE_EQ(plan.levels_of(3).ratio[0], 0.25);
    EXPECT_EQ(plan.levels_of(3).reason[2], 1);
    plan.record_norms(3, {9, 9, 9, 9});
    EXPECT_EQ(level_of(plan, 4, 0), "topk:0.01");  // decided at epoch 2, epoch 3 changes nothing
    EXPECT_THROW(plan.levels_of(6), acc::Error);   // needs the norms of epoch 4 and 5
}

TEST(Plan, OnlineLearningRateDecayMakesEveryLayerCritical) {
    AccordionConfig config;
    config.interval = 4;
    std::vector<double> lr = {0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01};
    RunPlan plan = RunPlan::accordion(conv8_fc_parameters(), config, lr);
    for (std::int64_t e = 0; e < 6; ++e) plan.record_norms(e, {1, 1, 1, 1});
    EXPECT_EQ(level_of(plan, 5, 0), "powersgd:1");  // no change: high
    EXPECT_EQ(level_of(plan, 6, 0), "powersgd:2");  // the rate decays at epoch 6
    EXPECT_EQ(plan.levels_of(6).reason[0], 4);
}

// The Python package's plans know no number of epochs: a schedule's end is refused
// in the caller's words, or its last epoch repeated; online, each epoch's learning
// rate comes as it starts.
TEST(Plan, OpenEndedPlans) {
    acc::io::Schedule s = compression_schedule(3);
    std::vector<std::string> problems;
    const auto levels = parse_levels(s, problems);
    EXPECT_TRUE(problems.empty());
    RunPlan strict = RunPlan::from_schedule(s, levels, conv8_fc_parameters(), kOpenEnded, {false, "s.h5", "extend_last=True"});
    EXPECT_EQ(level_of(strict, 2, 0), "powersgd:2");
    EXPECT_EQ(usage_error_of([&] { strict.levels_of(3); }),
              "s.h5: covers epochs 0-2, not epoch 3 (extend_last=True repeats its last epoch)");
    RunPlan extended = RunPlan::from_schedule(s, levels, conv8_fc_parameters(), kOpenEnded, {true, "s.h5", ""});
    EXPECT_EQ(extended.levels_of(100).level, extended.levels_of(2).level);
    EXPECT_EQ(level_of(RunPlan::fixed(conv8_fc_parameters(), parse_spec("topk:0.1")), 1000, 0), "topk:0.1");

    AccordionConfig config;
    config.interval = 1;
    RunPlan online = RunPlan::accordion(conv8_fc_parameters(), config);
    EXPECT_THROW(online.levels_of(0), acc::Error);  // no learning rate yet
    online.set_learning_rate(0, 0.1);
    EXPECT_EQ(level_of(online, 0, 0), "powersgd:2");
    online.set_learning_rate(0, 0.2);  // the epoch started again: its rate replaced
    EXPECT_EQ(online.learning_rates(), std::vector<double>{0.2});
    online.record_norms(0, {1, 1, 1, 1});
    online.set_learning_rate(1, 0.2);
    online.record_norms(1, {1, 1, 1, 1});
    online.set_learning_rate(2, 0.2);
    EXPECT_EQ(level_of(online, 2, 0), "powersgd:1");  // no change since epoch 1: high
    EXPECT_EQ(level_of(online, 2, 1), "none");
    EXPECT_THROW(online.set_learning_rate(5, 0.1), acc::Error);  // epochs in order
    config.eta = 0;
    EXPECT_EQ(usage_error_of([&] { RunPlan::accordion(conv8_fc_parameters(), config); }),
              "--eta: must be a number in (0, 1e+06], not '0'");
}

TEST(Plan, TheLevelRuleIsStatedOnce) {
    using acc::regime::AccordionLevel;
    EXPECT_EQ(acc::regime::accordion_level(false, true), AccordionLevel::none);
    EXPECT_EQ(acc::regime::accordion_level(false, false), AccordionLevel::none);
    EXPECT_EQ(acc::regime::accordion_level(true, true), AccordionLevel::low);
    EXPECT_EQ(acc::regime::accordion_level(true, false), AccordionLevel::high);
}

// A schedule's critical epochs are those of the parameters compression applies to:
// an epoch critical only for a bias is not one (regime-detect's summary agrees).
TEST(Plan, CriticalEpochsCountMatricesOnly) {
    acc::io::Schedule s = compression_schedule(4);
    s.critical[s.at(1, 0)] = 1;  // conv.weight
    s.critical[s.at(2, 1)] = 1;  // conv.bias only
    s.critical[s.at(3, 2)] = 1;  // fc.weight
    EXPECT_EQ(critical_epochs(s), (std::vector<std::int64_t>{1, 3}));
    s.mode = acc::io::ScheduleMode::batch;  // whole-model decisions: every column counts
    EXPECT_EQ(critical_epochs(s), (std::vector<std::int64_t>{1, 2, 3}));
}

TEST(Plan, ParameterChecksNameEveryDifference) {
    std::vector<Parameter> listed = conv8_fc_parameters();
    EXPECT_NO_THROW(check_parameters("s.h5", conv8_fc_parameters(), listed));
    listed[0].shape = {4, 3, 3, 3};
    std::swap(listed[2], listed[3]);
    listed[1].name = "conv.b";
    EXPECT_EQ(usage_error_of([&] { check_parameters("s.h5", conv8_fc_parameters(), listed); }),
              "s.h5 does not fit this model: (1) 'conv.weight' has shape 4x3x3x3, the model's is 8x3x3x3; "
              "(2) the model's parameter 'conv.bias' is missing; (3) 'fc.weight' is parameter 3 in the schedule but 2 "
              "in the model; (4) 'fc.bias' is parameter 2 in the schedule but 3 in the model; (5) it lists 'conv.b', "
              "which the model does not have");
}

// What a schedule may not say: a level listed twice, /levels not starting with none,
// and a compressor for a vector parameter (always sent whole, as with --compress,
// so the metrics would record a level that was never sent). Each is named.
TEST(Plan, ScheduleLevelsThatCannotBeSentAreRefused) {
    auto problems_of = [](const acc::io::Schedule& s) {
        std::vector<std::string> problems;
        parse_levels(s, problems);
        return problems;
    };
    EXPECT_TRUE(problems_of(compression_schedule(2)).empty());

    acc::io::Schedule twice = compression_schedule(2);
    twice.levels = {"none", "powersgd:2", "topk:.10", "topk:0.1"};
    EXPECT_EQ(problems_of(twice), std::vector<std::string>{"its /levels lists topk:0.1 twice"});

    acc::io::Schedule later = compression_schedule(2);
    later.levels = {"topk:0.1", "powersgd:2", "none"};
    for (auto& index : later.level) index = index == 0 ? 2 : index == 2 ? 0 : index;
    EXPECT_EQ(problems_of(later), std::vector<std::string>{"its /levels starts with topk:0.1, not none (none comes first)"});

    acc::io::Schedule bias = compression_schedule(5);
    for (std::int64_t e = 0; e < 5; ++e) bias.level[static_cast<size_t>(e * 4 + 3)] = 2;  // fc.bias at topk:0.1
    bias.level[1] = 1;                                                                      // conv.bias at powersgd:2
    const std::vector<std::string> found = problems_of(bias);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0], "it gives vector parameters, which are always sent whole, a compressor (powersgd:2 for "
                        "'conv.bias' in epoch 0, topk:0.1 for 'fc.bias' in epoch 0, topk:0.1 for 'fc.bias' in "
                        "epoch 1, and 3 more)");
    EXPECT_CONTAINS(usage_error_of([&] { check_schedule(bias, "s.h5", conv8_fc_parameters(), 5, false, 1, false); }),
                    "s.h5 does not fit this run: (1) it gives vector parameters");
}
