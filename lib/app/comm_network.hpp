// The network a comm-profile file describes, as the performance model takes it:
// compress-bench's and the planner's --comm, and how it prices a collective
// (compress-bench --comm-model). No LibTorch here.
#pragma once

#include "io/comm_profile.hpp"
#include "perf/model.hpp"

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

}  // namespace acc::app
