// regime-detect --plan: a schedule planned per layer, after L-GreCo
// ("Layerwise-adaptive gradient compression") with Accordion's regimes setting the
// budget ("Accordion: Adaptive Gradient Communication via Critical Learning Regime
// Identification"). Per epoch, every matrix parameter gets the cheapest candidate
// level such that the summed predicted error stays within the error of the levels
// Accordion would use (--low where critical, --high elsewhere) times a factor.
// Errors come from grads.h5's /profile, costs from the wire sizes or a comm.h5.
// Formulas and limits: docs/planner.md. No LibTorch.
#pragma once

#include "compress/spec.hpp"
#include "io/grads.hpp"
#include "regime/detect.hpp"
#include "regime/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::app {

struct PlanConfig {
    std::vector<compress::Spec> candidates;  ///< distinct levels; empty: no planning
    regime::ErrorMeasure error = regime::kDefaultErrorMeasure;
    double budget_factor = 1.0;
    std::int64_t bins = regime::kDefaultErrorBins;
    std::string comm;  ///< comm.h5: the cost is the modelled exchange time; empty: floats sent
};

/// Parses `option`'s comma-separated levels (regime-detect --plan, train-dist --levels)
/// into canonical specs, without repeats. Throws UsageError ("--plan: ...") for an
/// empty list or a level the planner has no error model for.
std::vector<compress::Spec> parse_plan_candidates(const std::string& text, const std::string& option = "--plan");

/// Throws UsageError ("OPTION: ...") unless `spec` is a level with an error model:
/// none, powersgd:RANK, or topk:F with F one of regime::kTopkFractions.
void check_plannable(const std::string& option, const compress::Spec& spec);

/// One planned epoch. Costs are per worker and step, in the plan's unit.
struct PlannedEpoch {
    std::int64_t epoch = 0;
    std::int64_t profile_epoch = 0;  ///< the epoch whose profile predicted the errors
    double budget = 0;               ///< the uniform levels' error x the factor
    double uniform_error = 0;        ///< Accordion's levels' summed error
    double error = 0;                ///< the levels kept: their summed error
    double uniform_cost = 0;         ///< Accordion's levels
    double cost = 0;                 ///< the levels kept
    double uniform_floats = 0;       ///< floats sent per step by Accordion's levels
    double floats = 0;               ///< floats sent per step by the levels kept
    regime::PlanStatus status = regime::PlanStatus::optimal;  ///< of the dynamic program
    bool kept_uniform = false;       ///< the plan was no cheaper, so Accordion's levels stay
};

struct PlannedSchedule {
    std::vector<compress::Spec> levels;  ///< none first, then in order of first use
    std::vector<std::int32_t> level;   ///< epochs x parameters, epoch-major, index into levels
    std::vector<PlannedEpoch> epochs;
    bool seconds = false;              ///< costs are modelled seconds (--comm), else floats
    std::string network;               ///< with --comm: the network, for the summary
};

/// Plans every epoch of `grads` (which must hold a profile of every epoch and
/// parameter) with Accordion's per-parameter decisions `critical` (epochs x
/// parameters) and its levels `low` and `high`. The profile of epoch max(e - 1, 0)
/// predicts epoch e. Throws FileError naming grads_path (no profile, Top-k
/// fractions off the grid) or plan.comm (world size, missing collective),
/// UsageError for levels without an error model.
PlannedSchedule plan_schedule(const PlanConfig& plan, const compress::Spec& low, const compress::Spec& high,
                              const std::string& grads_path, const io::GradStats& grads,
                              const regime::Decisions& critical);

}  // namespace acc::app
