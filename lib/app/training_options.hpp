// The training options grad-dump and train-dist share, and --device: where the
// command line meets train::TrainConfig. The checks that need no command line
// stay in lib/train (train::validate).
#pragma once

#include "app/settings.hpp"
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

/// The training options' rows of a program's settings: every one that changes the
/// numbers must match on resume (--batch-size only when `batch_size_resumes`: a batch
/// schedule sets it); --epochs, --eval-every and --data-dir only across ranks (a
/// resumed run may extend its run or move its data); --threads may differ anywhere.
void add_training_settings(Settings& settings, const train::TrainConfig& config, bool batch_size_resumes);

/// The checkpoint named after an output file: OUTPUT with .ckpt.h5 for .h5
/// (metrics.h5: metrics.ckpt.h5), or with .ckpt.h5 added.
std::string checkpoint_beside(const std::string& output);

/// Adds --device (cpu or cuda, checked as text so that --help and errors show the
/// choices) and stores the choice in `device` as it is parsed.
CLI::Option* add_device_option(CLI::App& app, Device& device, const std::string& help);

}  // namespace acc::app
