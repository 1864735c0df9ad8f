#include "perf/stats.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace acc::perf {

double median(std::vector<double> samples) {
    if (samples.empty()) throw Error("median of no samples");
    const std::size_t mid = samples.size() / 2;
    std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid), samples.end());
    const double upper = samples[mid];
    if (samples.size() % 2 == 1) return upper;
    const double lower = *std::max_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(mid));
    return (lower + upper) / 2;
}

TimingStats summarize(std::vector<double> samples) {
    if (samples.empty()) throw Error("timing statistics of no samples");
    for (double s : samples)
        if (!std::isfinite(s)) throw Error("a timing sample is NaN or infinite");
    TimingStats stats;
    stats.count = samples.size();
    auto [lo, hi] = std::minmax_element(samples.begin(), samples.end());
    stats.min = *lo;
    stats.max = *hi;
    // Rounding can put the mean of equal samples an ulp outside them; readers check min <= mean <= max.
    stats.mean = std::clamp(std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size()),
                            stats.min, stats.max);
    stats.median = median(std::move(samples));
    return stats;
}

}  // namespace acc::perf
