// A run's one gradient sync: the trainer's hook (train::GradientSync) together with
// what a run asks of it around its epochs, behind one interface, whichever way the
// run combines gradients (BucketSync: each parameter at its level, the levels
// changing from epoch to epoch; GravacSync: GraVAC's factor chosen every step).
// make_run_sync builds the one a run's settings call for; grad-dump and train-dist
// hold nothing else.
#pragma once

#include "comm/collectives.hpp"
#include "compress/spec.hpp"
#include "exchange/gravac.hpp"
#include "exchange/totals.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/trainer/reducer.hpp"
#include "io/parameters.hpp"
#include "regime/gravac.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace acc::exchange {

/// What a run sets for each epoch before its first step.
struct EpochSettings {
    std::int64_t epoch = 0;
    std::vector<compress::Spec> levels;  ///< per parameter; GraVAC chooses its own factor and takes none
    std::int64_t samples_per_step = 0;   ///< samples of all ranks in one step (GraVAC's throughput)
};

/// What a sync decided by itself in an epoch, for the metrics file: GraVAC's steps and
/// its compression-throughput table; empty for a sync that follows the run's levels.
struct SyncRecord {
    std::vector<regime::GravacStep> steps;
    std::vector<regime::GravacThroughputRow> throughput;
};

class RunSync : public train::GradientSync {
public:
    /// The epoch about to run. Collective: every rank passes the same.
    virtual void begin_epoch(const EpochSettings& settings) = 0;
    /// Per parameter: its averaged gradient already carries momentum (dgc), so SGD
    /// applies momentum to its weight decay only.
    virtual std::vector<bool> momentum_in_gradient() const = 0;
    /// This rank's state for a checkpoint (error memories, compressor state, ...),
    /// and its restoring; load_state throws acc::Error naming an entry that does not fit.
    virtual train::TensorMap state() const = 0;
    virtual void load_state(const train::TensorMap& state) = 0;
    /// Totals since the last take_totals(), which resets them.
    virtual ExchangeTotals take_totals() = 0;
    /// What the sync decided since the last call, which clears it; `epoch` tags the
    /// throughput table.
    virtual SyncRecord take_record(std::int64_t epoch) = 0;
    /// Buckets a step sends during the backward pass (0: everything after it).
    virtual std::int64_t buckets() const = 0;
};

/// The buckets of a run that sends each parameter at its level, and its compression.
struct ExchangeSetup {
    BucketOptions buckets;
    ExchangeOptions compression;
};

/// How a run combines its gradients.
struct SyncSettings {
    ExchangeSetup buckets;                        ///< each parameter at its level (unless gravac)
    std::optional<GravacExchangeOptions> gravac;  ///< set: GraVAC, every step
};

/// The run's sync over `parameters` (described by `description`, in model order) and
/// the run's collectives, on `device`; `levels` (one per parameter) are the first
/// epoch's. Collective. Throws acc::UsageError for GraVAC settings out of range.
std::unique_ptr<RunSync> make_run_sync(const SyncSettings& settings, std::vector<torch::Tensor> parameters,
                                       std::vector<io::Parameter> description, comm::Collectives& comm,
                                       torch::Device device, const std::vector<compress::Spec>& levels);

}  // namespace acc::exchange
