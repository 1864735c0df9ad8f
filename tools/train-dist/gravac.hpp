// train-dist --gravac: the options of GraVAC's trainer hook (exchange/trainer/gravac_sync.hpp,
// which make_run_sync builds) from train-dist's, its settings as the metrics file
// records them, and its epochs reported.
#pragma once

#include "train-dist/config.hpp"
#include "exchange/gravac.hpp"
#include "io/metrics.hpp"
#include "io/parameters.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::app {

/// GraVAC's exchange options for `world` ranks; unset without --gravac.
std::optional<exchange::GravacExchangeOptions> gravac_options(const TrainDistConfig& config, int world);
/// The settings part of the metrics file's /gravac.
io::MetricsGravac gravac_metrics(const TrainDistConfig& config, int world);
/// Logs (debug) a digest of an epoch's decisions, so that ranks can be compared.
void log_gravac_epoch(const std::vector<regime::GravacStep>& steps, int rank, std::int64_t epoch);
/// "6 at 4x, 10 at 8x, 2 dense": steps at each factor, for the epoch line.
std::string gravac_summary(const std::vector<regime::GravacStep>& steps);

}  // namespace acc::app
