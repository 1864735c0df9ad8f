#include "base/choice.hpp"
#include "regime/gravac.hpp"

#include "base/error.hpp"
#include "compress/spec.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace acc::regime {

namespace {

std::string number(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

bool finite_at_least_zero(double v) { return std::isfinite(v) && v >= 0; }

void check_norm(double v, const char* what) {
    if (!finite_at_least_zero(v))
        throw Error(std::string("GraVAC: the squared norm of ") + what + " is " + number(v) +
                    "; the gradients hold NaN or infinity, or the norm overflowed");
}

}  // namespace

const std::vector<std::string>& gravac_family_names() {
    // The registry's list: a family's own file says how GraVAC scales it.
    return compress::gravac_families();
}

const char* gravac_family_name(GravacFamily family) {
    const auto& names = gravac_family_names();
    const auto index = static_cast<size_t>(family);
    return index < names.size() ? names[index].c_str() : "?";
}

GravacFamily parse_gravac_family(const std::string& text) {
    return parse_choice<GravacFamily>(gravac_family_names(), text, "--gravac");
}

const char* gravac_policy_name(GravacPolicy policy) {
    switch (policy) {
    case GravacPolicy::exponential: return "exponential";
    case GravacPolicy::geometric: return "geometric";
    }
    return "?";
}

GravacPolicy parse_gravac_policy(const std::string& text) {
    if (text == "exponential") return GravacPolicy::exponential;
    if (text == "geometric") return GravacPolicy::geometric;
    throw UsageError("--gravac-policy: must be 'exponential' or 'geometric', not '" + text + "'");
}

const char* gravac_statistic_name(GravacStatistic statistic) {
    switch (statistic) {
    case GravacStatistic::median: return "median";
    case GravacStatistic::mean: return "mean";
    }
    return "?";
}

GravacStatistic parse_gravac_statistic(const std::string& text) {
    if (text == "median") return GravacStatistic::median;
    if (text == "mean") return GravacStatistic::mean;
    throw UsageError("--gravac-throughput: must be 'median' or 'mean', not '" + text + "'");
}

const char* gravac_gain_name(GravacGain gain) {
    switch (gain) {
    case GravacGain::squared: return "squared";
    case GravacGain::norm: return "norm";
    }
    return "?";
}

GravacGain parse_gravac_gain(const std::string& text) {
    if (text == "squared") return GravacGain::squared;
    if (text == "norm") return GravacGain::norm;
    throw UsageError("--gravac-gain: must be 'squared' or 'norm', not '" + text + "'");
}

const char* gravac_choice_name(GravacChoice choice) {
    switch (choice) {
    case GravacChoice::candidate: return "candidate";
    case GravacChoice::theta_min: return "theta_min";
    case GravacChoice::dense: return "dense";
    }
    return "?";
}

const std::vector<std::string>& gravac_step_fields() {
    static const std::vector<std::string> fields{"epoch",     "factor",   "choice",        "theta_min",
                                                 "candidate", "gain_min", "gain_candidate"};
    return fields;
}

std::vector<double> gravac_step_values(const GravacStep& s) {
    return {static_cast<double>(s.epoch), s.factor, static_cast<double>(s.choice), s.theta_min, s.candidate,
            s.gain_min, s.gain_candidate};
}

double gravac_smoothing(std::int64_t world_size) {
    if (world_size < 1) throw UsageError("world size: must be at least 1, not " + std::to_string(world_size));
    return std::min(1.0, kGravacSmoothingPerWorker * static_cast<double>(world_size));
}

GravacSettings gravac_defaults(std::int64_t world_size) {
    GravacSettings s;
    s.smoothing = gravac_smoothing(world_size);
    return s;
}

void validate(const GravacSettings& s) {
    // `!(x > a)` rather than `x <= a` so that NaN fails every check.
    if (!(s.theta_min > 1) || !std::isfinite(s.theta_min))
        throw UsageError("--gravac-theta-min: must be a compression factor > 1 (10 keeps 10 %), not " +
                         number(s.theta_min));
    if (!(s.theta_max >= s.theta_min) || !std::isfinite(s.theta_max))
        throw UsageError("--gravac-theta-max: must be a compression factor at least --gravac-theta-min (" +
                         number(s.theta_min) + "), not " + number(s.theta_max));
    if (!(s.epsilon > 0 && s.epsilon <= 1))
        throw UsageError("--gravac-epsilon: must be a compression gain in (0, 1], not " + number(s.epsilon));
    if (s.window < 1) throw UsageError("--gravac-window: must be at least 1 step, not " + std::to_string(s.window));
    if (!(s.omega >= 0 && s.omega < 1))
        throw UsageError("--gravac-omega: must be a fraction in [0, 1) (0.01 is 1 %), not " + number(s.omega));
    if (!(s.theta_s > 1) || !std::isfinite(s.theta_s))
        throw UsageError("--gravac-theta-s: must be a scale > 1 (2 makes 20x the first candidate after 10x), not " +
                         number(s.theta_s));
    if (!(s.smoothing > 0 && s.smoothing <= 1))
        throw UsageError("--gravac-smoothing: must be an EWMA weight in (0, 1], not " + number(s.smoothing));
    if (s.policy != GravacPolicy::exponential && s.policy != GravacPolicy::geometric)
        throw UsageError("--gravac-policy: must be 'exponential' or 'geometric'");
    if (s.statistic != GravacStatistic::median && s.statistic != GravacStatistic::mean)
        throw UsageError("--gravac-throughput: must be 'median' or 'mean'");
    if (s.gain != GravacGain::squared && s.gain != GravacGain::norm)
        throw UsageError("--gravac-gain: must be 'squared' or 'norm'");
}

void GravacEwma::add(double x) {
    value_ = samples_ == 0 ? x : alpha_ * x + (1 - alpha_) * value_;
    ++samples_;
}

double GravacEwma::value() const { return samples_ == 0 ? std::numeric_limits<double>::quiet_NaN() : value_; }

namespace {

const GravacSettings& validated(const GravacSettings& s) {
    validate(s);
    return s;
}

// The median (of an even count, the mean of the middle two) or the mean of a
// window's values, which are in step order and so alike on every rank.
double window_statistic(std::vector<double> values, GravacStatistic statistic) {
    if (statistic == GravacStatistic::mean) {
        double sum = 0;
        for (double v : values) sum += v;
        return sum / static_cast<double>(values.size());
    }
    const size_t half = values.size() / 2;
    std::sort(values.begin(), values.end());
    return values.size() % 2 ? values[half] : (values[half - 1] + values[half]) / 2;
}

}  // namespace

GravacController::GravacController(const GravacSettings& settings)
    : settings_(validated(settings)),
      theta_min_(settings.theta_min),
      candidate_(std::min(settings.theta_max, settings.theta_min * settings.theta_s)),
      gain_min_(settings.smoothing),
      gain_candidate_(settings.smoothing) {}

double GravacController::step_gain(double squared_ratio) const {
    return settings_.gain == GravacGain::norm ? std::sqrt(squared_ratio) : squared_ratio;
}

GravacDecision GravacController::decide(const GravacNorms& norms) {
    if (pending_) throw std::logic_error("GraVAC: decide() called twice without end_step()");
    check_norm(norms.grad_sq, "the gradient");
    check_norm(norms.min_sq, "the gradient compressed to theta_min");
    check_norm(norms.candidate_sq, "the gradient compressed to the candidate factor");

    if (norms.grad_sq > 0) {
        gain_min_.add(step_gain(norms.min_sq / norms.grad_sq));
        gain_candidate_.add(step_gain(norms.candidate_sq / norms.grad_sq));
    } else {
        ++zero_norm_steps_;
    }

    GravacDecision d;  // dense unless a gain qualifies
    if (!gain_min_.empty()) {
        double dc = gain_candidate_.value();
        double dm = gain_min_.value();
        if (dc >= settings_.epsilon) {
            d = {GravacChoice::candidate, candidate_, dc};
        } else if (dm >= settings_.epsilon) {
            d = {GravacChoice::theta_min, theta_min_, dm};
        }
    }
    last_ = d;
    evaluated_ = candidate_;
    pending_ = true;
    decided_ = true;
    return d;
}

void GravacController::end_step(double samples_per_second) {
    if (!pending_) throw std::logic_error("GraVAC: end_step() called without a decision");
    if (!(samples_per_second > 0) || !std::isfinite(samples_per_second))
        throw Error("GraVAC: the step's throughput must be a finite number of samples per second > 0, not " +
                    number(samples_per_second));
    pending_ = false;

    window_[last_.factor].push_back(samples_per_second * last_.gain);
    ++steps_;
    if (steps_ % settings_.window == 0) check();
}

std::vector<GravacThroughput> GravacController::table_now() const {
    std::vector<GravacThroughput> table = table_;
    for (const auto& [factor, values] : window_) {
        const double value = window_statistic(values, settings_.statistic);
        auto at = std::lower_bound(table.begin(), table.end(), factor,
                                   [](const GravacThroughput& e, double f) { return e.factor < f; });
        if (at != table.end() && at->factor == factor)
            at->throughput = value;
        else
            table.insert(at, {factor, value});
    }
    return table;
}

void GravacController::check() {
    ++checks_;
    raised_ = false;
    saturated_ = false;
    const double evaluated = candidate_;
    table_ = table_now();
    window_.clear();

    // ScalingPolicy on the scale relative to the initial theta_min, which is how
    // the paper lists its candidates (10x, 20x, 40x, 160x, 1000x).
    double s = evaluated / settings_.theta_min;
    double next_s = settings_.policy == GravacPolicy::exponential
                        // s * theta_s as a floor keeps the scale growing when
                        // a saturation stop left it at or near 1.
                        ? std::max(s * s, s * settings_.theta_s)
                        : s * settings_.theta_s;
    double next = std::min(settings_.theta_max, settings_.theta_min * next_s);

    // Omega rule: the evaluated candidate loses about as little as theta_min,
    // so it becomes the new minimum. A zero theta_min gain vouches for nothing.
    if (!gain_min_.empty()) {
        double dm = gain_min_.value();
        double dc = gain_candidate_.value();
        if (dm > 0 && std::fabs(dm - dc) / dm <= settings_.omega && evaluated > theta_min_) {
            theta_min_ = evaluated;
            raised_ = true;
        }
    }

    // Saturation: the two best compression throughputs within omega; take the
    // CF of the second best (line 38). Ties sort by factor, so the lower CF is
    // second. Every entry is > 0 (throughput > 0 times a gain >= epsilon > 0).
    if (table_.size() >= 2) {
        std::vector<GravacThroughput> sorted = table_;
        std::sort(sorted.begin(), sorted.end(), [](const GravacThroughput& a, const GravacThroughput& b) {
            return a.throughput != b.throughput ? a.throughput < b.throughput : a.factor < b.factor;
        });
        const GravacThroughput& best = sorted[sorted.size() - 1];
        const GravacThroughput& second = sorted[sorted.size() - 2];
        if (std::fabs(best.throughput - second.throughput) / second.throughput <= settings_.omega) {
            next = second.factor;
            saturated_ = true;
        }
    }
    candidate_ = std::clamp(next, theta_min_, settings_.theta_max);

    if (settings_.reset_gains) {
        // The candidate's average measured the factor theta_min now is.
        if (raised_) gain_min_ = gain_candidate_;
        if (candidate_ != evaluated) gain_candidate_ = GravacEwma(settings_.smoothing);
    }
}

GravacState GravacController::state() const {
    GravacState s;
    s.steps = steps_;
    s.theta_min = theta_min_;
    s.candidate = candidate_;
    s.candidate_scale = candidate_scale();
    s.gain_min = gain_min_.value();
    s.gain_candidate = gain_candidate_.value();
    s.gain_samples = gain_min_.samples();
    s.zero_norm_steps = zero_norm_steps_;
    s.decided = decided_;
    s.choice = last_.choice;
    s.factor_used = last_.factor;
    s.evaluated = evaluated_;
    s.checks = checks_;
    s.raised_theta_min = raised_;
    s.saturated = saturated_;
    s.throughput = table_now();
    return s;
}

std::int64_t powersgd_rank_for_factor(std::int64_t rows, std::int64_t cols, double factor) {
    if (rows < 1 || cols < 1)
        throw Error("GraVAC: a PowerSGD matrix needs at least one row and one column, not " + std::to_string(rows) +
                    " x " + std::to_string(cols));
    if (!(factor >= 1) || !std::isfinite(factor))
        throw Error("GraVAC: a compression factor must be a finite number >= 1, not " + number(factor));
    double r = std::floor(static_cast<double>(rows) * static_cast<double>(cols) /
                          (factor * static_cast<double>(rows + cols)));
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(r));
}

double keep_fraction_for_factor(double factor) {
    if (!(factor >= 1) || !std::isfinite(factor))
        throw Error("GraVAC: a compression factor must be a finite number >= 1, not " + number(factor));
    return 1 / factor;
}

}  // namespace acc::regime
