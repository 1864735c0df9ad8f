// The learning rate of each epoch of a training run (no LibTorch).
#pragma once

#include <cstdint>
#include <vector>

namespace acc::train {

/// Learning rate per epoch: linear warm-up, then step decays (the paper's Table 7
/// is `lr 0.1 x workers, warm-up 5 epochs from 0.1, /10 at epochs 150 and 250`).
struct LrSchedule {
    double lr = 0.1;                         ///< rate after warm-up, before decays
    std::int64_t warmup_epochs = 0;          ///< epochs 0..warmup_epochs ramp linearly; 0: no warm-up
    double warmup_lr = -1;                   ///< rate of epoch 0 when warming up; < 0: lr / 10
    std::vector<std::int64_t> decay_epochs;  ///< from each of these epochs on, the rate is divided by decay_factor
    double decay_factor = 10;
    double scale = 1;  ///< multiplies every rate (batch-size changes scale it alike)

    /// Learning rate of `epoch` (counted from 0), scale included.
    double at(std::int64_t epoch) const;
    /// Throws UsageError naming the option (--lr, --warmup-epochs, ...) that is out of range.
    void validate() const;
};

}  // namespace acc::train
