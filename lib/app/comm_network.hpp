// The network a comm-profile file describes, as the performance model takes it:
// compress-bench's and the planner's --comm, and how it prices a collective
// (compress-bench --comm-model). No LibTorch here.
#pragma once

#include "io/comm_profile.hpp"
#include "perf/model.hpp"

#include <optional>
#include <string>

namespace acc::app {

/// fit: alpha + S / B at every size; measured: at the profiled world size, a size between
/// two the profile measured from its fit_from on costs their times interpolated.
enum class CommModel { fit, measured };
const char* comm_model_name(CommModel model);

/// The ring network behind `kind`'s fit in `profile` (read from `path`), on its world
/// size; with CommModel::measured also that collective's median times from its fit_from
/// on (acc::FileError naming `path` when fewer than two sizes are there).
perf::Network profiled_network(const std::string& path, const io::CommProfile& profile,
                               const io::CollectiveProfile& collective, perf::Collective kind, CommModel model);

/// acc::FileError naming `path` where `profile` was measured on fewer than two ranks,
/// which say nothing about the network.
void check_profiled_ranks(const std::string& path, const io::CommProfile& profile);

/// What compress-bench's --comm takes from a comm-profile file: the networks of its
/// allreduce and allgather, and the compute that comm-profile --model timed.
struct ProfiledNetworks {
    std::string backend;  ///< the profile's: "gloo" or "nccl"
    int world = 0;        ///< the ranks it was measured on, at least 2
    perf::Network allreduce;
    perf::Network allgather;     ///< the allreduce's where the file has no allgather profile
    bool has_allgather = false;  ///< whether the file has an allgather profile
    std::optional<io::ComputeProfile> compute;  ///< absent unless comm-profile ran with --model
};

/// `compute` with the iteration comm-profile --model timed: its forward and backward
/// passes, and the backward pass's share of them.
perf::Compute profiled_compute(const io::ComputeProfile& profile, perf::Compute compute = {});

/// Reads the comm-profile file `path` into both networks (profiled_network, under
/// `model`); acc::FileError naming `path` where it has no allreduce profile or was
/// measured on fewer than two ranks.
ProfiledNetworks read_profiled_networks(const std::string& path, CommModel model);

}  // namespace acc::app
