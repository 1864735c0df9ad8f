// train-dist's work: data-parallel SGD over a process group, each parameter's
// gradient combined at the level of the epoch (--compress, --schedule or
// --accordion), with per-epoch metrics and checkpoints written by rank 0.
// main() only parses options into a TrainDistConfig. No LibTorch in this header.
#pragma once

#include "train-dist/config.hpp"

namespace acc::app {

/// Validates (UsageError), starts --nproc local ranks if asked (re-executing
/// argv), and runs this rank's part. Returns the exit code.
int run_train_dist(TrainDistConfig config, int argc, char** argv);

}  // namespace acc::app
