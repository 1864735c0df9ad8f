// train-dist --auto: what the run measures of itself (the link on its own group,
// the compute of a step, the codecs of every candidate level on the model's
// shapes), the profile of each epoch's summed gradient, and the plan of each
// epoch (plan::plan_auto) with the check that measures again when a step's time
// drifts from its prediction. Model and limits: docs/auto.md.
#pragma once

#include "app/rank_session.hpp"
#include "exchange/gradient_exchange.hpp"
#include "io/metrics.hpp"
#include "plan/auto_plan.hpp"
#include "train-dist/config.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace acc::app {

class AutoMode {
public:
    /// `candidates`: the run plan's levels (none, --low, --high, --levels), in its order,
    /// which the plan's level indices refer to.
    /// `input_shape` and `classes`: the dataset's, for timing the model's compute.
    AutoMode(const TrainDistConfig& c, std::vector<io::Parameter> parameters, std::vector<compress::Spec> candidates,
             exchange::ExchangeOptions codec_options, std::vector<std::int64_t> input_shape, std::int64_t classes);

    /// Collective, before every epoch: rank 0 says whether to measure (the first epoch,
    /// or the last one's step time drifted), and then every rank measures the link and
    /// the compute together; rank 0 times the codecs.
    void before_epoch(RankSession& session, std::int64_t epoch);
    /// Rank 0: the epoch's plan, given Accordion's regimes (one per parameter). Its
    /// times are the model's; the epoch's prediction adds the last epoch's overhead.
    const plan::AutoPlan& plan(const std::vector<std::uint8_t>& critical);
    /// Rank 0, after the epoch: the profile of its summed gradients and its step time
    /// (`seconds` of `steps` steps, of which `compute_seconds` computing).
    void after_epoch(const train::GradientRecorder& recorder, double seconds, double compute_seconds,
                     std::int64_t steps);
    /// Rank 0: the epoch's record for the metrics file (after after_epoch).
    io::MetricsAuto metrics() const;
    /// "pays: predicted 1.2 ms per step vs 3.4 ms uncompressed" or "does not pay: ...".
    std::string summary() const;

private:
    void measure_link(RankSession& session);
    void measure_compute(RankSession& session);
    void time_codecs();

    const TrainDistConfig& c_;
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
    std::vector<std::int64_t> input_shape_;
    std::int64_t classes_ = 0;
    // What the model leaves out of a step (optimizer, data, waiting for a slower rank,
    // codecs slower in the run than alone): measured minus modelled seconds per step of
    // the last uncompressed epoch and of the last compressed one, added to predictions.
    double overhead_[2] = {0, 0};
    bool overhead_known_[2] = {false, false};
    double predicted_ = io::MetricsAuto::kNone;  // this epoch's prediction, overhead included
    double overhead_used_ = 0;                   // the overhead in predicted_
};

}  // namespace acc::app
