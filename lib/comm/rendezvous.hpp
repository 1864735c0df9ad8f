// Where a rank finds its peers: torchrun's environment (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT), overridden by the shared rendezvous options.
// No LibTorch and no command line here: lib/app/rank_options.hpp adds the options
// that fill a RendezvousConfig.
#pragma once

#include <functional>
#include <string>

namespace acc::comm {

/// The most ranks a rendezvous accepts, from options or the environment.
inline constexpr int kMaxRanks = 1 << 20;

/// The rendezvous options as given on the command line; unset fields come from the environment.
struct RendezvousConfig {
    int rank = -1;            ///< --rank; -1: RANK, else 0
    int world_size = -1;      ///< --world-size; -1: WORLD_SIZE, else 1
    std::string master_addr;  ///< --master-addr; empty: MASTER_ADDR, else 127.0.0.1
    int master_port = -1;     ///< --master-port; -1: MASTER_PORT, else 29500
    double timeout = 60;      ///< --timeout, seconds: for the rendezvous and for each collective
    int nproc = 0;            ///< --nproc: start this many local ranks (0: this process is one rank)
};

/// A resolved rendezvous: who this rank is and where the store lives.
struct Rendezvous {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0;  ///< LOCAL_RANK (the GPU to use); defaults to rank
    /// local_rank came from a launcher's LOCAL_RANK; without it, a rank's GPU is its
    /// rank modulo the machine's GPUs (rank_gpu_index).
    bool local_rank_given = false;
    std::string master_addr = "127.0.0.1";
    int master_port = 29500;
    bool agent_store = false;  ///< torchrun's agent hosts the store; every rank connects as a client
    int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT: the agent store's key prefix
    double timeout = 60;       ///< seconds
    /// ACC_RUN_TOKEN: what every rank of this run presents at the store; ranks
    /// keep their keys under a name derived from it and refuse a store that
    /// another token opened. Empty: the toolkit's default, which anyone can present.
    std::string run_token;
};

/// The environment variable that gives the run token (--nproc sets a random one).
inline constexpr const char* kRunTokenVariable = "ACC_RUN_TOKEN";

/// Reads one environment variable; nullptr when unset. Tests pass their own.
using Environment = std::function<const char*(const char*)>;

/// Resolves `config` over the environment. Throws acc::UsageError naming the
/// option or variable at fault (not a number, rank outside the world, ...).
Rendezvous resolve_rendezvous(const RendezvousConfig& config, const Environment& env = nullptr);

/// The key prefix torchrun's agent store expects: "/worker/attempt_<restart_count>".
std::string agent_store_prefix(int restart_count);

}  // namespace acc::comm
