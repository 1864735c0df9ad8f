// The rendezvous options every distributed program shares: where the command
// line meets comm::RendezvousConfig.
#pragma once

#include "comm/rendezvous.hpp"

namespace CLI {
class App;
}

namespace acc::app {

/// Adds --rank, --world-size, --master-addr, --master-port, --timeout and
/// --nproc (group "Distributed") so that every program spells them alike.
void add_rendezvous_options(CLI::App& app, comm::RendezvousConfig& config);

}  // namespace acc::app
