// train-dist's command-line options. No LibTorch here.
#pragma once

#include "app/settings.hpp"
#include "train-dist/config.hpp"

namespace CLI {
class App;
}

namespace acc::app {

/// Adds train-dist's own options (--compress, --schedule, --accordion, ...) and the
/// shared training and rendezvous options to `app`.
void add_train_dist_options(CLI::App& app, TrainDistConfig& config);

/// train-dist's settings (app/settings.hpp); in `batch_mode` a batch schedule sets
/// --batch-size, so a resume does not compare it. The levels, known once rank 0 has
/// planned, are the driver's to add.
Settings train_dist_settings(const TrainDistConfig& config, bool batch_mode);

/// Checks what can be checked without the model and data; throws UsageError naming the option.
void validate(const TrainDistConfig& config);

/// The checkpoint file of a run: checkpoint_beside(the metrics file's name), in
/// --checkpoint-dir or else the metrics file's directory.
std::string checkpoint_path(const TrainDistConfig& config);

}  // namespace acc::app
