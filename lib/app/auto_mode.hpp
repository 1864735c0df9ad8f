// The automatic mode (train-dist --auto, the package's CompressionState(auto=True)):
// what a run measures of itself (the link on its own group, the compute of a step,
// the codecs of every candidate level on the model's shapes), the profile of each
// epoch's summed gradient, and the plan of each epoch (plan::plan_auto) with the
// check that measures again when a step's time drifts from its prediction. The
// caller brings the collectives, and the compute: train-dist times its model before
// the first epoch, the package takes it from the first epoch's uncompressed steps.
// Model and limits: docs/auto.md.
#pragma once

#include "comm/collectives.hpp"
#include "exchange/gradient_exchange.hpp"
#include "io/metrics.hpp"
#include "plan/auto_plan.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace acc::app {

/// The automatic mode's settings (train-dist's --low, --high, --auto-margin,
/// --auto-drift and buckets; the package's arguments).
struct AutoSettings {
    compress::Spec low, high;  ///< Accordion's levels: they set the error budget
    double margin = plan::kDefaultAutoMargin;
    double drift = plan::kDefaultAutoDrift;
    double bucket_bytes = 25.0 * 1024 * 1024;  ///< the buckets an uncompressed step overlaps with the backward pass
    double first_bucket_bytes = 1024.0 * 1024;
    std::uint32_t seed = 0;  ///< of the random gradients the codecs are timed on
};

/// A step's compute, seconds: the forward and the backward pass (the slowest rank's).
struct ComputeSeconds {
    double forward = 0, backward = 0;
};

class AutoMode {
public:
    /// `candidates`: the run plan's levels (none, low, high and the others), in its
    /// order, which the plan's level indices refer to.
    AutoMode(AutoSettings settings, std::vector<io::Parameter> parameters, std::vector<compress::Spec> candidates,
             exchange::ExchangeOptions codec_options);

    /// Rank 0, before an epoch: whether to measure the link and the codecs: the first
    /// time, or when the last epoch's step time drifted from its prediction and
    /// measuring again stays within plan::kMeasureShare of the run (logged).
    bool due(std::int64_t epoch) const;
    /// Collective over `comm` (the collectives the exchange runs on, with tensors on
    /// `device`) and `host` (CPU collectives of the same ranks), when due() said so on
    /// rank 0: every rank times the link, rank 0 (`leader`) the codecs; then `compute`,
    /// if given and the compute is not known yet (the slowest rank's).
    void measure(comm::Collectives& comm, at::Device device, comm::Collectives& host, bool leader,
                 const std::function<ComputeSeconds()>& compute = {});
    /// Rank 0, when the epoch is not measured.
    void skip_measure() { measured_ = false, measure_seconds_ = 0; }
    /// Whether the compute of a step is known (measured, or taken from an epoch).
    bool knows_compute() const { return have_compute_; }

    /// Rank 0: the epoch's plan, given Accordion's regimes (one per parameter). Its
    /// times include the last epoch's overhead. Before the compute is known, every
    /// parameter goes uncompressed with reason `measuring`.
    const plan::AutoPlan& plan(const std::vector<std::uint8_t>& critical);
    /// Rank 0, after the epoch: its summed gradients (one per parameter, in order) for
    /// the profile, and its time: `seconds` of `steps` steps, of which `compute_seconds`
    /// computing (the next plan's compute, when finite and positive).
    void after_epoch(const std::vector<at::Tensor>& sums, double seconds, double compute_seconds,
                     std::int64_t steps);
    /// Rank 0: the epoch's record for the metrics file (after after_epoch).
    io::MetricsAuto metrics() const;
    /// "pays: modelled 1.2 ms per step vs 3.4 ms uncompressed", "does not pay: ..." or
    /// "measuring: ...".
    std::string summary() const;

private:
    void measure_link(comm::Collectives& comm, at::Device device, comm::Collectives& host);
    // Seconds the allreduce's calls of `bytes` (back to back: `seconds`) save after a pause.
    static double measure_burst(comm::Collectives& comm, const at::TensorOptions& options,
                                const std::vector<double>& bytes, const std::vector<double>& seconds,
                                const std::function<double(double)>& slowest);
    void time_codecs();

    AutoSettings settings_;
    std::vector<io::Parameter> parameters_;
    std::vector<compress::Spec> candidates_;
    exchange::ExchangeOptions codec_options_;
    plan::AutoInputs inputs_;
    plan::AutoPlan plan_;
    bool measured_ = false;        // this epoch's measurement ran
    double measure_seconds_ = 0;   // and took this long on rank 0
    bool have_measured_ = false;
    double measure_total_ = 0;     // every measurement's seconds but the first's
    double last_measure_ = 0;      // the last one's
    double trained_seconds_ = 0;   // the epochs' training seconds
    double measured_step_ = io::MetricsAuto::kNone;  // the last epoch's seconds per step
    bool have_compute_ = false;
    double planned_compute_ = io::MetricsAuto::kNone;  // the compute time the epoch's plan used
    // What the model leaves out of a step (optimizer, data, waiting for a slower rank,
    // codecs slower in the run than alone): measured minus modelled seconds per step of
    // the last uncompressed epoch and of the last compressed one, added to predictions.
    double overhead_[2] = {0, 0};
    bool overhead_known_[2] = {false, false};
    double predicted_ = io::MetricsAuto::kNone;  // this epoch's prediction, overhead included
    double overhead_used_ = 0;                   // the overhead in predicted_
};

}  // namespace acc::app
