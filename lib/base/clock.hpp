// Elapsed time on a steady clock, for timings and timeouts.
#pragma once

#include <chrono>

namespace acc {

using SteadyClock = std::chrono::steady_clock;

/// Seconds from `start` until now.
inline double seconds_since(SteadyClock::time_point start) {
    return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

}  // namespace acc
