#include "train/lr_schedule.hpp"

#include "base/error.hpp"

#include <cmath>
#include <string>

namespace acc::train {

double LrSchedule::at(std::int64_t epoch) const {
    double rate = lr;
    if (warmup_epochs > 0 && epoch < warmup_epochs) {
        const double start = warmup_lr < 0 ? lr / 10 : warmup_lr;
        rate = start + (lr - start) * static_cast<double>(epoch) / static_cast<double>(warmup_epochs);
    }
    for (std::int64_t d : decay_epochs)
        if (epoch >= d) rate /= decay_factor;
    return rate * scale;
}

void LrSchedule::validate() const {
    if (!(lr >= 0) || !std::isfinite(lr)) throw UsageError("--lr: must be a finite number >= 0");
    if (warmup_epochs < 0) throw UsageError("--warmup-epochs: must be >= 0");
    if (!std::isfinite(warmup_lr)) throw UsageError("--warmup-lr: must be a finite number >= 0");
    if (!(decay_factor >= 1) || !std::isfinite(decay_factor))
        throw UsageError("--lr-decay-factor: must be a finite number >= 1 (the rate is divided by it)");
    if (!(scale > 0) || !std::isfinite(scale)) throw UsageError("learning-rate scale: must be a finite number > 0");
    for (std::int64_t d : decay_epochs)
        if (d < 1) throw UsageError("--lr-decay-epochs: epochs must be >= 1, not " + std::to_string(d));
}

}  // namespace acc::train
