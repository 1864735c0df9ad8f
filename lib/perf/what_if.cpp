#include "perf/what_if.hpp"

#include "base/error.hpp"

#include <cmath>

namespace acc::perf {

Link Link::at_bandwidth(double bandwidth) const {
    Link out;
    out.allreduce = Network{allreduce.alpha, bandwidth};
    out.allgather = Network{allgather.alpha, allgather.bandwidth * (bandwidth / allreduce.bandwidth)};
    return out;
}

double step_seconds(const PlanStep& step, const Link& link, int world, const Compute& compute) {
    if (step.uncompressed) return predict_ddp(link.allreduce, world, step.tensor_bytes, compute).iteration_seconds;
    return predict_compressed(link.allreduce, link.allgather, world, step.transfers, step.encode_seconds,
                              step.decode_seconds, compute)
        .iteration_seconds;
}

double plan_seconds(const std::vector<PlanPart>& plan, const Link& link, int world, const Compute& compute) {
    double total = 0;
    for (const auto& part : plan)
        if (part.steps > 0) total += part.steps * step_seconds(part.step, link, world, compute);
    return total;
}

std::vector<PlanPart> uncompressed_plan(const std::vector<PlanPart>& plan, const std::vector<double>& tensor_bytes) {
    std::vector<PlanPart> out;
    for (const auto& part : plan) {
        PlanPart p;
        p.steps = part.steps;
        p.step.uncompressed = true;
        p.step.tensor_bytes = tensor_bytes;
        out.push_back(std::move(p));
    }
    return out;
}

BreakEven break_even(const std::vector<PlanPart>& plan, const std::vector<PlanPart>& baseline, const Link& link,
                     int world, const Compute& compute, double low, double high) {
    if (!(low > 0) || !(high > low) || !std::isfinite(high))
        throw UsageError("break-even search: the bandwidths must satisfy 0 < low < high, both finite");
    // Negative where the plan is strictly faster.
    auto difference = [&](double log_bandwidth) {
        const Link at = link.at_bandwidth(std::exp(log_bandwidth));
        return plan_seconds(plan, at, world, compute) - plan_seconds(baseline, at, world, compute);
    };
    const double a = std::log(low), b = std::log(high);
    const int points = std::max(2, static_cast<int>(std::ceil(40 * std::log10(high / low)))) + 1;
    BreakEven out;
    double previous_x = a;
    bool previous_pays = difference(a) < 0;
    out.pays_at_low_bandwidth = previous_pays;
    for (int i = 1; i < points; ++i) {
        const double x = a + (b - a) * i / (points - 1);
        const bool pays = difference(x) < 0;
        if (pays != previous_pays) {
            // The crossing lies in (previous_x, x]: keep `lo` on the side of previous_pays.
            double lo = previous_x, hi = x;
            for (int step = 0; step < 200 && hi - lo > 1e-12; ++step) {
                const double mid = 0.5 * (lo + hi);
                if ((difference(mid) < 0) == previous_pays) lo = mid;
                else hi = mid;
            }
            out.bandwidths.push_back(std::exp(0.5 * (lo + hi)));
        }
        previous_x = x;
        previous_pays = pays;
    }
    return out;
}

}  // namespace acc::perf
