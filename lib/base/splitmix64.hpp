// SplitMix64 (Steele, Lea and Flood 2014): the one small generator and 64-bit mix the
// toolkit draws its reproducible random streams from. Kept in one place because a
// second copy that drifts by one constant would silently change every seeded result.
#pragma once

#include <cstdint>

namespace acc {

/// The generator's increment (2^64 divided by the golden ratio, odd).
inline constexpr std::uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ull;

/// SplitMix64's output function: a bijective mix of all 64 bits.
constexpr std::uint64_t splitmix64_finalize(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// One generator step from state x: the value SplitMix64(x).next() returns.
constexpr std::uint64_t splitmix64_mix(std::uint64_t x) { return splitmix64_finalize(x + kSplitMix64Gamma); }

/// The sequential generator: each next() adds the increment and mixes.
class SplitMix64 {
public:
    explicit constexpr SplitMix64(std::uint64_t seed) : state_(seed) {}
    constexpr std::uint64_t next() {
        state_ += kSplitMix64Gamma;
        return splitmix64_finalize(state_);
    }
    constexpr std::uint64_t state() const { return state_; }

private:
    std::uint64_t state_;
};

}  // namespace acc
