// train-dist's command-line options. No LibTorch here.
#pragma once

#include "dist/config.hpp"

namespace CLI {
class App;
}

namespace acc::app {

/// Adds train-dist's own options (--compress, --schedule, --accordion, ...) and the
/// shared training and rendezvous options to `app`.
void add_train_dist_options(CLI::App& app, dist::TrainDistConfig& config);

}  // namespace acc::app
