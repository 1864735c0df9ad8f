// The check that every rank of a run was started with the same settings, which
// comm-profile, grad-dump and train-dist share: ranks that disagree would measure
// or train different things, or hang in a collective only some of them call.
#pragma once

#include "comm/collectives.hpp"

#include <string>

namespace acc::app {

/// Compares a fingerprint of `settings` (text that lists the settings the ranks must
/// share) over `comm`, whose collectives take tensors on `device`. Throws UsageError on
/// every rank when some rank's differs from rank 0's: "rank R was started with other
/// `what` than rank 0", followed by `advice` (which says what must agree).
void check_same_settings(comm::Collectives& comm, const std::string& settings, const std::string& what,
                         const std::string& advice, const at::Device& device = at::kCPU);

}  // namespace acc::app
