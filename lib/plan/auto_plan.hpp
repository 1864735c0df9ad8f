// The automatic mode's planner (train-dist --auto): per parameter, the level that
// minimises the predicted step time, within the error budget of Accordion's
// levels (--low where the parameter's regime is critical, --high elsewhere), and
// a guard that sends everything uncompressed where no compressed plan is
// predicted faster than uncompressed by a margin. The step time is the
// performance model's (perf/model.hpp) on a measured link and compute time;
// errors are predicted from a compressibility profile as regime-detect --plan
// predicts them. Formulas and limits: docs/auto.md. Pure logic, no LibTorch.
#pragma once

#include "compress/spec.hpp"
#include "io/parameters.hpp"
#include "perf/model.hpp"
#include "regime/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::plan {

/// One parameter's compressibility in one epoch (the quantities of grad-dump --profile).
struct LayerProfile {
    double norm = 0;               ///< L2 norm of the epoch's summed gradient
    std::vector<double> spectrum;  ///< its singular values in PowerSGD's matrix view, largest first (matrices only)
    std::vector<double> tail;      ///< regime::topk_tail_fractions of it (one per regime::kTopkFractions)
};

/// The residual norm of `spec` on a parameter of `shape` whose summed gradient has
/// `profile`: 0 for none and for PowerSGD on a tensor it sends whole, the spectrum's
/// tail past the rank for PowerSGD, norm x sqrt(tail) for Top-k. Throws UsageError
/// for a level without an error model.
double residual_norm(const compress::Spec& spec, const std::vector<std::int64_t>& shape, const LayerProfile& profile);

/// The link as the automatic mode measured it: ring networks (perf::Network) for the
/// allreduce and the allgather on `world` ranks, and the burst a token bucket lets
/// through after a pause.
struct Link {
    int world = 1;
    perf::Network allreduce, allgather;
    /// Seconds of the networks' bandwidth time a call sends free after a pause (a token
    /// bucket's burst over its rate; 0: none). A step's exchange follows its compute,
    /// during which the bucket refills: min(burst_seconds, compute seconds) of its
    /// bandwidth time go free.
    double burst_seconds = 0;
};

/// Why a parameter has its level in an automatic plan (the metrics' /auto/reason).
enum class AutoReason : std::int8_t {
    pays = 0,          ///< the fastest of the candidates for this parameter (the budget did not bind)
    budget = 1,        ///< a faster candidate would have broken the error budget
    regime = 2,        ///< Accordion's level for the parameter's regime (no profile yet)
    does_not_pay = 3,  ///< no compressed plan is predicted faster than uncompressed: sent uncompressed
    vector = 4,        ///< not a matrix: always sent uncompressed
    measuring = 5,     ///< the step's compute is not known yet: its steps are timed uncompressed (the package's first epoch)
    accuracy = 6,      ///< less error than in the fastest plan, at a step predicted within the margin of its
};
const char* auto_reason_name(AutoReason reason);
/// auto_reason_name of every reason, in the enum's order (the metrics file's names).
const std::vector<std::string>& auto_reason_names();

/// Default margin of the guard: a compressed plan must be predicted at least this share
/// faster than uncompressed (--auto-margin). Also the share of the fastest plan's time
/// the plan in force may give up for less error (plans that close the model cannot
/// tell apart).
inline constexpr double kDefaultAutoMargin = 0.05;
/// Default relative difference of measured and predicted step time above which the link
/// and the codecs are measured again (--auto-drift).
inline constexpr double kDefaultAutoDrift = 0.25;
/// The most of a run's training time that measuring again may take: a drift is
/// measured again only while the measurements after the first (which precedes any
/// training), the next included (as long as the last one), stay within this share of
/// the seconds trained so far.
inline constexpr double kMeasureShare = 0.03;

struct AutoInputs {
    std::vector<io::Parameter> parameters;   ///< the model's, in model order
    std::vector<compress::Spec> candidates;  ///< distinct plannable levels, including none, --low and --high
    compress::Spec low, high;                ///< Accordion's levels: they set the budget
    std::vector<std::uint8_t> critical;      ///< per parameter: its regime is critical (low) or not (high)
    /// Per parameter: the latest epoch's profile; empty: none yet (Accordion's levels are priced).
    std::vector<LayerProfile> profile;
    regime::ErrorMeasure error = regime::kDefaultErrorMeasure;
    Link link;
    perf::Compute compute;  ///< seconds of forward and backward per step, its backward share, the buckets
    /// [candidate][parameter]: encode plus decode seconds per step of that level on that
    /// parameter (0 for none); empty: no codec time.
    std::vector<std::vector<double>> codec_seconds;
    double margin = kDefaultAutoMargin;
    std::int64_t bins = regime::kDefaultErrorBins;
    /// Seconds per step the model leaves out (measured minus modelled in an earlier epoch
    /// of the run: the optimizer, data, waiting for a slower rank, codecs slower than
    /// timed alone), for uncompressed steps and for compressed ones. Added to the step
    /// times the guard compares and reports, down to no less than half the model's own
    /// time; the choice among compressed plans keeps.
    double uncompressed_overhead = 0;
    double compressed_overhead = 0;
};

struct AutoPlan {
    std::vector<std::int32_t> level;  ///< per parameter: index into AutoInputs::candidates
    std::vector<AutoReason> reason;   ///< per parameter
    bool pays = false;                ///< a compressed plan is in force
    double seconds = 0;               ///< predicted step time of the levels in force
    double uncompressed_seconds = 0;  ///< predicted step time with every parameter at none (DDP's schedule)
    double compressed_seconds = 0;    ///< the fastest compressed plan within the budget (infinity: none exists)
    // All three include the overheads of AutoInputs; the model's own times are these less them.
    double budget = 0;                ///< summed error of Accordion's levels (0 without a profile)
    double error = 0;                 ///< summed error of the levels in force
};

/// The predicted step time, seconds, of per-parameter levels (indices into inputs.candidates):
/// perf::predict_ddp when every parameter is at none (buckets overlap the backward pass),
/// otherwise perf::predict_compressed: compute, then the codecs' seconds and one
/// collective per channel in use (PowerSGD's two rounds: two allreduces), nothing hidden,
/// less the bandwidth time the link's burst sends free (Link::burst_seconds).
double step_seconds(const AutoInputs& inputs, const std::vector<std::int32_t>& level);

/// Plans one epoch. With a profile: the fastest plan, the exact minimum of step_seconds
/// over the plans whose summed error is within the budget (the dynamic program of
/// regime::plan_levels once per set of channels in use, whose latencies do not add up
/// per parameter); then, of the plans predicted at most fastest / (1 - margin) seconds,
/// the one of least summed error (the same program with time and error swapped), which
/// is in force. Without: Accordion's levels. Then the guard: unless the fastest plan's
/// time is below (1 - margin) x the uncompressed time, every parameter goes
/// uncompressed (and the least-error plan is in force only where it passes the guard
/// too); the times include their overheads. Throws acc::Error for inputs of the wrong lengths,
/// UsageError for a candidate without an error model or low/high not among them.
AutoPlan plan_auto(const AutoInputs& inputs);

/// Seconds per step the model left out of an epoch that ran `level` and took
/// `measured_seconds` per step: the measured time less step_seconds(inputs, level),
/// `inputs` holding what the epoch itself measured (its compute time), so that the
/// next prediction tracks the measured step and only the model's difference between
/// two plans moves it; never below -0.5 x the model's time (AutoInputs' overheads).
double measured_overhead(const AutoInputs& inputs, const std::vector<std::int32_t>& level, double measured_seconds);
/// Seconds a call of the link's measurement must take before its sizes stop growing
/// (a slow link: 128 KiB at 20 Mbit/s).
inline constexpr double kLongLinkCall = 0.04;
/// Whether the link's measurement, whose sizes grow 2x from one to the next and whose
/// median call took `seconds` at each so far, has enough: the largest size reached
/// (`at_largest`), or a call of kLongLinkCall after one of a quarter of that, so that the
/// time grew with the size through two sizes and one stalled call (a busy machine) does
/// not end it among sizes a token bucket's burst lets through free.
bool link_sizes_enough(const std::vector<double>& seconds, bool at_largest);
/// UsageError naming `margin_option` or `drift_option` unless the guard's margin is in
/// [0, 1) and the drift a finite number > 0.
void check_auto_options(double margin, double drift, const std::string& margin_option,
                        const std::string& drift_option);
/// Whether a measured step time differs from the predicted one by more than `drift`
/// of the prediction: |measured - predicted| > drift x predicted.
bool prediction_drifted(double predicted_seconds, double measured_seconds, double drift);

}  // namespace acc::plan
