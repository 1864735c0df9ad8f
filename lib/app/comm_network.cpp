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

}  // namespace acc::app
