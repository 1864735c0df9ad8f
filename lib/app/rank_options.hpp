// The rendezvous options every distributed program shares: where the command
// line meets comm::RendezvousConfig.
#pragma once

#include "comm/backend.hpp"
#include "comm/rendezvous.hpp"

#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace acc::app {

/// Adds --rank, --world-size, --master-addr, --master-port, --timeout and
/// --nproc (group "Distributed") so that every program spells them alike.
void add_rendezvous_options(CLI::App& app, comm::RendezvousConfig& config);

/// Adds --backend gloo|nccl to `group`; unset, comm::run_backend picks by --device.
void add_backend_option(CLI::App& app, std::optional<comm::Backend>& backend, const std::string& group);

}  // namespace acc::app
