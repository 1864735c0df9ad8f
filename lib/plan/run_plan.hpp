// The run plan: what a run does in each epoch, the compression level of every
// parameter and, for a batch schedule, the global batch size and learning-rate
// scale. From a fixed level, from a schedule file, or decided online by
// Accordion's rule (regime::decide_epoch, so that online and offline decide
// identically on the same norms). train-dist and the Python package's hook both
// hold one; neither keeps a rule of its own. Pure logic, no LibTorch and no I/O.
#pragma once

#include "compress/spec.hpp"
#include "io/schedule.hpp"
#include "regime/detect.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::plan {

/// A plan whose number of epochs is not known (the Python package's hook): any epoch
/// may be asked for.
inline constexpr std::int64_t kOpenEnded = -1;

/// Accordion online: its two levels and its rule's settings, with the programs' defaults.
struct AccordionSettings {
    compress::Spec low = compress::kDefaultLow;        ///< level of critical epochs (little compression)
    compress::Spec high = compress::kDefaultHigh;      ///< level of the other epochs
    double eta = regime::kDefaultEta;                  ///< threshold on the relative change of the norm
    std::int64_t interval = regime::kDefaultInterval;  ///< epochs between decisions
};

/// Where a run's levels come from.
enum class Source { fixed, schedule, accordion };

/// The levels in force in one epoch, with Accordion's decision behind them.
struct EpochLevels {
    std::vector<std::int32_t> level;  ///< per parameter: index into RunPlan::levels()
    // Accordion only (empty otherwise): the decision governing the epoch, as in a schedule file.
    std::vector<std::uint8_t> critical;
    std::vector<double> ratio;
    std::vector<std::int8_t> reason;
};

/// A schedule's epochs past its end: refused, or its last epoch repeated.
struct ScheduleEnd {
    bool extend_last = false;
    std::string path;  ///< the schedule file, for the message
    std::string hint;  ///< how the caller repeats the last epoch (an option or argument), for the message
};

/// The row of a schedule of `rows` epochs that `epoch` reads: the epoch itself, or past
/// the end the last one where `end.extend_last`; otherwise UsageError ("PATH: covers
/// epochs 0-5, not epoch 6 (HINT repeats its last epoch)").
std::int64_t schedule_row(std::int64_t rows, std::int64_t epoch, const ScheduleEnd& end);

class RunPlan {
public:
    /// `spec` on every matrix parameter, none on the others (train-dist --compress).
    static RunPlan fixed(const std::vector<Parameter>& parameters, const compress::Spec& spec,
                         std::int64_t epochs = kOpenEnded);
    /// A schedule file with its levels parsed (parse_levels; none in batch mode), checked
    /// against the parameters beforehand (check_schedule or check_parameters).
    static RunPlan from_schedule(const io::Schedule& schedule, const std::vector<compress::Spec>& levels,
                                 const std::vector<Parameter>& parameters, std::int64_t epochs = kOpenEnded,
                                 ScheduleEnd end = {true, "", ""});
    /// Accordion online. `lr` holds the learning rates known so far (train-dist: every
    /// epoch's); set_learning_rate adds the others epoch by epoch. Throws UsageError for
    /// settings out of range (regime::validate's words).
    static RunPlan accordion(const std::vector<Parameter>& parameters, const AccordionSettings& settings,
                             std::vector<double> lr = {}, std::int64_t epochs = kOpenEnded);
    /// Accordion online deciding the regimes of train-dist --auto, which sets the levels
    /// itself: levels() lists none, low, high and then `candidates` (each once).
    static RunPlan automatic(const std::vector<Parameter>& parameters, const AccordionSettings& settings,
                             const std::vector<compress::Spec>& candidates, std::vector<double> lr,
                             std::int64_t epochs);

    Source source() const { return source_; }
    std::int64_t epochs() const { return epochs_; }
    size_t parameters() const { return is_matrix_.size(); }
    /// Every level the run may use, each once; "none" first. EpochLevels::level indexes it.
    const std::vector<compress::Spec>& levels() const { return levels_; }
    /// levels() as canonical text, as the metrics file records them.
    std::vector<std::string> level_names() const;
    bool batch_mode() const { return batch_mode_; }
    bool online() const { return source_ == Source::accordion; }
    const AccordionSettings& accordion_settings() const { return accordion_; }

    /// The levels of `epoch`. Online, every epoch before it must have its norms recorded
    /// and the epoch its learning rate.
    EpochLevels levels_of(std::int64_t epoch) const;
    /// Batch mode: the global batch size and learning-rate scale of `epoch`.
    std::int64_t global_batch(std::int64_t epoch) const;
    double lr_scale(std::int64_t epoch) const;

    /// Online: the learning rate of `epoch`, which is the next one or the last one given.
    void set_learning_rate(std::int64_t epoch, double lr);
    /// Online: the learning rates given, per epoch from 0.
    const std::vector<double>& learning_rates() const { return lr_; }
    /// Online: rank 0's per-parameter norms of `epoch`'s summed gradient, recorded in
    /// epoch order (a resumed run records the stored ones first).
    void record_norms(std::int64_t epoch, const std::vector<double>& norms);
    /// Online: the recorded norms, epoch-major (recorded epochs x parameters).
    const std::vector<double>& norms() const { return norms_; }
    std::int64_t recorded_epochs() const;

private:
    std::int64_t row_of(std::int64_t epoch) const;

    Source source_ = Source::fixed;
    std::int64_t epochs_ = kOpenEnded;
    std::vector<bool> is_matrix_;
    std::vector<compress::Spec> levels_;
    std::vector<std::int32_t> table_;  // rows x parameters (fixed: one row; schedule: its epochs)
    std::int64_t rows_ = 0;
    ScheduleEnd end_;
    bool batch_mode_ = false;
    std::vector<std::int64_t> batch_;
    std::vector<double> scale_;
    // Online.
    AccordionSettings accordion_;
    std::int32_t low_ = 0, high_ = 0;  // indices of accordion_.low and .high in levels_
    std::vector<double> lr_;
    std::vector<double> norms_;
};

/// The schedule's levels parsed (the only parse of its text), or for each one that is
/// not a compressor spec a problem "its level 'X' is not a compressor spec" added to
/// `problems`; so are a level listed twice, /levels not starting with none, and a
/// compressor given to a vector parameter (which is always sent whole, as with
/// --compress). None in batch mode.
std::vector<compress::Spec> parse_levels(const io::Schedule& schedule, std::vector<std::string>& problems);

/// Checks a schedule against a train-dist run before training: the parameters (count,
/// names, order, shapes), the epochs it covers (a shorter schedule needs
/// --schedule-extend last), and its mode (compression: valid compressor specs; batch:
/// global batch sizes that split evenly over the ranks, and no --batch-size). Throws
/// UsageError naming `path` and every mismatch found. Returns the schedule's levels,
/// parsed, for RunPlan::from_schedule.
std::vector<compress::Spec> check_schedule(const io::Schedule& schedule, const std::string& path,
                                           const std::vector<Parameter>& parameters, std::int64_t epochs,
                                           bool extend_last, int world_size, bool batch_size_given);

/// The epochs a schedule calls critical: those critical for at least one parameter
/// that compression applies to (a matrix; vector parameters are always sent whole),
/// or, in batch mode, for the whole model. regime-detect's summary counts the same.
std::vector<std::int64_t> critical_epochs(const io::Schedule& schedule);

/// "none x41, powersgd:2 x21": how many parameters use each level of `levels`, in its order.
std::string levels_summary(const std::vector<compress::Spec>& levels, const std::vector<std::int32_t>& level);

}  // namespace acc::plan
