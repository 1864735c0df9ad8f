#include "app/rank_options.hpp"

#include "cli/tool.hpp"

#include <CLI/CLI.hpp>

namespace acc::app {

void add_rendezvous_options(CLI::App& app, comm::RendezvousConfig& config) {
    const std::string group = "Distributed (defaults from torchrun's environment)";
    // Unset options (shown without a default) fall back to the environment.
    app.add_option("--rank", config.rank, "This process's rank, 0 .. world size - 1 [RANK, else 0]")
        ->check(cli::whole_number(0, comm::kMaxRanks - 1))
        ->default_str("")
        ->group(group);
    app.add_option("--world-size", config.world_size, "Number of ranks [WORLD_SIZE, else 1]")
        ->check(cli::whole_number(1, comm::kMaxRanks))
        ->default_str("")
        ->group(group);
    app.add_option("--master-addr", config.master_addr,
                   "Host of rank 0's rendezvous store [MASTER_ADDR, else 127.0.0.1]")
        ->group(group);
    app.add_option("--master-port", config.master_port, "Port of the rendezvous store [MASTER_PORT, else 29500]")
        ->check(cli::whole_number(1, 65535))
        ->default_str("")
        ->group(group);
    app.add_option("--timeout", config.timeout,
                   "Seconds to wait for the other ranks at the rendezvous and in each collective before giving up")
        ->check(cli::number(0.1, 86400))
        ->group(group);
    app.add_option("--nproc", config.nproc,
                   "Start N ranks on this machine, prefix their messages with the rank, and exit with the worst "
                   "exit code")
        ->check(cli::whole_number(1, 1024))
        ->default_str("")
        ->group(group);
}

void add_backend_option(CLI::App& app, std::optional<comm::Backend>& backend, const std::string& group) {
    cli::add_typed_option(app, "--backend", backend, comm::parse_backend,
                          "Collectives: " + choice_list(comm::backend_names()) +
                              "; gloo for --device cpu, nccl for cuda (in CUDA builds) [by --device]")
        ->type_name("BACKEND")
        ->group(group);
}

}  // namespace acc::app
