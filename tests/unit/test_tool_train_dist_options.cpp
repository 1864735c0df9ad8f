// train-dist's own options (tools/train-dist/options): its modes exclude each
// other, levels are parsed where they are read, and the checkpoint's name.
#include "train-dist/config.hpp"
#include "train-dist/options.hpp"
#include "compress/spec.hpp"
#include "train/config.hpp"

#include "test_support.hpp"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

using namespace acc;
using acc::test::usage_error_of;

namespace {

// train-dist's options parsed from `args`, after --model mlp --epochs 1.
app::TrainDistConfig parse(std::vector<std::string> args) {
    app::TrainDistConfig config;
    CLI::App app;
    app::add_train_dist_options(app, config);
    args.insert(args.begin(), {"--model", "mlp", "--epochs", "1"});
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return config;
}

}  // namespace

TEST(TrainDistOptions, ModesExcludeEachOtherAndAccordionOptionsNeedAccordion) {
    EXPECT_THROW(parse({"--compress", "topk:0.1", "--accordion"}), CLI::ParseError);
    EXPECT_THROW(parse({"--compress", "topk:0.1", "--schedule", "s.h5"}), CLI::ParseError);
    // --low, --high, --eta and --interval need --accordion or --auto.
    app::TrainDistConfig alone = parse({"--interval", "2", "--low", "topk:0.1"});
    EXPECT_CONTAINS(usage_error_of([&] { app::validate(alone); }), ": needs --accordion or --auto");
    app::TrainDistConfig accordion = parse({"--accordion", "--low", "topk:0.1", "--interval", "3"});
    EXPECT_EQ(accordion.mode(), app::Mode::accordion);
    EXPECT_EQ(accordion.accordion_config.interval, 3);
    EXPECT_FALSE(accordion.batch_size_given);
    EXPECT_TRUE(parse({"--batch-size", "64"}).batch_size_given);
    EXPECT_EQ(parse({}).mode(), app::Mode::fixed);

    // --auto: a mode of its own, with Accordion's settings for its budget.
    EXPECT_THROW(parse({"--auto", "--compress", "topk:0.1"}), CLI::ParseError);
    EXPECT_THROW(parse({"--auto", "--schedule", "s.h5"}), CLI::ParseError);
    EXPECT_THROW(parse({"--auto", "--accordion"}), CLI::ParseError);
    EXPECT_THROW(parse({"--auto", "--gravac", "topk"}), CLI::ParseError);
    app::TrainDistConfig automatic = parse({"--auto", "--low", "powersgd:4", "--levels", "powersgd:1, topk:0.01"});
    EXPECT_EQ(automatic.mode(), app::Mode::automatic);
    app::validate(automatic);
    ASSERT_EQ(automatic.auto_config.levels.size(), 2u);
    EXPECT_EQ(automatic.auto_config.levels[1], compress::parse_spec("topk:0.01"));
    for (const auto& [levels, words] : std::vector<std::pair<std::string, std::string>>{
             {"", "--levels: no candidate levels"},
             {"powersgd:1,,topk:0.01", "--levels: an empty level in 'powersgd:1,,topk:0.01'"},
             {"fp16", "--levels: fp16 cannot be planned"},
             {"topk:0.05", "--levels: topk:0.05 cannot be planned"},
             {"powersgd:1,warpsgd", "--levels: 'warpsgd'"}}) {
        try {
            parse({"--auto", "--levels", levels});
            ADD_FAILURE() << "--levels '" << levels << "' was accepted";
        } catch (const std::exception& e) {
            EXPECT_CONTAINS(std::string(e.what()), words);
        }
    }
    app::TrainDistConfig unplannable = parse({"--auto", "--high", "qsgd:4"});
    EXPECT_CONTAINS(usage_error_of([&] { app::validate(unplannable); }), "--high: qsgd:4 cannot be planned");
    app::TrainDistConfig margin = parse({"--auto", "--auto-margin", "1"});
    EXPECT_CONTAINS(usage_error_of([&] { app::validate(margin); }), "--auto-margin: must be in [0, 1)");

    // Levels are parsed where they are read, naming the option.
    try {
        parse({"--compress", "powersgd:0"});
        ADD_FAILURE() << "--compress powersgd:0 was accepted";
    } catch (const CLI::ValidationError& e) {
        EXPECT_CONTAINS(std::string(e.what()), "--compress: 'powersgd:0'");
    }
    EXPECT_THROW(parse({"--accordion", "--high", "fastsgd"}), CLI::ValidationError);
    EXPECT_EQ(parse({"--compress", "topk:.10"}).fixed_level(), compress::parse_spec("topk:0.1"));
    EXPECT_EQ(parse({}).fixed_level(), compress::parse_spec("none"));
    EXPECT_EQ(parse({"--accordion"}).accordion_config.low, compress::parse_spec("powersgd:2"));
    app::TrainDistConfig c = parse({"--backend", "nccl"});
    EXPECT_CONTAINS(usage_error_of([&] { app::validate(c); }), "--backend nccl: needs --device cuda");
    c = parse({"--metrics", "out/m.h5"});
    EXPECT_EQ(app::checkpoint_path(c), "out/m.ckpt.h5");
    c = parse({"--metrics", "out/m.h5", "--checkpoint-dir", "ck/"});
    EXPECT_EQ(app::checkpoint_path(c), "ck/m.ckpt.h5");
    EXPECT_EQ(app::checkpoint_path(parse({})), "metrics.ckpt.h5");
    // Two runs in one directory keep their own checkpoints.
    EXPECT_EQ(app::checkpoint_path(parse({"--metrics", "runs/a.h5"})), "runs/a.ckpt.h5");
    EXPECT_EQ(app::checkpoint_path(parse({"--metrics", "runs/b.metrics"})), "runs/b.metrics.ckpt.h5");
}

// A GraVAC run resumed without --gravac, or a plain run resumed with it, is told
// which option changed, as a changed --gravac-window is.
TEST(TrainDistOptions, ResumeNamesAnAddedOrDroppedGravac) {
    auto settings = [](std::vector<std::string> args) {
        return app::train_dist_settings(parse(std::move(args)), false).resume_text();
    };
    const std::string gravac = settings({"--gravac", "topk"}), plain = settings({});
    EXPECT_EQ(train::changed_settings(gravac, plain), (std::vector<std::string>{"--gravac topk, not (not given)"}));
    EXPECT_EQ(train::changed_settings(plain, gravac), (std::vector<std::string>{"--gravac (not given), not topk"}));
    EXPECT_EQ(train::changed_settings(gravac, settings({"--gravac", "topk", "--gravac-window", "7"})).size(), 1u);
    EXPECT_TRUE(train::changed_settings(gravac, settings({"--gravac", "topk"})).empty());
}

// --gravac-omega's range as --help states it is the one validation applies: [0, 1).
TEST(TrainDistOptions, OmegasHelpGivesItsRange) {
    app::TrainDistConfig config;
    CLI::App app;
    app::add_train_dist_options(app, config);
    const std::string help = app.get_option("--gravac-omega")->get_description();
    EXPECT_NE(help.find("a fraction in [0, 1)"), std::string::npos) << help;
    const std::string all = app.help();
    const size_t at = all.find("--gravac-omega");
    ASSERT_NE(at, std::string::npos);
    const std::string line = all.substr(at, all.find('\n', at) - at);
    EXPECT_EQ(line.find("[0, 1]"), std::string::npos) << line;  // the range 1 is not in
    config = parse({"--gravac", "topk", "--gravac-omega", "1"});
    EXPECT_THROW(acc::regime::validate(config.gravac_settings), acc::UsageError);
}
