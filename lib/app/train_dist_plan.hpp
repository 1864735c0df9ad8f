// What train-dist does in each epoch: the compression level of every parameter
// and, for a batch schedule, the global batch size and learning-rate scale.
// From --compress, from a schedule file, or decided online by Accordion's rule
// (regime::detect, so that online and offline decide identically on the same
// norms). Pure logic, no LibTorch and no I/O.
#pragma once

#include "compress/spec.hpp"
#include "app/train_dist_config.hpp"
#include "io/parameters.hpp"
#include "io/schedule.hpp"
#include "regime/detect.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::app {

/// The levels in force in one epoch, with Accordion's decision behind them.
struct EpochLevels {
    std::vector<std::int32_t> level;  ///< per parameter: index into RunPlan::levels()
    // Accordion only (empty otherwise): the decision governing the epoch, as in a schedule file.
    std::vector<std::uint8_t> critical;
    std::vector<double> ratio;
    std::vector<std::int8_t> reason;
};

class RunPlan {
public:
    /// --compress SPEC: SPEC on every matrix parameter, none on the others.
    static RunPlan fixed(const std::vector<io::Parameter>& parameters, const compress::Spec& spec, std::int64_t epochs);
    /// A schedule file with its levels as check_schedule parsed them (none in batch mode).
    static RunPlan from_schedule(const io::Schedule& schedule, const std::vector<compress::Spec>& levels,
                                 const std::vector<io::Parameter>& parameters, std::int64_t epochs);
    /// Accordion online: `lr` holds the learning rate of every epoch of the run.
    static RunPlan accordion(const std::vector<io::Parameter>& parameters, const AccordionConfig& config,
                             std::vector<double> lr);

    std::int64_t epochs() const { return epochs_; }
    size_t parameters() const { return is_matrix_.size(); }
    /// Every level the run may use, each once; "none" first. EpochLevels::level indexes it.
    const std::vector<compress::Spec>& levels() const { return levels_; }
    /// levels() as canonical text, as the metrics file records them.
    std::vector<std::string> level_names() const;
    bool batch_mode() const { return batch_mode_; }
    bool online() const { return online_; }

    /// The levels of `epoch`. Online, every epoch before it must have its norms recorded.
    EpochLevels levels_of(std::int64_t epoch) const;
    /// Batch mode: the global batch size and learning-rate scale of `epoch`.
    std::int64_t global_batch(std::int64_t epoch) const;
    double lr_scale(std::int64_t epoch) const;

    /// Online: rank 0's per-parameter norms of `epoch`'s summed gradient, recorded in
    /// epoch order (a resumed run records the stored ones first).
    void record_norms(std::int64_t epoch, const std::vector<double>& norms);
    /// Online: the recorded norms, epoch-major (recorded epochs x parameters).
    const std::vector<double>& norms() const { return norms_; }
    std::int64_t recorded_epochs() const;

private:
    std::int64_t epochs_ = 0;
    std::vector<bool> is_matrix_;
    std::vector<compress::Spec> levels_;
    std::vector<std::int32_t> table_;  // epochs x parameters (fixed and schedule)
    bool batch_mode_ = false;
    std::vector<std::int64_t> batch_;
    std::vector<double> scale_;
    // Online.
    bool online_ = false;
    AccordionConfig accordion_;
    std::int32_t low_ = 0, high_ = 0;  // indices of accordion_.low and .high in levels_
    std::vector<double> lr_;
    std::vector<double> norms_;
};

/// Checks a schedule against the run before training: the parameters (count, names,
/// order, shapes), the epochs it covers (a shorter schedule needs --schedule-extend
/// last), and its mode (compression: valid compressor specs; batch: global batch
/// sizes that split evenly over the ranks, and no --batch-size). Throws UsageError
/// naming `path` and every mismatch found. Returns the schedule's levels, parsed
/// (the only parse of its text; none in batch mode), for RunPlan::from_schedule.
std::vector<compress::Spec> check_schedule(const io::Schedule& schedule, const std::string& path,
                                           const std::vector<io::Parameter>& parameters, std::int64_t epochs,
                                           bool extend_last, int world_size, bool batch_size_given);

/// "none x41, powersgd:2 x21": how many parameters use each level of `levels`, in its order.
std::string levels_summary(const std::vector<compress::Spec>& levels, const std::vector<std::int32_t>& level);

}  // namespace acc::app
