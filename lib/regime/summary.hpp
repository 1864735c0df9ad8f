// What a person wants to know about a schedule: where the critical regimes are,
// how often each level is used, and how much communication it saves.
#pragma once

#include "regime/detect.hpp"
#include "regime/levels.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace acc::regime {

/// A maximal run of epochs in which at least one counted column is critical.
struct Regime {
    std::int64_t first = 0;
    std::int64_t last = 0;           ///< inclusive
    std::int64_t peak_critical = 0;  ///< most critical columns in one epoch of the run
};

/// Which columns count: in compression mode only the parameters that can be
/// compressed (others are always "none"); in batch mode the single model column.
std::vector<Regime> find_regimes(const Decisions& decisions, const std::vector<bool>& counted);

/// Critical columns per epoch, among the counted ones.
std::vector<std::int64_t> critical_per_epoch(const Decisions& decisions, const std::vector<bool>& counted);

/// One character per `block` epochs: '#' every counted column critical in the
/// whole block, '+' at least half of the cells, '-' some, '.' none.
std::string timeline(const Decisions& decisions, const std::vector<bool>& counted, std::int64_t block);

/// Epochs per timeline character: the interval, or more so that the line stays
/// within `width` characters.
std::int64_t timeline_block(std::int64_t epochs, std::int64_t interval, std::int64_t width = 100);

/// Why a run of epochs is critical: the reasons among its critical counted
/// columns, each with the most columns it covers in one epoch of the run.
struct CriticalReasons {
    std::int64_t first = 0;
    std::int64_t last = 0;  ///< inclusive
    std::vector<std::pair<Reason, std::int64_t>> reasons;  ///< in code order; columns at most
    std::int64_t decay_epoch = -1;  ///< lr_decay: the epoch whose learning rate dropped
};

/// Maximal runs of consecutive critical epochs with the same reasons (and, for
/// a learning-rate decay, the same decay). `lr` is the learning rate of each epoch.
std::vector<CriticalReasons> critical_reasons(const Decisions& decisions, const std::vector<bool>& counted,
                                              const std::vector<double>& lr);

/// One run for a person: "epochs 3-4: norm change r >= eta 0.5 (5/6 parameters)",
/// "epoch 6: the learning rate drops from 0.05 to 0.005 at epoch 6". `columns`
/// is the number of counted columns (counts are shown when above 1).
std::string reasons_text(const CriticalReasons& run, const std::vector<double>& lr, double eta,
                         std::int64_t interval, std::int64_t columns);

struct LevelShare {
    std::string level;
    double share = 0;  ///< fraction of the counted parameter-epochs at this level
};
/// Shares of each level among the parameter-epochs of the `counted` parameters
/// (levels no counted parameter uses are left out).
std::vector<LevelShare> level_shares(const CompressionPlan& plan, const std::vector<bool>& counted);

/// Data sent per worker over the whole run, in 32-bit floats, for the schedule
/// and for the low and high level used throughout.
struct Communication {
    double schedule = 0;
    double low = 0;
    double high = 0;
    bool per_step = false;  ///< true when the input had no step counts (totals are per-step averages)
};

/// Compression mode: sum over epochs of steps[e] x floats per step, from the
/// parameter shapes and each compressor's wire size (docs/metrics.md).
Communication compression_communication(const CompressionPlan& plan, const std::vector<std::vector<std::int64_t>>& shapes,
                                        const std::vector<std::int64_t>& steps, const compress::Spec& low,
                                        const compress::Spec& high);

/// Batch mode: an uncompressed allreduce of `model_floats` per step, and
/// samples_per_epoch / batch_size steps per epoch.
Communication batch_communication(const BatchPlan& plan, double model_floats, double samples_per_epoch,
                                  std::int64_t low, std::int64_t high);

}  // namespace acc::regime
