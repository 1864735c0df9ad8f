// lib/app's shared options: the command line is where text becomes the configs'
// enums and where each setting's range is checked, with the messages users see.
#include "app/rank_options.hpp"
#include "app/regime_detect.hpp"
#include "app/training_options.hpp"
#include "regime/detect.hpp"

#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace acc;

namespace {

// regime-detect's options as CLI11 reads them from ARGS and a gradient file.
app::DetectConfig parse_detect(std::vector<std::string> args) {
    app::DetectConfig c;
    CLI::App app;
    app::add_detect_options(app, c);
    args.push_back("g.h5");
    std::reverse(args.begin(), args.end());
    app.parse(args);
    return c;
}

// Parses `args` (after the program name) into a fresh TrainConfig; the parse error's text otherwise.
std::string parse_train(std::vector<std::string> args, train::TrainConfig& config) {
    CLI::App app;
    app::add_train_options(app, config);
    comm::RendezvousConfig rendezvous;  // its options must not clash with the training ones
    app::add_rendezvous_options(app, rendezvous);
    std::reverse(args.begin(), args.end());
    try {
        app.parse(args);
    } catch (const CLI::ParseError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(AppOptions, DeviceIsParsedOnceIntoTheEnum) {
    train::TrainConfig config;
    EXPECT_EQ(parse_train({"--model", "mlp", "--epochs", "1"}, config), "");
    EXPECT_EQ(config.device, Device::cpu);
    EXPECT_EQ(parse_train({"--model", "mlp", "--epochs", "1", "--device", "cuda"}, config), "");
    EXPECT_EQ(config.device, Device::cuda);
    train::TrainConfig other;
    const std::string error = parse_train({"--model", "mlp", "--epochs", "1", "--device", "gpu"}, other);
    EXPECT_NE(error.find("gpu"), std::string::npos) << error;
    EXPECT_NE(error.find("cpu,cuda"), std::string::npos) << error;
    EXPECT_EQ(other.device, Device::cpu);
    EXPECT_THROW(parse_device("gpu"), UsageError);
    for (const std::string& name : device_names()) EXPECT_EQ(device_name(parse_device(name)), name);
}

TEST(AppOptions, ModelChoicesComeFromTheModelTable) {
    for (const std::string& name : train::model_names()) {
        train::TrainConfig config;
        EXPECT_EQ(parse_train({"--model", name, "--epochs", "1"}, config), "") << name;
        EXPECT_EQ(config.model, name);
    }
    train::TrainConfig config;
    EXPECT_NE(parse_train({"--model", "resnet50", "--epochs", "1"}, config), "");
}

TEST(AppOptions, EtaHasOneDefaultAndOneRange) {
    app::DetectConfig detect;
    EXPECT_EQ(detect.eta, regime::kDefaultEta);
    EXPECT_EQ(detect.interval, regime::kDefaultInterval);
    regime::Options options;
    EXPECT_EQ(options.eta, regime::kDefaultEta);
    const auto parse = parse_detect;
    EXPECT_EQ(parse({"--eta", "0.25"}).eta, 0.25);
    EXPECT_THROW(parse({"--eta", "0"}), CLI::ValidationError);
    EXPECT_THROW(parse({"--eta", "2e6"}), CLI::ValidationError);
    EXPECT_NO_THROW(parse({"--eta", "1e6"}));
    // The same range where code fills the options.
    EXPECT_NO_THROW(regime::validate({regime::kMaxEta, regime::kMaxInterval}));
    EXPECT_THROW(regime::validate({0, 1}), UsageError);
    EXPECT_THROW(regime::validate({std::nan(""), 1}), UsageError);
    EXPECT_THROW(regime::validate({2e6, 1}), UsageError);
    EXPECT_THROW(regime::validate({0.5, 0}), UsageError);
    EXPECT_THROW(regime::validate({0.5, regime::kMaxInterval + 1}), UsageError);
    try {
        regime::validate({0, 10});
        FAIL();
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(), "--eta: must be a number in (0, 1e+06], not '0'");
    }
}

// regime-detect's --low and --high are read as --mode says, wherever it stands.
TEST(AppOptions, DetectLevelsFollowTheModeWhereverItIsGiven) {
    const auto parse = parse_detect;
    const app::DetectConfig batch = parse({"--low", "256", "--high", "1024", "--mode", "batch"});
    EXPECT_EQ(batch.low_batch, 256);
    EXPECT_EQ(batch.high_batch, 1024);
    const app::DetectConfig levels = parse({"--low", "topk:0.10", "--high", "powersgd:1"});
    EXPECT_EQ(levels.low.text(), "topk:0.1");
    EXPECT_EQ(levels.high.text(), "powersgd:1");
    EXPECT_THROW(parse({"--low", "powersgd:2", "--mode", "batch"}), UsageError);
    EXPECT_THROW(parse({"--high", "512"}), UsageError);
}

namespace {

std::string resume_text(const acc::train::TrainConfig& c) {
    app::Settings s;
    app::add_training_settings(s, c, true);
    return s.resume_text();
}

}  // namespace

// What --resume compares: every option that changes the numbers, by name.
TEST(TrainingSettings, ResumeNamesEachOptionThatDiffers) {
    acc::train::TrainConfig a;
    a.model = "mlp";
    const std::string then = resume_text(a);
    acc::train::TrainConfig b = a;
    EXPECT_TRUE(acc::train::changed_settings(then, resume_text(b)).empty());
    // Options that may change on resume are not recorded.
    b.epochs = a.epochs + 10;
    b.eval_every = 7;
    b.threads = 3;
    b.data.dir = "/elsewhere";
    EXPECT_TRUE(acc::train::changed_settings(then, resume_text(b)).empty());
    b.schedule.lr = 0.5;
    b.optimizer.momentum = 0;
    b.data.train_samples = 512;
    b.schedule.decay_epochs = {3, 5};
    EXPECT_EQ(acc::train::changed_settings(then, resume_text(b)),
              (std::vector<std::string>{"--train-samples 0, not 512", "--lr 0.1, not 0.5",
                                        "--lr-decay-epochs none, not 3,5", "--momentum 0.9, not 0"}));
    // Options a checkpoint does not record are not compared.
    EXPECT_TRUE(acc::train::changed_settings("--model mlp\n", resume_text(b)).empty());
    acc::train::TrainConfig c = a;
    c.optimizer.weight_decay = 1e-4 + 1e-9;
    EXPECT_EQ(acc::train::changed_settings(then, resume_text(c)).size(), 1u);
}

// The ranks compare what a resume may change too (a rank with other --epochs would
// wait in a collective the others never call), but not --threads.
TEST(TrainingSettings, RanksShareMoreThanAResumeKeeps) {
    acc::train::TrainConfig a;
    app::Settings first, second, third;
    app::add_training_settings(first, a, true);
    acc::train::TrainConfig b = a;
    b.epochs += 1;
    app::add_training_settings(second, b, true);
    EXPECT_NE(first.ranks_text(), second.ranks_text());
    EXPECT_EQ(first.resume_text(), second.resume_text());
    b = a;
    b.threads = 5;
    app::add_training_settings(third, b, false);
    EXPECT_EQ(first.ranks_text(), third.ranks_text());
    EXPECT_EQ(third.resume_text().find("--batch-size"), std::string::npos);
}
