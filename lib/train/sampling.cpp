#include "train/sampling.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace acc::train {

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t c) {
    // Each value goes through a splitmix64 round so that nearby inputs give unrelated seeds.
    std::uint64_t h = seed;
    for (std::uint64_t v : {a, b, c}) {
        h ^= v + kSplitMix64Gamma + (h << 6) + (h >> 2);
        Random r(h);
        h = r.next();
    }
    return h;
}

std::uint64_t Random::next() { return generator_.next(); }

std::uint64_t Random::below(std::uint64_t bound) {
    // Rejection sampling: draws above the largest multiple of bound are redrawn.
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    std::uint64_t x;
    do x = next();
    while (x >= limit);
    return x % bound;
}

double Random::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

double Random::normal() {
    double u = uniform();
    while (u <= 0) u = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * uniform());
}

std::vector<std::int64_t> shard_order(std::int64_t samples, std::int64_t epoch, std::uint64_t seed, Shard shard) {
    if (shard.world_size < 1 || shard.rank < 0 || shard.rank >= shard.world_size)
        throw Error("invalid shard: rank " + std::to_string(shard.rank) + " of " + std::to_string(shard.world_size));
    std::vector<std::int64_t> order(static_cast<size_t>(samples));
    std::iota(order.begin(), order.end(), 0);
    Random random(mix_seed(seed, 0x0de5, static_cast<std::uint64_t>(epoch)));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random.below(i)]);
    const std::int64_t per_rank = samples / shard.world_size;
    std::vector<std::int64_t> mine(static_cast<size_t>(per_rank));
    for (std::int64_t i = 0; i < per_rank; ++i) mine[i] = order[i * shard.world_size + shard.rank];
    return mine;
}

std::vector<std::int64_t> batch_sizes(std::int64_t samples, std::int64_t batch_size) {
    std::vector<std::int64_t> sizes(static_cast<size_t>(samples / batch_size), batch_size);
    if (samples % batch_size > 1) sizes.push_back(samples % batch_size);
    return sizes;
}

}  // namespace acc::train
