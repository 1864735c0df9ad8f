#include "perf/model.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

namespace acc::perf {

namespace {

// The measured time of a collective of size S, linear between the two measured sizes
// around it; none outside the measured sizes or for another collective or world size.
std::optional<double> interpolated_seconds(const MeasuredTimes& m, Collective kind, int world, double size) {
    if (m.kind != kind || m.world != world || m.sizes.size() < 2) return std::nullopt;
    if (!(size >= m.sizes.front()) || !(size <= m.sizes.back())) return std::nullopt;
    const size_t hi = std::max<size_t>(1, static_cast<size_t>(
                                              std::lower_bound(m.sizes.begin(), m.sizes.end(), size) - m.sizes.begin()));
    const size_t lo = hi - 1;
    const double share = (size - m.sizes[lo]) / (m.sizes[hi] - m.sizes[lo]);
    return m.seconds[lo] + share * (m.seconds[hi] - m.seconds[lo]);
}

}  // namespace

double collective_seconds(const Network& net, Collective kind, int world, double bytes) {
    if (world <= 1) return 0;
    const CollectiveInfo& c = collective_info(kind);
    const double w = world;
    // nccl-tests' size S counts every rank's part where the collective gathers or scatters them.
    if (const auto measured = interpolated_seconds(net.measured, kind, world, c.size_counts_ranks ? bytes * w : bytes))
        return *measured;
    return c.ring_steps * (w - 1) * net.alpha + c.ring_bytes(w) * bytes / net.bandwidth;
}

MeasuredTimes measured_times(Collective kind, int world, const std::vector<double>& sizes,
                             const std::vector<double>& seconds, double from_bytes) {
    if (sizes.size() != seconds.size())
        throw Error("measured times: " + std::to_string(sizes.size()) + " sizes but " +
                    std::to_string(seconds.size()) + " times");
    MeasuredTimes m;
    m.kind = kind;
    m.world = world;
    for (size_t i = 0; i < sizes.size(); ++i) {
        if (i > 0 && !(sizes[i] > sizes[i - 1])) throw Error("measured times: the sizes are not increasing");
        if (!std::isfinite(seconds[i]) || !(seconds[i] > 0))
            throw Error("measured times: a time is not a finite number > 0");
        if (sizes[i] < from_bytes) continue;
        m.sizes.push_back(sizes[i]);
        m.seconds.push_back(seconds[i]);
    }
    return m;
}

double allreduce_seconds(const Network& net, int world, double bytes) {
    return collective_seconds(net, Collective::allreduce, world, bytes);
}

double allgather_seconds(const Network& net, int world, double bytes) {
    return collective_seconds(net, Collective::allgather, world, bytes);
}

Network network_from_fit(Collective kind, int world, double alpha, double bandwidth) {
    if (world < 2)
        throw Error(std::string("a ") + collective_name(kind) + " profiled on " + std::to_string(world) +
                    " worker says nothing about the network; profile at least 2");
    const double steps = collective_info(kind).ring_steps * (world - 1.0);
    return {alpha / steps, bandwidth * bus_factor(kind, world)};
}

Prediction predict_ddp(const Network& net, int world, const std::vector<double>& tensor_bytes, const Compute& compute) {
    double total = 0;
    for (double b : tensor_bytes) total += b;
    const double backward = compute.seconds * compute.backward_share;
    const double forward = compute.seconds - backward;
    Prediction p;
    double finished = 0, bucket = 0, done_bytes = 0;
    double cap = compute.first_bucket_bytes;
    auto flush = [&] {
        const double ready = forward + (total > 0 ? backward * done_bytes / total : backward);
        const double cost = allreduce_seconds(net, world, bucket);
        finished = std::max(finished, ready) + cost;
        p.communication_seconds += cost;
        bucket = 0;
        cap = compute.bucket_bytes;
    };
    // Gradients arrive in reverse model order.
    for (auto it = tensor_bytes.rbegin(); it != tensor_bytes.rend(); ++it) {
        bucket += *it;
        done_bytes += *it;
        if (bucket >= cap) flush();
    }
    if (bucket > 0) flush();
    p.iteration_seconds = std::max(compute.seconds, finished);
    p.exposed_seconds = p.iteration_seconds - compute.seconds;
    return p;
}

Prediction predict_compressed(const Network& net, const Network& allgather_net, int world,
                              const std::vector<Transfer>& transfers, double encode_seconds, double decode_seconds,
                              const Compute& compute) {
    Prediction p;
    for (const auto& t : transfers)
        p.communication_seconds +=
            collective_seconds(t.kind == Collective::allgather ? allgather_net : net, t.kind, world, t.bytes);
    p.exposed_seconds = encode_seconds + p.communication_seconds + decode_seconds;
    p.iteration_seconds = compute.seconds + p.exposed_seconds;
    return p;
}

}  // namespace acc::perf
