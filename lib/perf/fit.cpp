#include "perf/fit.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace acc::perf {
namespace {

struct Line {
    double alpha;
    double beta;  // seconds per byte, 1 / B
};

// Weighted least squares for t = alpha + beta S, on centred data for accuracy
// (sizes reach 1e9 while times go down to 1e-6).
Line weighted_line(const std::vector<double>& s, const std::vector<double>& t, const std::vector<double>& w) {
    double sw = 0, ms = 0, mt = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        sw += w[i];
        ms += w[i] * s[i];
        mt += w[i] * t[i];
    }
    ms /= sw;
    mt /= sw;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        sxx += w[i] * (s[i] - ms) * (s[i] - ms);
        sxy += w[i] * (s[i] - ms) * (t[i] - mt);
    }
    const double beta = sxy / sxx;
    return {mt - beta * ms, beta};
}

}  // namespace

const std::vector<CollectiveInfo>& collective_table() {
    // Bus factors as nccl-tests defines them; ring costs as Thakur et al. (2005) give them.
    static const std::vector<CollectiveInfo> table = {
        {Collective::allreduce, "allreduce", "sum", "sum, in place", false,
         [](double n) { return 2 * (n - 1) / n; }, 2, [](double w) { return 2 * (w - 1) / w; }},
        {Collective::allgather, "allgather", "none", "size = all ranks' parts together", true,
         [](double n) { return (n - 1) / n; }, 1, [](double w) { return w - 1; }},
        {Collective::broadcast, "broadcast", "none", "from rank 0", false, [](double) { return 1.0; }, 1,
         [](double) { return 1.0; }},
        {Collective::reduce_scatter, "reduce_scatter", "sum", "sum; size = the whole input", true,
         [](double n) { return (n - 1) / n; }, 1, [](double w) { return (w - 1) / w; }},
    };
    return table;
}

const CollectiveInfo& collective_info(Collective collective) {
    for (const CollectiveInfo& c : collective_table())
        if (c.kind == collective) return c;
    throw Error("internal error: collective " + std::to_string(static_cast<int>(collective)) + " has no table entry");
}

const char* collective_name(Collective collective) { return collective_info(collective).name; }

Collective parse_collective(const std::string& name) {
    std::vector<std::string> names;
    for (const CollectiveInfo& c : collective_table()) {
        if (name == c.name) return c.kind;
        names.push_back(c.name);
    }
    throw UsageError("'" + name + "' is not a collective; valid ones are " + join(names, ", "));
}

std::vector<Collective> all_collectives() {
    std::vector<Collective> out;
    for (const CollectiveInfo& c : collective_table()) out.push_back(c.kind);
    return out;
}

double bus_factor(Collective collective, int world_size) {
    if (world_size < 1) throw Error("bus factor of a world of " + std::to_string(world_size) + " ranks");
    return collective_info(collective).bus_factor(world_size);
}

double algbw(double bytes, double seconds) { return bytes / seconds; }

double AlphaBetaFit::predict(double bytes) const { return std::isinf(bandwidth) ? alpha : alpha + bytes / bandwidth; }

AlphaBetaFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds) {
    if (bytes.size() != seconds.size())
        throw Error("alpha-beta fit: " + std::to_string(bytes.size()) + " sizes but " + std::to_string(seconds.size()) +
                    " times");
    std::vector<double> w(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
        if (!std::isfinite(bytes[i]) || bytes[i] < 0)
            throw Error("alpha-beta fit: message size " + std::to_string(bytes[i]) + " is not a finite number >= 0");
        if (!std::isfinite(seconds[i]) || seconds[i] <= 0)
            throw Error("alpha-beta fit: time " + std::to_string(seconds[i]) + " s is not a finite number > 0");
        w[i] = 1 / (seconds[i] * seconds[i]);
    }
    auto [lo, hi] = std::minmax_element(bytes.begin(), bytes.end());
    if (bytes.empty() || *lo == *hi) throw Error("alpha-beta fit: needs at least two different message sizes");

    Line line = weighted_line(bytes, seconds, w);
    if (line.beta <= 0) {
        // Time does not grow with size: the best constant is the weighted mean.
        double sw = 0, swt = 0;
        for (size_t i = 0; i < bytes.size(); ++i) {
            sw += w[i];
            swt += w[i] * seconds[i];
        }
        line = {swt / sw, 0};
    } else if (line.alpha < 0) {
        // A line through the origin: minimize sum w (t - beta S)^2.
        double sss = 0, sst = 0;
        for (size_t i = 0; i < bytes.size(); ++i) {
            sss += w[i] * bytes[i] * bytes[i];
            sst += w[i] * bytes[i] * seconds[i];
        }
        line = {0, sst / sss};
    }

    AlphaBetaFit fit;
    fit.points = bytes.size();
    fit.alpha = line.alpha;
    fit.bandwidth = line.beta > 0 ? 1 / line.beta : std::numeric_limits<double>::infinity();
    double sw = 0, mt = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        sw += w[i];
        mt += w[i] * seconds[i];
    }
    mt /= sw;
    double ss_res = 0, ss_tot = 0, rel2 = 0;
    for (size_t i = 0; i < bytes.size(); ++i) {
        const double residual = seconds[i] - (line.alpha + line.beta * bytes[i]);
        ss_res += w[i] * residual * residual;
        ss_tot += w[i] * (seconds[i] - mt) * (seconds[i] - mt);
        const double rel = std::fabs(residual) / seconds[i];
        rel2 += rel * rel;
        fit.max_relative_residual = std::max(fit.max_relative_residual, rel);
    }
    fit.rms_relative_residual = std::sqrt(rel2 / static_cast<double>(bytes.size()));
    fit.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : (ss_res == 0 ? 1 : 0);
    return fit;
}

AlphaBetaFit fit_past_burst(const std::vector<double>& bytes, const std::vector<double>& seconds, double from_bytes,
                            const std::vector<double>& latency_seconds) {
    if (!latency_seconds.empty()) {
        if (latency_seconds.size() != bytes.size())
            throw Error("alpha-beta fit: " + std::to_string(bytes.size()) + " sizes but " +
                        std::to_string(latency_seconds.size()) + " latency times");
        for (double t : latency_seconds)
            if (!std::isfinite(t) || t <= 0)
                throw Error("alpha-beta fit: latency time " + std::to_string(t) + " s is not a finite number > 0");
    }
    if (bytes.size() != seconds.size() || bytes.empty() || from_bytes <= *std::min_element(bytes.begin(), bytes.end()))
        return fit_alpha_beta(bytes, seconds);
    std::vector<double> past_bytes, past_seconds;
    for (size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] >= from_bytes) {
            past_bytes.push_back(bytes[i]);
            past_seconds.push_back(seconds[i]);
        }
    if (past_bytes.size() < 2)
        throw Error("alpha-beta fit: needs at least two message sizes from " + std::to_string(from_bytes) +
                    " bytes on, where the bandwidth is fitted; " + std::to_string(past_bytes.size()) + " there");
    AlphaBetaFit fit = fit_alpha_beta(past_bytes, past_seconds);
    // Past a burst a message's time is alpha + (S - burst) / B: a line whose intercept may
    // be negative, which the constrained fit would bend. Its slope is the sustained rate.
    std::vector<double> w;
    for (double t : past_seconds) w.push_back(1 / (t * t));
    const Line line = weighted_line(past_bytes, past_seconds, w);
    if (line.beta > 0) fit.bandwidth = 1 / line.beta;
    std::vector<double> latencies;
    for (size_t i = 0; i < bytes.size(); ++i)
        if (bytes[i] < from_bytes) latencies.push_back(latency_seconds.empty() ? seconds[i] : latency_seconds[i]);
    std::sort(latencies.begin(), latencies.end());
    const size_t half = latencies.size() / 2;
    fit.alpha = latencies.size() % 2 ? latencies[half] : (latencies[half - 1] + latencies[half]) / 2;
    fit.latency_points = latencies.size();
    double rel2 = 0;
    fit.max_relative_residual = 0;
    for (size_t i = 0; i < past_bytes.size(); ++i) {
        const double rel = std::fabs(past_seconds[i] - fit.predict(past_bytes[i])) / past_seconds[i];
        rel2 += rel * rel;
        fit.max_relative_residual = std::max(fit.max_relative_residual, rel);
    }
    fit.rms_relative_residual = std::sqrt(rel2 / static_cast<double>(past_bytes.size()));
    return fit;
}

double burst_end(const std::vector<double>& bytes, const std::vector<double>& seconds, double factor) {
    if (bytes.size() != seconds.size() || bytes.size() < 2) return 0;
    const size_t largest = static_cast<size_t>(std::max_element(bytes.begin(), bytes.end()) - bytes.begin());
    const double sustained = bytes[largest] / seconds[largest];
    double end = 0;
    for (size_t i = 0; i < bytes.size(); ++i)
        if (i != largest && bytes[i] / seconds[i] > factor * sustained) end = std::max(end, bytes[i]);
    return end;
}

}  // namespace acc::perf
