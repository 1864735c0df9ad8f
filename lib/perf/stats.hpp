// Statistics of repeated timings: min, median, max and mean.
#pragma once

#include <cstddef>
#include <vector>

namespace acc::perf {

/// Summary of a set of timings, in the unit of the input (the toolkit uses seconds).
struct TimingStats {
    std::size_t count = 0;
    double min = 0;
    double median = 0;  ///< the middle value; for an even count the mean of the two middle values
    double max = 0;
    double mean = 0;
};

/// Summarizes `samples`. Throws acc::Error if there are none or one is NaN or infinite.
TimingStats summarize(std::vector<double> samples);

/// The median of `samples` (see TimingStats::median). Throws acc::Error if empty.
double median(std::vector<double> samples);

}  // namespace acc::perf
