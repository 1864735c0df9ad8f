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
    auto parse = [](std::vector<std::string> args) {
        app::DetectConfig c;
        CLI::App app;
        app::add_detect_options(app, c);
        args.push_back("g.h5");
        std::reverse(args.begin(), args.end());
        app.parse(args);
        return c;
    };
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
        EXPECT_STREQ(e.what(), "--eta: must be a number in (0, 1e+06], not 0");
    }
}

// regime-detect's --low and --high are read as --mode says, wherever it stands.
TEST(AppOptions, DetectLevelsFollowTheModeWhereverItIsGiven) {
    auto parse = [](std::vector<std::string> args) {
        app::DetectConfig c;
        CLI::App app;
        app::add_detect_options(app, c);
        args.push_back("g.h5");
        std::reverse(args.begin(), args.end());
        app.parse(args);
        return c;
    };
    const app::DetectConfig batch = parse({"--low", "256", "--high", "1024", "--mode", "batch"});
    EXPECT_EQ(batch.low_batch, 256);
    EXPECT_EQ(batch.high_batch, 1024);
    const app::DetectConfig levels = parse({"--low", "topk:0.10", "--high", "powersgd:1"});
    EXPECT_EQ(levels.low.text(), "topk:0.1");
    EXPECT_EQ(levels.high.text(), "powersgd:1");
    EXPECT_THROW(parse({"--low", "powersgd:2", "--mode", "batch"}), UsageError);
    EXPECT_THROW(parse({"--high", "512"}), UsageError);
}
