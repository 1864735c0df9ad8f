// GraVAC's decision core (Tyagi & Swany, "GraVAC: Adaptive Compression for
// Communication-Efficient Distributed DL Training", Algorithm 1): which
// compression factor to send each step, and how the factors evolve. Pure
// arithmetic on scalars, no LibTorch, no I/O.
//
// A compression factor (CF) is the paper's: 10 means 10x, i.e. keep 10 % of the
// floats; 1 means dense (uncompressed).
//
// One step, as the training loop drives it:
//   1. compress g_o = g + residual to theta_min() (C_min), then C_min(g_o) further
//      by candidate_scale() to candidate() (multi-level, paper section IV-C);
//   2. all-reduce the squared L2 norms ||g_o||^2, ||C_min(g_o)||^2,
//      ||C_cand(g_o)||^2 and pass them to decide(): it updates both gains and
//      says what to send (candidate, theta_min or dense; lines 10-24);
//   3. send that, update the residual, and pass the step's system throughput
//      (samples per second, the same on every rank) to end_step(): it keeps
//      the step's compression throughput for the factor used and, every
//      `window` steps, fills the throughput table from the window's steps
//      (median or mean per factor) and runs CheckGraVAC (scale-up, theta_min
//      raise, saturation stop).
//
// Determinism: the controller holds no clock, no random state and no unordered
// container; the same sequence of inputs gives bit-identical decisions. Ranks
// that feed it all-reduced values (identical on every rank) therefore take the
// same decisions without any further broadcast.
//
// Where this differs from Algorithm 1 read literally, and from the released code
// (which does not run): docs/compressors.md, section "GraVAC".
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace acc::regime {

// The paper's defaults (section IV-B, exponential policy on DGC).
inline constexpr double kGravacThetaMin = 10;      ///< minimum CF, 10x
inline constexpr double kGravacThetaMax = 1000;    ///< maximum CF, 1000x
inline constexpr double kGravacEpsilon = 0.7;      ///< minimum gain for a CF to be sent
inline constexpr std::int64_t kGravacWindow = 500; ///< steps between CheckGraVAC (2000 in the geometric runs)
inline constexpr double kGravacOmega = 0.01;       ///< 1 %: saturation and theta_min-raise tolerance
inline constexpr double kGravacThetaS = 2;         ///< first candidate = theta_s * theta_min (20x)
/// EWMA weight of a new sample: N / 100, the paper's rule (2 ranks: 0.02; its 32 workers: 0.32).
inline constexpr double kGravacSmoothingPerWorker = 0.01;

/// How a window's per-step compression throughputs of one factor become its
/// entry in the table that CheckGraVAC compares (Algorithm 1 stores every step's
/// value, so the last one wins; one step's time is too noisy for a 1 % test).
enum class GravacStatistic : std::int8_t {
    median = 0,  ///< the window's median: a few outlying steps (a short batch, a pause) cannot move it
    mean = 1,    ///< the window's mean: every step counts, outliers included
};
const char* gravac_statistic_name(GravacStatistic statistic);
/// "median" or "mean"; anything else throws acc::UsageError naming --gravac-throughput.
GravacStatistic parse_gravac_statistic(const std::string& text);

/// How a step's compression gain is measured from the model's norms.
enum class GravacGain : std::int8_t {
    /// ||C(g_o)||^2 / ||g_o||^2: the ratio of squared norms (variances) Algorithm 1 writes.
    squared = 0,
    /// ||C(g_o)|| / ||g_o||: unsquared norms, as the authors' released code measures the
    /// gain (the square root of `squared`, so larger for every gain below 1).
    norm = 1,
};
const char* gravac_gain_name(GravacGain gain);
/// "squared" or "norm"; anything else throws acc::UsageError naming --gravac-gain.
GravacGain parse_gravac_gain(const std::string& text);

/// The compressors GraVAC scales (--gravac FAMILY), listed once: --gravac's check
/// and message, the exchange and the metrics file take their names from here.
/// A family is its index in compress::gravac_families(), the registry's list, which
/// alone names them (each compressor's own file says whether GraVAC scales it):
/// parse_gravac_family gives one, GravacFamily{} is the list's first.
enum class GravacFamily : std::int8_t {};
/// The families' names in --help order (the registry's).
const std::vector<std::string>& gravac_family_names();
const char* gravac_family_name(GravacFamily family);
/// A family's name; anything else throws acc::UsageError naming --gravac.
GravacFamily parse_gravac_family(const std::string& text);

enum class GravacPolicy : std::int8_t {
    exponential = 0,  ///< scale s relative to the initial theta_min squares: 2, 4, 16, 256 (10x, 20x, 40x, 160x, 1000x)
    geometric = 1,    ///< s is multiplied by theta_s: 2, 4, 8, 16, ... (10x, 20x, 40x, 80x, ...)
};
const char* gravac_policy_name(GravacPolicy policy);
/// "exponential" or "geometric"; anything else throws acc::UsageError naming --gravac-policy.
GravacPolicy parse_gravac_policy(const std::string& text);

/// The paper's EWMA smoothing for N workers: min(1, N / 100).
/// Throws acc::UsageError for N < 1.
double gravac_smoothing(std::int64_t world_size);

struct GravacSettings {
    double theta_min = kGravacThetaMin;   ///< > 1 (CF 1 is dense)
    double theta_max = kGravacThetaMax;   ///< >= theta_min
    double epsilon = kGravacEpsilon;      ///< in (0, 1]
    std::int64_t window = kGravacWindow;  ///< >= 1 step
    double omega = kGravacOmega;          ///< in [0, 1)
    double theta_s = kGravacThetaS;       ///< > 1
    double smoothing = kGravacSmoothingPerWorker;  ///< in (0, 1]; set gravac_smoothing(N) for N workers
    GravacPolicy policy = GravacPolicy::exponential;
    GravacStatistic statistic = GravacStatistic::median;  ///< a factor's table entry from a window's steps
    GravacGain gain = GravacGain::squared;  ///< how a step's gain is measured (epsilon is compared with it)
    /// Restart the candidate's gain EWMA when CheckGraVAC changes the candidate, and
    /// hand it to theta_min when theta_min is raised to it, so that each average
    /// holds only samples of the factor it stands for. Off: the paper says nothing
    /// of a reset, and the averages run on across factor changes.
    bool reset_gains = false;
};

/// The defaults with the smoothing for `world_size` workers.
GravacSettings gravac_defaults(std::int64_t world_size);

/// Throws acc::UsageError whose message starts with the option at fault
/// ("--gravac-epsilon: must be in (0, 1], not 1.5").
void validate(const GravacSettings& settings);

/// Exponentially weighted moving average of the per-step gains: the first
/// sample starts it (y1 = x1), then y = alpha x + (1 - alpha) y. It is usable
/// from the first step on, with no warm-up window.
class GravacEwma {
public:
    explicit GravacEwma(double alpha) : alpha_(alpha) {}
    void add(double x);
    bool empty() const { return samples_ == 0; }
    std::int64_t samples() const { return samples_; }
    /// NaN while empty.
    double value() const;

private:
    double alpha_;
    double value_ = 0;
    std::int64_t samples_ = 0;
};

/// Squared L2 norms of one step over the whole model, summed over ranks by the
/// caller (so identical on every rank).
struct GravacNorms {
    double grad_sq = 0;       ///< ||g_o||^2, g_o = gradient + residual (error feedback)
    double min_sq = 0;        ///< ||C(g_o, theta_min)||^2
    double candidate_sq = 0;  ///< ||C(C(g_o, theta_min), theta_s)||^2, the candidate CF
};

enum class GravacChoice : std::int8_t {
    candidate = 0,  ///< send C_cand(g_o) at candidate(): its gain >= epsilon (line 11)
    theta_min = 1,  ///< send C_min(g_o) at theta_min(): candidate gain < epsilon <= theta_min gain (line 16)
    dense = 2,      ///< send g_o uncompressed, residual = 0: both gains < epsilon, or no gain yet (line 21)
};
const char* gravac_choice_name(GravacChoice choice);

/// One step's decision, identical on every rank: the metrics file's /gravac/steps
/// row and the Python package's accordion.GravacStep.
struct GravacStep {
    static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    std::int64_t epoch = 0;
    double factor = 1;          ///< compression factor sent (1: dense)
    std::int8_t choice = 2;     ///< GravacChoice: 0 candidate, 1 theta_min, 2 dense (lines 10-24 of Algorithm 1)
    double theta_min = 0;       ///< minimum factor this step
    double candidate = 0;       ///< candidate factor evaluated this step
    double gain_min = kNaN;     ///< EWMA gain of theta_min after this step's sample
    double gain_candidate = kNaN;  ///< EWMA gain of the candidate after this step's sample
};

/// GravacStep's fields by name, in its order (the metrics file's datasets and the
/// Python package's attributes are named so), and one step's values in that order.
const std::vector<std::string>& gravac_step_fields();
std::vector<double> gravac_step_values(const GravacStep& step);

/// One row of a run's compression-throughput record (the metrics file's
/// /gravac/throughput), taken at the end of an epoch.
struct GravacThroughputRow {
    std::int64_t epoch = 0;
    double factor = 1;      ///< compression factor (1: dense)
    double throughput = 0;  ///< samples/s x gain, last measured at this factor
};

struct GravacDecision {
    GravacChoice choice = GravacChoice::dense;
    double factor = 1;  ///< CF sent: candidate(), theta_min() or 1 (dense)
    double gain = 1;    ///< gain credited to that CF in the throughput table (1 for dense)
};

/// One entry of the compression-throughput table.
struct GravacThroughput {
    double factor = 1;      ///< CF; 1 is dense
    double throughput = 0;  ///< system throughput (samples/s) x gain: the statistic of a window's steps at this CF
};

/// Everything a metrics file may want to record, after any call.
struct GravacState {
    std::int64_t steps = 0;          ///< completed steps (end_step calls)
    double theta_min = 0;            ///< current minimum CF
    double candidate = 0;            ///< CF to evaluate next step
    double candidate_scale = 0;      ///< theta_s = candidate / theta_min
    double gain_min = 0;             ///< EWMA gain of theta_min; NaN before the first sample
    double gain_candidate = 0;       ///< EWMA gain of the candidate; NaN before the first sample
    std::int64_t gain_samples = 0;   ///< steps that fed the gains
    std::int64_t zero_norm_steps = 0;  ///< steps skipped because ||g_o|| = 0
    bool decided = false;            ///< a decision has been made (the next three are valid)
    GravacChoice choice = GravacChoice::dense;  ///< last decision
    double factor_used = 1;          ///< CF sent at the last decision
    double evaluated = 0;            ///< candidate CF evaluated at the last decision
    std::int64_t checks = 0;         ///< CheckGraVAC runs so far
    bool raised_theta_min = false;   ///< the last check raised theta_min (omega rule)
    bool saturated = false;          ///< the last check stopped at theta_ideal (throughput saturation)
    /// Ascending factor: the table as the next CheckGraVAC would see it now (the
    /// current window's steps so far over the entries of earlier windows).
    std::vector<GravacThroughput> throughput;
};

class GravacController {
public:
    /// Validates the settings (acc::UsageError).
    explicit GravacController(const GravacSettings& settings);

    double theta_min() const { return theta_min_; }
    /// CF to evaluate this step: theta_s * theta_min, within [theta_min, theta_max].
    double candidate() const { return candidate_; }
    /// theta_s: the factor by which C_min(g_o) is compressed again to reach candidate().
    double candidate_scale() const { return candidate_ / theta_min_; }

    /// Lines 7, 9 and 10-24 of Algorithm 1: feeds the step's gains into the
    /// EWMAs and picks what to send. A step with ||g_o|| = 0 carries no
    /// information about what compression loses (0/0): it leaves the gains
    /// unchanged. Until a first gain exists the choice is dense.
    /// Throws acc::Error for a NaN, infinite or negative norm (the gradients
    /// diverged; every rank sees the same all-reduced value and throws alike),
    /// std::logic_error when the previous decision has not been ended.
    GravacDecision decide(const GravacNorms& norms);

    /// UpdateStep and CheckGraVAC: keeps throughput x gain of this step for the
    /// CF decided, counts the step and, every `window` steps, sets each CF used
    /// in the window to the statistic (settings().statistic) of its steps there
    /// (CFs not used keep their earlier entry), scales the candidate up, raises
    /// theta_min when the two gains are within omega, and stops at theta_ideal
    /// when the two best compression throughputs are within omega.
    /// `samples_per_second` is the step's system throughput: the samples the
    /// step processed on all ranks over the step's time, its evaluation and
    /// anything else between steps left out. Reduce it over ranks (e.g. the
    /// slowest rank's time) so that all ranks pass the same value. Throws
    /// acc::Error unless it is finite and > 0, std::logic_error without a
    /// pending decision.
    void end_step(double samples_per_second);

    GravacState state() const;
    const GravacSettings& settings() const { return settings_; }

private:
    void check();
    /// A step's gain from its ratio of squared norms, as settings().gain measures it.
    double step_gain(double squared_ratio) const;
    std::vector<GravacThroughput> table_now() const;

    GravacSettings settings_;
    double theta_min_;
    double candidate_;
    GravacEwma gain_min_;
    GravacEwma gain_candidate_;
    std::int64_t steps_ = 0;
    std::int64_t zero_norm_steps_ = 0;
    bool pending_ = false;
    bool decided_ = false;
    GravacDecision last_;
    double evaluated_ = 0;
    std::int64_t checks_ = 0;
    bool raised_ = false;
    bool saturated_ = false;
    std::vector<GravacThroughput> table_;  // ascending factor, unique factors; as of the last check
    std::map<double, std::vector<double>> window_;  // this window's throughput x gain per CF, in step order
};

/// PowerSGD rank for compression factor `factor` on a rows x cols matrix (a
/// conv weight viewed as out x in*kh*kw): rank r sends r (rows + cols) floats
/// of rows * cols, so r = max(1, floor(rows * cols / (factor (rows + cols))))
/// keeps about 1/factor of them. For factor >= 1 this never exceeds
/// min(rows, cols). Throws acc::Error for rows or cols < 1 or factor < 1 or
/// non-finite.
std::int64_t powersgd_rank_for_factor(std::int64_t rows, std::int64_t cols, double factor);

/// Fraction of entries a sparsifier (topk, randomk, dgc) keeps at `factor`: 1 / factor.
/// Throws acc::Error for factor < 1 or non-finite.
double keep_fraction_for_factor(double factor);

}  // namespace acc::regime
