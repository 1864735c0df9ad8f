// --nproc N: start N ranks of this program on this machine, for users without
// torchrun. No LibTorch here: the launcher starts before anything heavy.
#pragma once

#include "comm/rendezvous.hpp"

#include <functional>
#include <string>
#include <utility>

namespace acc::comm {

/// With config.nproc > 0, re-executes this program with the same arguments N
/// times as ranks 0..N-1 (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
/// MASTER_PORT set, a free port on 127.0.0.1 unless --master-port is given;
/// the ranks know from ACC_NPROC_LAUNCHER, this process's pid, that they are
/// not to launch again), forwards their output and returns the worst
/// exit code (a rank killed by signal S counts as 128 + S) of the ranks that
/// ended by themselves, not of those it ended after a failure. Lines a rank
/// writes to standard error, and lines ranks other than 0 write to standard
/// output, are prefixed with "[r] " unless `tool`'s own rank tag "<tool>[r]:"
/// already starts them. When a rank fails, the others get `grace_seconds` to
/// finish and report, then SIGTERM, then SIGKILL. SIGINT and SIGTERM are
/// passed on to the ranks.
///
/// Without --nproc, or in a rank started this way, calls `run` and returns its result.
int run_ranks(const RendezvousConfig& config, int argc, char** argv, const std::string& tool,
              const std::function<int()>& run, double grace_seconds = 10);

/// A TCP port on 127.0.0.1 kept for whoever is told it, as long as this object
/// lives: a socket bound to it with SO_REUSEADDR and not listening. A connection
/// to the port is refused, as to a free one, and the store rank 0 opens there
/// binds it (stores set SO_REUSEADDR too); but the kernel gives the port to no
/// other socket meanwhile, as an ephemeral port for a bind to port 0 or an
/// outgoing connection. A port merely found free and released could be taken
/// by another process's Gloo pair before rank 0 opens its store; a rank
/// retrying to reach its store would then connect into that pair, which accepts
/// one connection and refuses its own peer.
class PortReservation {
public:
    PortReservation();  ///< throws acc::Error when no port can be had
    ~PortReservation();
    PortReservation(const PortReservation&) = delete;
    PortReservation& operator=(const PortReservation&) = delete;
    int port() const { return port_; }

private:
    int fd_ = -1;
    int port_ = -1;
};

/// A complete line from a rank's standard error, split into the live progress lines
/// ("\r\033[K..." without a newline) it drew just before, which arrive in the same
/// read when the line follows at once, and the line itself (from its last "\r\033[K").
/// The launcher passes the first on as they are and tags the second: tagged together,
/// the line would lose its "[r] " to the clear in front of it. {"", line} where no live
/// line precedes it.
std::pair<std::string, std::string> split_live_lines(const std::string& line);

}  // namespace acc::comm
