#include "base/choice.hpp"
#include "regime/plan.hpp"

#include "base/error.hpp"
#include "compress/spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <sstream>

namespace acc::regime {
namespace {

// The shortest form that reads back as the same double: 0.05, not 0.050000000000000003.
std::string number(double value) {
    std::string text;
    for (int digits = 6; digits <= 17; ++digits) {
        std::ostringstream out;
        out.precision(digits);
        out << value;
        text = out.str();
        if (!std::isfinite(value) || std::strtod(text.c_str(), nullptr) == value) break;
    }
    return text;
}

std::string where(size_t layer, size_t candidate) {
    return "layer " + std::to_string(layer) + ", candidate " + std::to_string(candidate);
}

void check_amount(double value, const std::string& what) {
    if (std::isnan(value)) throw Error(what + " is NaN; it must be a finite number >= 0");
    if (std::isinf(value)) throw Error(what + " is infinite; it must be a finite number >= 0");
    if (value < 0) throw Error(what + " is " + number(value) + "; it must be >= 0");
}

void check_layers(const std::vector<std::vector<Candidate>>& layers) {
    if (layers.empty()) throw Error("planning needs at least one layer, got none");
    for (size_t l = 0; l < layers.size(); ++l) {
        if (layers[l].empty())
            throw Error("layer " + std::to_string(l) + " has no candidate levels; give it at least one");
        if (layers[l].size() > static_cast<size_t>(std::numeric_limits<std::int32_t>::max()))
            throw Error("layer " + std::to_string(l) + " has too many candidate levels");
        for (size_t j = 0; j < layers[l].size(); ++j) {
            check_amount(layers[l][j].cost, where(l, j) + ": cost");
            check_amount(layers[l][j].error, where(l, j) + ": error");
        }
    }
}

// Per layer the least error, then the lower cost, then the lower index.
std::vector<std::int64_t> least_error_choice(const std::vector<std::vector<Candidate>>& layers) {
    std::vector<std::int64_t> choice(layers.size(), 0);
    for (size_t l = 0; l < layers.size(); ++l) {
        const auto& options = layers[l];
        size_t best = 0;
        for (size_t j = 1; j < options.size(); ++j) {
            const bool less_error = options[j].error < options[best].error;
            const bool same_error_cheaper = options[j].error == options[best].error && options[j].cost < options[best].cost;
            if (less_error || same_error_cheaper) best = j;
        }
        choice[l] = static_cast<std::int64_t>(best);
    }
    return choice;
}

// Fills cost and error by adding in layer order, the order the header promises.
void add_up(const std::vector<std::vector<Candidate>>& layers, LevelPlan& plan) {
    plan.cost = 0;
    plan.error = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        const Candidate& c = layers[l][static_cast<size_t>(plan.choice[l])];
        plan.cost += c.cost;
        plan.error += c.error;
    }
}

// The dynamic program over layers l .. L-1 with at most `usable` bins left,
// run backwards so that the lower-index tie rule is decided where the two
// plans first differ: at the layer being filled in. choice[l * (usable + 1) + r]
// is the candidate of layer l when r bins are left, -1 when nothing fits.
// Returns false when no plan fits in `usable` bins.
bool run_program(const std::vector<std::vector<Candidate>>& layers, const std::vector<std::vector<std::int64_t>>& bins_of,
                 std::int64_t usable, std::vector<std::int64_t>& out) {
    const size_t L = layers.size();
    const size_t width = static_cast<size_t>(usable) + 1;
    std::vector<std::int32_t> choice(L * width, -1);
    // Best suffix (layers l+1 ..) with at most r bins: its cost and error; all
    // empty suffixes fit at cost 0.
    std::vector<double> next_cost(width, 0.0), next_error(width, 0.0), cost(width), error(width);
    std::vector<std::uint8_t> next_fits(width, 1), fits(width);
    for (size_t l = L; l-- > 0;) {
        const auto& options = layers[l];
        const auto& option_bins = bins_of[l];
        for (size_t r = 0; r < width; ++r) {
            std::int32_t best = -1;
            double best_cost = 0, best_error = 0;
            for (size_t j = 0; j < options.size(); ++j) {
                const std::int64_t d = option_bins[j];
                if (d > static_cast<std::int64_t>(r)) continue;
                const size_t rest = r - static_cast<size_t>(d);
                if (!next_fits[rest]) continue;
                const double c = options[j].cost + next_cost[rest];
                const double e = options[j].error + next_error[rest];
                // Strictly better only: an equal one keeps the lower index.
                if (best < 0 || c < best_cost || (c == best_cost && e < best_error)) {
                    best = static_cast<std::int32_t>(j);
                    best_cost = c;
                    best_error = e;
                }
            }
            choice[l * width + r] = best;
            fits[r] = best >= 0;
            cost[r] = best_cost;
            error[r] = best_error;
        }
        std::swap(cost, next_cost);
        std::swap(error, next_error);
        std::swap(fits, next_fits);
    }
    if (!next_fits[width - 1]) return false;
    out.assign(L, 0);
    size_t r = width - 1;
    for (size_t l = 0; l < L; ++l) {
        const std::int32_t j = choice[l * width + r];
        out[l] = j;
        r -= static_cast<size_t>(bins_of[l][static_cast<size_t>(j)]);
    }
    return true;
}

}  // namespace

double powersgd_residual(const std::vector<double>& singular_values, std::int64_t rank) {
    if (rank < 0) throw UsageError("PowerSGD rank " + std::to_string(rank) + " is negative; it must be >= 0");
    for (size_t i = 0; i < singular_values.size(); ++i) {
        const double s = singular_values[i];
        const std::string name = "singular value " + std::to_string(i);
        if (!std::isfinite(s) || s < 0) check_amount(s, name);
        if (i > 0 && s > singular_values[i - 1])
            throw Error(name + " (" + number(s) + ") is larger than the one before it (" +
                        number(singular_values[i - 1]) + "); singular values must be in descending order");
    }
    // Smallest first: the tail is added with the least rounding.
    const size_t first = std::min(static_cast<size_t>(rank), singular_values.size());
    double sum = 0;
    for (size_t i = singular_values.size(); i-- > first;) sum += singular_values[i] * singular_values[i];
    return std::sqrt(sum);
}

std::vector<double> topk_tail_fractions(const float* values, std::int64_t n) {
    if (n < 0) throw Error("topk_tail_fractions: negative entry count " + std::to_string(n));
    std::vector<double> squares(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
        const double v = values[i];
        if (!std::isfinite(v))
            throw Error("entry " + std::to_string(i) + " of the gradient is " + (std::isnan(v) ? "NaN" : "infinite") +
                        "; its Top-k profile needs finite values");
        squares[static_cast<size_t>(i)] = v * v;
    }
    std::sort(squares.begin(), squares.end());
    // below[m]: the squared norm of the m smallest magnitudes. The whole norm is
    // added in the same order, so every tail is <= 1.
    std::vector<double> below(squares.size() + 1, 0.0);
    for (size_t i = 0; i < squares.size(); ++i) below[i + 1] = below[i] + squares[i];
    const double total = below.back();
    std::vector<double> tails(kTopkFractions.size(), 0.0);
    if (total == 0) return tails;
    for (size_t f = 0; f < kTopkFractions.size(); ++f) {
        const std::int64_t k = acc::compress::kept_entries(kTopkFractions[f], n);
        tails[f] = below[static_cast<size_t>(n - k)] / total;
    }
    return tails;
}

std::vector<double> topk_tail_fractions(const std::vector<float>& values) {
    return topk_tail_fractions(values.data(), static_cast<std::int64_t>(values.size()));
}

double topk_residual(double norm, const std::vector<double>& tail_fractions, double fraction) {
    check_amount(norm, "gradient norm");
    if (tail_fractions.size() != kTopkFractions.size())
        throw Error("Top-k profile has " + std::to_string(tail_fractions.size()) + " tail fractions; expected " +
                    std::to_string(kTopkFractions.size()) + ", one per recorded fraction");
    for (size_t f = 0; f < tail_fractions.size(); ++f) {
        const double t = tail_fractions[f];
        if (!(t >= 0 && t <= 1))
            throw Error("Top-k tail fraction at " + number(kTopkFractions[f]) + " is " + number(t) +
                        "; it must be in [0, 1]");
    }
    const auto it = std::find(kTopkFractions.begin(), kTopkFractions.end(), fraction);
    if (it == kTopkFractions.end()) {
        std::string grid;
        for (double f : kTopkFractions) grid += (grid.empty() ? "" : ", ") + number(f);
        throw UsageError("Top-k fraction " + number(fraction) +
                         " has no recorded profile; the planner can use the fractions " + grid);
    }
    return norm * std::sqrt(tail_fractions[static_cast<size_t>(it - kTopkFractions.begin())]);
}

const std::vector<std::string>& error_measure_names() {
    static const std::vector<std::string> names{"summed_norms", "summed_squares"};
    return names;
}

const char* error_measure_name(ErrorMeasure measure) { return choice_name(error_measure_names(), measure).c_str(); }

ErrorMeasure parse_error_measure(const std::string& text) {
    return parse_choice<ErrorMeasure>(error_measure_names(), text, "--plan-error");
}

double layer_error(double residual_norm, ErrorMeasure measure) {
    check_amount(residual_norm, "residual norm");
    return measure == ErrorMeasure::summed_squares ? residual_norm * residual_norm : residual_norm;
}

const char* plan_status_name(PlanStatus status) {
    switch (status) {
    case PlanStatus::optimal: return "optimal";
    case PlanStatus::least_error: return "least_error";
    case PlanStatus::infeasible: return "infeasible";
    }
    return "unknown";
}

std::int64_t error_bins(double error, double bin_width, std::int64_t bins) {
    if (error <= 0) return 0;
    if (!(bin_width > 0)) return bins + 1;
    const double q = error / bin_width;
    if (!(q <= static_cast<double>(bins))) return bins + 1;
    auto d = static_cast<std::int64_t>(std::ceil(q));
    // The division may round down across a whole number; the product decides.
    if (static_cast<double>(d) * bin_width < error) ++d;
    return std::min(d, bins + 1);
}

LevelPlan plan_levels(const std::vector<std::vector<Candidate>>& layers, double budget, std::int64_t bins) {
    check_layers(layers);
    check_amount(budget, "error budget");
    if (bins < 1 || bins > kMaxErrorBins)
        throw UsageError("error bins " + std::to_string(bins) + " is outside [1, " + std::to_string(kMaxErrorBins) + "]");
    const auto L = static_cast<std::int64_t>(layers.size());
    if (L > kMaxPlanTable / (bins + 1))
        throw UsageError(std::to_string(L) + " layers with " + std::to_string(bins) +
                         " error bins need a table of over " + std::to_string(kMaxPlanTable) +
                         " entries; use at most " + std::to_string(kMaxPlanTable / L - 1) + " bins");

    LevelPlan plan;
    plan.budget = budget;
    plan.bins = bins;
    plan.bin_width = budget / static_cast<double>(bins);

    std::vector<std::vector<std::int64_t>> bins_of(layers.size());
    for (size_t l = 0; l < layers.size(); ++l)
        for (const Candidate& c : layers[l]) bins_of[l].push_back(error_bins(c.error, plan.bin_width, bins));

    std::int64_t usable = bins;
    std::vector<std::int64_t> choice;
    while (run_program(layers, bins_of, usable, choice)) {
        plan.choice = choice;
        add_up(layers, plan);
        plan.bins_used = 0;
        for (size_t l = 0; l < layers.size(); ++l) plan.bins_used += bins_of[l][static_cast<size_t>(choice[l])];
        if (plan.error <= budget) {
            plan.status = PlanStatus::optimal;
            plan.budget_lost = std::min(budget, static_cast<double>(L + bins - usable) * plan.bin_width);
            return plan;
        }
        // Over the budget by rounding alone (the errors sit on bin edges): give
        // up the plan's last bin and look again.
        usable = plan.bins_used - 1;
        if (usable < 0) break;
    }

    // No plan fits in whole bins: the least-error plan, within the budget or not.
    plan.choice = least_error_choice(layers);
    add_up(layers, plan);
    plan.bins_used = 0;
    for (size_t l = 0; l < layers.size(); ++l) plan.bins_used += bins_of[l][static_cast<size_t>(plan.choice[l])];
    plan.status = plan.error <= budget ? PlanStatus::least_error : PlanStatus::infeasible;
    plan.budget_lost = std::min(budget, static_cast<double>(L + bins - usable) * plan.bin_width);
    return plan;
}

double uniform_budget(const std::vector<std::vector<Candidate>>& layers, const std::vector<std::int64_t>& uniform,
                      double factor) {
    if (!std::isfinite(factor) || factor < 0)
        throw UsageError("budget factor " + number(factor) + " must be a finite number >= 0");
    if (uniform.size() != layers.size())
        throw Error("uniform levels name " + std::to_string(uniform.size()) + " layers, but there are " +
                    std::to_string(layers.size()));
    double sum = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        const std::int64_t j = uniform[l];
        if (j < 0 || j >= static_cast<std::int64_t>(layers[l].size()))
            throw Error("uniform level of layer " + std::to_string(l) + " is candidate " + std::to_string(j) +
                        ", but the layer has " + std::to_string(layers[l].size()) + " candidates");
        const double e = layers[l][static_cast<size_t>(j)].error;
        check_amount(e, where(l, static_cast<size_t>(j)) + ": error");
        sum += e;
    }
    return factor * sum;
}

}  // namespace acc::regime
