#include "perf/fit.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace acc::perf {
namespace {

constexpr Collective kCollectives[] = {Collective::allreduce, Collective::allgather, Collective::broadcast,
                                       Collective::reduce_scatter};

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

const char* collective_name(Collective collective) {
    switch (collective) {
    case Collective::allreduce: return "allreduce";
    case Collective::allgather: return "allgather";
    case Collective::broadcast: return "broadcast";
    case Collective::reduce_scatter: return "reduce_scatter";
    }
    return "?";
}

Collective parse_collective(const std::string& name) {
    std::vector<std::string> names;
    for (Collective c : kCollectives) {
        if (name == collective_name(c)) return c;
        names.push_back(collective_name(c));
    }
    throw UsageError("'" + name + "' is not a collective; valid ones are " + join(names, ", "));
}

std::vector<Collective> all_collectives() { return {std::begin(kCollectives), std::end(kCollectives)}; }

double bus_factor(Collective collective, int world_size) {
    if (world_size < 1) throw Error("bus factor of a world of " + std::to_string(world_size) + " ranks");
    const double n = world_size;
    switch (collective) {
    case Collective::allreduce: return 2 * (n - 1) / n;
    case Collective::allgather:
    case Collective::reduce_scatter: return (n - 1) / n;
    case Collective::broadcast: return 1;
    }
    return 1;
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

}  // namespace acc::perf
