// The rendezvous store of the rank that hosts it, listening on one address
// only: 127.0.0.1 for runs on one machine, the master address otherwise.
// c10d's TCPStore on its own listens on every interface, where anyone on any
// network of the machine could reach it.
#pragma once

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <string>

namespace acc::comm {

/// Starts the store server on `port` of the address `host` (--master-addr)
/// resolves to. Throws acc::Error naming --master-addr when that is not an
/// address of this machine, and --master-port when the port is taken.
c10::intrusive_ptr<c10d::TCPStore> start_store_server(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout);

}  // namespace acc::comm
