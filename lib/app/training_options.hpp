// The training options grad-dump and train-dist share, and --device: where the
// command line meets train::TrainConfig. The checks that need no command line
// stay in lib/train (train::validate).
#pragma once

#include "base/device.hpp"
#include "train/config.hpp"

#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace acc::app {

/// Adds the training options (--model, --dataset, --epochs, --lr, ...) to `app`.
void add_train_options(CLI::App& app, train::TrainConfig& config);

/// Adds --device (cpu or cuda, checked as text so that --help and errors show the
/// choices) and stores the choice in `device` as it is parsed.
CLI::Option* add_device_option(CLI::App& app, Device& device, const std::string& help);

}  // namespace acc::app
