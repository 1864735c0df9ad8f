#include "comm/rendezvous.hpp"

#include "base/error.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace acc::comm {
namespace {

// A whole number from the environment, or `fallback` when the variable is unset.
int env_int(const Environment& env, const char* name, int fallback, int min, int max) {
    const char* text = env(name);
    if (!text || !*text) return fallback;
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || value < min || value > max)
        throw UsageError(std::string(name) + "='" + text + "' in the environment is not a whole number in [" +
                         std::to_string(min) + ", " + std::to_string(max) + "]");
    return static_cast<int>(value);
}

}  // namespace

Rendezvous resolve_rendezvous(const RendezvousConfig& config, const Environment& given_env) {
    const Environment env = given_env ? given_env : [](const char* name) -> const char* { return std::getenv(name); };
    Rendezvous r;
    r.world_size = config.world_size >= 1 ? config.world_size : env_int(env, "WORLD_SIZE", 1, 1, kMaxRanks);
    r.rank = config.rank >= 0 ? config.rank : env_int(env, "RANK", 0, 0, kMaxRanks);
    if (r.rank >= r.world_size) {
        std::string rank_from = config.rank >= 0 ? "--rank" : "RANK";
        std::string world_from = config.world_size >= 1 ? "--world-size"
                                 : env("WORLD_SIZE")    ? "WORLD_SIZE"
                                                        : "the default world size";
        throw UsageError(rank_from + " " + std::to_string(r.rank) + " is outside the world: " + world_from + " is " +
                         std::to_string(r.world_size) + ", so ranks are 0.." + std::to_string(r.world_size - 1));
    }
    // LOCAL_RANK only means something when the rank itself came from the same launcher.
    r.local_rank = config.rank >= 0 ? r.rank : env_int(env, "LOCAL_RANK", r.rank, 0, kMaxRanks);
    r.local_rank_given = config.rank < 0 && env("LOCAL_RANK") != nullptr;
    std::string addr_from;
    if (!config.master_addr.empty()) {
        r.master_addr = config.master_addr;
        addr_from = "--master-addr " + r.master_addr;
    } else if (const char* addr = env("MASTER_ADDR"); addr && *addr) {
        r.master_addr = addr;
        addr_from = "MASTER_ADDR=" + r.master_addr;
    }
    // A wildcard would make rank 0's store listen on every interface, where anyone
    // who can reach the machine can connect, and is no address a rank can connect to.
    for (const char* wildcard : {"0.0.0.0", "::", "[::]", "0"})
        if (r.master_addr == wildcard)
            throw UsageError(addr_from + ": is the address the other ranks connect to, and the one rank 0's store "
                             "listens on alone; give rank 0's own address (127.0.0.1 on one machine), not a "
                             "wildcard, which would listen on every interface");
    r.master_port = config.master_port >= 1 ? config.master_port : env_int(env, "MASTER_PORT", 29500, 1, 65535);
    r.timeout = config.timeout;
    if (!(r.timeout > 0)) throw UsageError("--timeout must be > 0 seconds");
    // torchrun's agent hosts the store at MASTER_ADDR:MASTER_PORT. Flags that
    // move the store elsewhere mean the user runs their own rendezvous.
    const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
    const bool store_moved = !config.master_addr.empty() || config.master_port >= 1;
    r.agent_store = agent && std::string(agent) == "True" && !store_moved;
    r.restart_count = env_int(env, "TORCHELASTIC_RESTART_COUNT", 0, 0, std::numeric_limits<int>::max());
    if (const char* token = env(kRunTokenVariable)) r.run_token = token;
    return r;
}

std::string agent_store_prefix(int restart_count) { return "/worker/attempt_" + std::to_string(restart_count); }

}  // namespace acc::comm
