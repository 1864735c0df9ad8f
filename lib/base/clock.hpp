// Elapsed time on a steady clock, for timings and timeouts.
#pragma once

#include <chrono>
#include <thread>

namespace acc {

using SteadyClock = std::chrono::steady_clock;

/// Seconds from `start` until now.
inline double seconds_since(SteadyClock::time_point start) {
    return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

/// Asks `done` until it says true or `timeout` seconds have passed (0 or less: no bound),
/// yielding for the first millisecond and then sleeping 100 microseconds between asks,
/// so that a long wait does not keep a core busy. Returns whether `done` said true.
template <class Done>
bool wait_until(Done&& done, double timeout) {
    const SteadyClock::time_point start = SteadyClock::now();
    while (!done()) {
        const double waited = seconds_since(start);
        if (timeout > 0 && waited >= timeout) return false;
        if (waited < 1e-3)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
}

}  // namespace acc
