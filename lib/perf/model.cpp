#include "perf/model.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <string>

namespace acc::perf {

double collective_seconds(const Network& net, Collective kind, int world, double bytes) {
    if (world <= 1) return 0;
    const CollectiveInfo& c = collective_info(kind);
    const double w = world;
    return c.ring_steps * (w - 1) * net.alpha + c.ring_bytes(w) * bytes / net.bandwidth;
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
