// The per-layer planner's core, after L-GreCo ("Layerwise-adaptive gradient
// compression"): the compression error of every candidate level, predicted from
// a compressibility profile of the epoch's summed gradient, and an exact dynamic
// program that picks one level per layer to minimise the cost of the exchange
// while the summed error stays within a budget (Accordion's uniform levels'
// error, times a factor). Pure functions, no LibTorch, no I/O.
//
// Units. A residual norm is the L2 (Frobenius) norm of G - C(G), where G is a
// parameter's summed gradient of one epoch and C the compressor without error
// feedback: the gradient's own units. A cost is whatever the caller measures
// the exchange in (floats sent per worker and step, or seconds of modelled
// exchange time); the planner only adds costs up. An error is a residual norm
// or its square, as the ErrorMeasure says, and a budget is in the same units as
// the errors.
//
// Layers and candidates are indices in the caller's order; messages name them
// ("layer 3, candidate 1"), 0-based.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace acc::regime {

// ---------------------------------------------------------------------------
// Error model

/// Residual norm of the best rank-`rank` approximation of a matrix (what PowerSGD
/// approaches with one power iteration per step and cannot beat):
/// sqrt(sum over i >= rank of s_i^2), with `singular_values` s_0 >= s_1 >= ...
/// of the matrix as PowerSGD reshapes it. rank 0 gives the whole norm; a rank at
/// or above the number of singular values gives 0.
/// Throws acc::UsageError for rank < 0, acc::Error for a singular value that is
/// NaN, infinite, negative or larger than the one before it.
double powersgd_residual(const std::vector<double>& singular_values, std::int64_t rank);

/// The fractions of entries kept at which a Top-k profile is recorded: every
/// power of ten from 1e-4 to 1 and a step of about 3x between them, evenly
/// spread on the log scale on which Top-k fractions are chosen (0.01 % to all).
/// Only these fractions can be planned: the profile holds nothing between them.
inline constexpr std::array<double, 9> kTopkFractions = {1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0};

/// Per fraction f of kTopkFractions, the fraction of the squared L2 norm of
/// `values` that lies outside its k largest magnitudes, with
/// k = acc::compress::kept_entries(f, n) (the count the Top-k compressor keeps):
/// sum of the n - k smallest squares / sum of all squares, in [0, 1].
/// All zeros for an empty or all-zero tensor (nothing is left out).
/// O(n log n): the magnitudes are sorted once. Throws acc::Error, naming the
/// entry, for a NaN or infinite value.
std::vector<double> topk_tail_fractions(const float* values, std::int64_t n);
std::vector<double> topk_tail_fractions(const std::vector<float>& values);

/// Residual norm of Top-k keeping `fraction` of the entries: norm * sqrt(tail),
/// where `norm` is the L2 norm of the gradient and `tail_fractions` its profile
/// (one value per entry of kTopkFractions, as topk_tail_fractions gives).
/// `fraction` must be one of kTopkFractions (acc::UsageError listing them
/// otherwise); acc::Error for a norm that is negative or not finite, a table of
/// the wrong length or a tail fraction outside [0, 1].
double topk_residual(double norm, const std::vector<double>& tail_fractions, double fraction);

/// How per-layer residual norms add up to the error that the budget limits.
enum class ErrorMeasure : std::int8_t {
    /// Sum over layers of the residual norms (L2 norm, not squared): L-GreCo's
    /// measure, and the default. In a study on this toolkit's MLP (epoch
    /// snapshots 0-7, PowerSGD ranks 1-16) it let the planner send 1.26-1.84x
    /// fewer floats than uniform ranks 1, 2 or 4 within their budget.
    summed_norms = 0,
    /// Sum over layers of the squared residual norms, i.e. the squared norm of
    /// the whole model's residual. The layers with the largest residuals
    /// dominate it; in the same study it left the planner no room (1.00-1.04x).
    summed_squares = 1,
};
inline constexpr ErrorMeasure kDefaultErrorMeasure = ErrorMeasure::summed_norms;
/// The measures' names (--plan-error), in the enum's order.
const std::vector<std::string>& error_measure_names();
const char* error_measure_name(ErrorMeasure measure);  ///< "summed_norms" or "summed_squares"
/// The inverse of error_measure_name; anything else throws acc::UsageError
/// ("--plan-error: must be summed_norms or summed_squares, not 'x'").
ErrorMeasure parse_error_measure(const std::string& text);

/// One layer's contribution to the summed error: `residual_norm` itself, or its
/// square. Throws acc::Error for a residual norm that is negative or not finite.
double layer_error(double residual_norm, ErrorMeasure measure);

// ---------------------------------------------------------------------------
// Planning one epoch

/// One candidate level of one layer.
struct Candidate {
    double cost = 0;   ///< finite, >= 0: floats sent, seconds, ... (the caller's unit)
    double error = 0;  ///< finite, >= 0: layer_error() of the level's residual norm
};

/// Error bins of the dynamic program. The plan can lose at most layers x
/// budget / bins of the budget (see LevelPlan::budget_lost): 10000 bins keep
/// that under 1 % of the budget up to 100 layers, and cost about
/// layers x candidates x 10^4 steps and 40 kB per layer.
inline constexpr std::int64_t kDefaultErrorBins = 10000;
inline constexpr std::int64_t kMaxErrorBins = 10000000;
/// Most entries (layers x (bins + 1)) of the backtracking table, 4 bytes each: 1 GiB.
inline constexpr std::int64_t kMaxPlanTable = std::int64_t{1} << 28;

enum class PlanStatus : std::int8_t {
    /// The cheapest plan whose summed discretised error fits the budget's bins
    /// (and, therefore, whose summed error is at most the budget).
    optimal = 0,
    /// No plan fits in whole bins, but the least-error plan's summed error is
    /// within the budget: that plan is returned. Only when the budget is within
    /// layers x bin width of the least error; more bins may then find cheaper plans.
    least_error = 1,
    /// Even the least-error plan exceeds the budget; that plan is returned.
    infeasible = 2,
};
const char* plan_status_name(PlanStatus status);  ///< "optimal", "least_error", "infeasible"

/// One epoch's plan.
struct LevelPlan {
    PlanStatus status = PlanStatus::optimal;
    std::vector<std::int64_t> choice;  ///< per layer, the index of its chosen candidate
    double cost = 0;                   ///< sum of the chosen costs, added in layer order
    double error = 0;                  ///< sum of the chosen errors, added in layer order
    double budget = 0;                 ///< the budget asked for
    std::int64_t bins = 0;             ///< the bins asked for
    double bin_width = 0;              ///< budget / bins; each error is rounded up to whole bins of this width
    std::int64_t bins_used = 0;        ///< sum of the chosen candidates' errors in bins (error_bins)
    /// What discretisation can cost: the plan is no dearer than the cheapest plan
    /// whose summed error is at most budget - budget_lost (in exact arithmetic).
    /// layers x bin_width, capped at the budget; one bin more for each bin that a
    /// rounding retry gave up (see plan_levels).
    double budget_lost = 0;
    bool feasible() const { return status != PlanStatus::infeasible; }
};

/// How many bins of width `bin_width` an error takes once rounded up to whole
/// bins (so that bins x bin_width >= error), or bins + 1 when that exceeds
/// `bins` (the error alone does not fit). With a bin width of 0 (a zero budget),
/// 0 for a zero error and bins + 1 for any other.
std::int64_t error_bins(double error, double bin_width, std::int64_t bins);

/// Chooses one candidate per layer to minimise the summed cost subject to the
/// summed error being at most `budget`: exact dynamic programming over the
/// errors rounded up to whole bins of width budget / bins (error_bins), in
/// O(layers x candidates x bins) time and O(layers x bins) memory.
///
/// Because errors are rounded up, any plan it returns as optimal has a summed
/// error (added in layer order) of at most `budget`. The price is budget_lost:
/// a plan whose summed error is at most budget - layers x bin_width takes at most
/// `bins` bins (each error gains less than a bin), so the result is at least as
/// cheap as it. Should rounding in the last bit put the chosen plan's summed
/// error above the budget (errors exactly on bin edges), the program is rerun
/// with the bins that plan used less one, and budget_lost grows accordingly.
/// A plan whose summed error is close to the budget, such as the uniform plan
/// with the budget uniform_budget() gives it, may therefore not be found, and
/// the result may cost more than it: a caller that must never do worse than
/// the uniform levels compares the two.
///
/// Ties: among plans of equal cost the smaller summed error wins, then the
/// lower candidate indices (compared layer by layer from the first). Exact when
/// costs and errors add up without rounding (whole numbers of floats sent do);
/// otherwise sums that differ only by rounding may decide near-ties.
///
/// A budget below the least-error plan's summed error is not an error: the
/// result is PlanStatus::infeasible with that plan (per layer the least error,
/// then the lower cost, then the lower index). PlanStatus::least_error: see there.
///
/// Throws acc::Error for no layers, a layer without candidates, a cost or error
/// that is NaN, infinite or negative, or a budget that is; acc::UsageError for
/// bins outside [1, kMaxErrorBins] or a backtracking table over kMaxPlanTable.
LevelPlan plan_levels(const std::vector<std::vector<Candidate>>& layers, double budget,
                      std::int64_t bins = kDefaultErrorBins);

/// The budget of the uniform levels: factor x the summed error of choosing, in
/// each layer, candidate `uniform[layer]` (e.g. Accordion's low level where the
/// layer is critical and its high level elsewhere), added in layer order, so
/// that with factor 1 the uniform plan's summed error is exactly the budget
/// (though its errors need not fit in whole bins: see plan_levels). Throws acc::Error for a
/// `uniform` of another length than `layers`, an index outside a layer's
/// candidates or an invalid error there; acc::UsageError for a factor that is
/// negative or not finite.
double uniform_budget(const std::vector<std::vector<Candidate>>& layers, const std::vector<std::int64_t>& uniform,
                      double factor = 1.0);

}  // namespace acc::regime
