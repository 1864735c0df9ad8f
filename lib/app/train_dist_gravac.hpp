// train-dist --gravac: GraVAC's trainer hook (exchange/trainer/gravac_sync.hpp) set up
// from train-dist's options, its settings as the metrics file records them, and its
// epochs reported.
#pragma once

#include "app/train_dist_config.hpp"
#include "comm/process_group.hpp"
#include "exchange/trainer/gravac_sync.hpp"
#include "io/metrics.hpp"
#include "io/parameters.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::app {

/// train-dist's GraVAC exchange over `parameters`, or nullptr without --gravac. Collective.
std::unique_ptr<exchange::GravacSync> make_gravac_sync(const TrainDistConfig& config,
                                                       const std::vector<torch::Tensor>& parameters,
                                                       const std::vector<io::Parameter>& description,
                                                       comm::ProcessGroupCollectives& pg, int world);
/// The settings part of the metrics file's /gravac.
io::MetricsGravac gravac_metrics(const TrainDistConfig& config, int world);
/// Takes the epoch's step records and logs (debug) a digest of its decisions, so that
/// ranks can be compared.
std::vector<regime::GravacStep> log_gravac_epoch(exchange::GravacSync& sync, int rank, std::int64_t epoch);
/// "6 at 4x, 10 at 8x, 2 dense": steps at each factor, for the epoch line.
std::string gravac_summary(const std::vector<regime::GravacStep>& steps);

}  // namespace acc::app
