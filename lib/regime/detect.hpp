// Accordion's rule for finding critical learning regimes (Algorithm 1 of the
// paper, as the reference implementation runs it). Pure functions, no I/O.
//
// For every column c (a parameter tensor, or the whole model), at the end of
// every epoch d with d % interval == 0 the norm of that epoch's accumulated
// gradient is compared with the one `interval` epochs earlier:
//     ratio = |n(d - interval) - n(d)| / n(d - interval)
// ratio >= eta marks epochs d+1 .. d+interval critical. Epochs 0 .. interval are
// critical, a zero previous norm is critical, and when the learning rate of
// epoch e+1 is lower than that of epoch e every column is critical from e+1 up
// to and including the next decision epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc::regime {

/// Why an epoch is critical or not; the codes are those of the schedule file.
enum class Reason : std::int8_t {
    below_eta = 0,           ///< not critical: rate of change below eta
    at_least_eta = 1,        ///< critical: rate of change at or above eta
    first_interval = 2,      ///< critical: epochs 0 .. interval
    zero_previous_norm = 3,  ///< critical: the earlier norm was zero
    lr_decay = 4,            ///< critical: the learning rate decayed
};
const char* reason_name(Reason reason);

/// The rule's settings, their one default and their one range: regime-detect and
/// train-dist --accordion both take --eta and --interval from here.
inline constexpr double kDefaultEta = 0.5;
inline constexpr double kMaxEta = 1e6;  ///< far above any relative change a norm shows between decisions
inline constexpr std::int64_t kDefaultInterval = 10;
inline constexpr std::int64_t kMaxInterval = 1000000;

struct Options {
    double eta = kDefaultEta;                  ///< threshold on the relative change of the norm, in (0, kMaxEta]
    std::int64_t interval = kDefaultInterval;  ///< epochs between decisions, in [1, kMaxInterval]
};

/// Throws acc::UsageError naming --eta or --interval when `options` is out of its range.
void validate(const Options& options);

/// Epoch-major table of gradient norms: value(e, c) = values[e * columns + c].
struct NormTable {
    std::int64_t epochs = 0;
    std::int64_t columns = 0;
    std::vector<double> values;
    double at(std::int64_t epoch, std::int64_t column) const {
        return values[static_cast<size_t>(epoch * columns + column)];
    }
};

/// Collapses per-parameter norms into one whole-model column:
/// sqrt(sum over parameters of norm^2), the L2 norm of all gradients together.
NormTable whole_model(const NormTable& per_parameter);

/// Per epoch and column: whether it is critical, why, and the ratio that decided
/// (NaN in the first interval, +inf after a zero norm).
struct Decisions {
    std::int64_t epochs = 0;
    std::int64_t columns = 0;
    std::vector<std::uint8_t> critical;
    std::vector<double> ratio;
    std::vector<Reason> reason;
    size_t at(std::int64_t epoch, std::int64_t column) const { return static_cast<size_t>(epoch * columns + column); }
    /// Repeats a one-column table `columns` times (model granularity applied to every parameter).
    Decisions broadcast(std::int64_t columns) const;
};

/// Applies the rule. `lr` holds the learning rate of each epoch (lr.size() == norms.epochs).
/// Throws acc::UsageError as validate() does, acc::Error for mismatched inputs.
Decisions detect(const NormTable& norms, const std::vector<double>& lr, const Options& options);

/// Online: the decision governing `epoch` = earlier.epochs, from the norms of the
/// epochs before it and the learning rates of epochs 0 .. epoch (lr.size() == epoch + 1).
/// It is the offline rule's row for `epoch` (detect() over the earlier norms and a
/// placeholder row), so that deciding online and detecting offline agree. One row.
Decisions decide_epoch(const NormTable& earlier, const std::vector<double>& lr, const Options& options);

}  // namespace acc::regime
