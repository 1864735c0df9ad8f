// Which samples each rank visits in which order, and the toolkit's portable
// random streams (no LibTorch): the same numbers with every compiler.
#pragma once

#include "base/splitmix64.hpp"

#include <cstdint>
#include <vector>

namespace acc::train {

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
