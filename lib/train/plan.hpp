// What happens when in a training run, without LibTorch: the learning rate of
// each epoch and the order in which each rank visits the training samples.
#pragma once

#include "base/splitmix64.hpp"

#include <cstdint>
#include <string>
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

/// Which part of the data one rank trains on.
struct Shard {
    int rank = 0;
    int world_size = 1;
};

/// Mixes values into a 64-bit seed (splitmix64), so that each epoch, rank and
/// batch gets its own reproducible random stream from one --seed.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0);

/// A small, portable random generator (splitmix64): the same numbers with every
/// compiler and standard library, unlike std:: distributions.
class Random {
public:
    explicit Random(std::uint64_t seed) : generator_(seed) {}
    std::uint64_t next();
    /// Uniform in [0, bound), bound >= 1, without modulo bias.
    std::uint64_t below(std::uint64_t bound);
    /// Uniform in [0, 1).
    double uniform();
    /// Standard normal (Box-Muller).
    double normal();

private:
    SplitMix64 generator_;
};

/// The sample indices `shard.rank` trains on in `epoch`: every world_size-th entry,
/// starting at rank, of a permutation of [0, samples) drawn from (seed, epoch) and
/// so the same on every rank. The permutation is cut to a multiple of world_size,
/// so every rank gets samples / world_size indices and takes the same number of steps.
std::vector<std::int64_t> shard_order(std::int64_t samples, std::int64_t epoch, std::uint64_t seed, Shard shard);

/// Batch sizes of an epoch over `samples` samples: full batches, then the rest.
/// A last batch of a single sample is dropped (batch normalization cannot train on one).
std::vector<std::int64_t> batch_sizes(std::int64_t samples, std::int64_t batch_size);

}  // namespace acc::train
