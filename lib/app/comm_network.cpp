#include "app/comm_network.hpp"

#include "base/error.hpp"

namespace acc::app {

const char* comm_model_name(CommModel model) { return model == CommModel::measured ? "measured" : "fit"; }

perf::Network profiled_network(const std::string& path, const io::CommProfile& profile,
                               const io::CollectiveProfile& collective, perf::Collective kind, CommModel model) {
    const int world = static_cast<int>(profile.world_size);
    perf::Network net = perf::network_from_fit(kind, world, collective.alpha, collective.bandwidth);
    if (model != CommModel::measured) return net;
    // From fit_from on: below it the fit's latency is steadier than any one size's time.
    const std::vector<double> sizes(collective.size.begin(), collective.size.end());
    net.measured =
        perf::measured_times(kind, world, sizes, collective.time_median, static_cast<double>(collective.fit_from));
    if (net.measured.sizes.size() < 2)
        throw FileError(path, std::string("--comm-model measured: its ") + perf::collective_name(kind) + " profile has " +
                                  std::to_string(net.measured.sizes.size()) +
                                  " sizes from its fit_from on, and interpolating needs two");
    return net;
}

void check_profiled_ranks(const std::string& path, const io::CommProfile& profile) {
    if (profile.world_size < 2)
        throw FileError(path, "was measured on " + std::to_string(profile.world_size) +
                                  " rank, which says nothing about the network; profile at least 2 ranks");
}

perf::Compute profiled_compute(const io::ComputeProfile& profile, perf::Compute compute) {
    compute.seconds = profile.forward_seconds + profile.backward_seconds;
    compute.backward_share = profile.backward_seconds / compute.seconds;
    return compute;
}

ProfiledNetworks read_profiled_networks(const std::string& path, CommModel model) {
    const io::CommProfile profile = io::read_comm_profile(path);
    const io::CollectiveProfile* allreduce = profile.find("allreduce");
    if (!allreduce)
        throw FileError(path, "has no allreduce profile; run comm-profile with --collectives allreduce,allgather");
    check_profiled_ranks(path, profile);
    ProfiledNetworks out;
    out.backend = profile.backend;
    out.world = static_cast<int>(profile.world_size);
    out.allreduce = profiled_network(path, profile, *allreduce, perf::Collective::allreduce, model);
    out.allgather = out.allreduce;
    if (const io::CollectiveProfile* allgather = profile.find("allgather")) {
        out.allgather = profiled_network(path, profile, *allgather, perf::Collective::allgather, model);
        out.has_allgather = true;
    }
    out.compute = profile.compute;
    return out;
}

}  // namespace acc::app
