// Ranks of a real Gloo process group over loopback, one thread each: the tests of
// lib/comm's process groups and of the code that runs over them (the exchange,
// comm-profile's sweep).
#pragma once

#include "comm/process_group.hpp"

#include <functional>
#include <string>
#include <vector>

namespace acc::test {

/// Runs body on ranks 0..world-1 of one Gloo process group (rendezvous on a free
/// local port, `timeout` seconds), one thread each, and waits for all. Returns each
/// rank's error message ("" for a rank that succeeded).
std::vector<std::string> gloo_ranks(int world, const std::function<void(comm::ProcessGroupCollectives&)>& body,
                                    double timeout = 20);

}  // namespace acc::test
