// comm-profile's work: join the process group, time each collective over a
// sweep of message sizes the way nccl-tests does, fit the alpha-beta model,
// and report (table, CSV, JSON, accordion.comm-profile file).
#pragma once

#include "comm-profile/report.hpp"
#include "base/device.hpp"
#include "comm/process_group.hpp"
#include "comm/rendezvous.hpp"
#include "io/header.hpp"

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace acc::app {

struct ProfileConfig {
    comm::RendezvousConfig rendezvous;
    std::vector<std::string> collectives{"allreduce", "allgather", "broadcast"};
    std::string min_bytes = "8";    ///< -b, with K/M/G binary suffixes
    std::string max_bytes = "64M";  ///< -e
    std::string fit_from = "0";     ///< --fit-from: fit the bandwidth from this size on
    int factor = 2;                 ///< -f
    int iterations = 20;            ///< -n
    int warmup = 5;                 ///< -w
    int agg_iters = 1;              ///< -m: collectives issued back to back per timed iteration
    bool check = false;
    Device device = Device::cpu;  ///< cpu (Gloo) or cuda (NCCL)
    std::string output;           ///< -o: comm-profile file to write; empty: none
    bool force = false;           ///< replace an output that is read-only or not HDF5
    std::string model;            ///< --model: also time this model's training step; empty: no
    std::int64_t batch_size = 0;  ///< --batch-size: samples per rank in the timed steps; 0: 128
    bool csv = false;             ///< CSV on stdout
    bool json = false;            ///< JSON on stdout
    io::Provenance provenance;
};

/// The program's description for --help (the collectives from perf::collective_table()).
std::string comm_profile_description();

/// Adds comm-profile's options, the rendezvous options among them, to `app`.
void add_comm_profile_options(CLI::App& app, ProfileConfig& config);

/// Parses and validates the sweep options (acc::UsageError naming the option).
SweepPlan make_plan(const ProfileConfig& config);

/// Called on every rank as the sweep goes.
struct SweepObserver {
    std::function<void(perf::Collective)> begin;
    std::function<void(perf::Collective, std::int64_t bytes)> size;  ///< before each size is measured
    std::function<void(const SizeResult&)> row;
    std::function<void(const CollectiveResult&)> end;
};

/// Runs the sweep on `comm`. Every rank must call it with the same plan (checked:
/// acc::Error naming the rank that differs). Times are per iteration, each the
/// slowest rank's; with plan.check the results of one extra call per size are
/// compared with exactly predictable integer values.
std::vector<CollectiveResult> measure(comm::ProcessGroupCollectives& comm, const SweepPlan& plan,
                                      const SweepObserver& observer = {});

/// With config.model: times the model's forward and backward pass on every
/// rank at once (-w untimed, then -n timed steps, after a barrier each), each
/// step's time being the slowest rank's.
io::ComputeProfile measure_compute(comm::ProcessGroupCollectives& comm, const ProfileConfig& config,
                                   const SweepPlan& plan);

/// comm-profile end to end: validates the options, starts --nproc local ranks
/// if asked (re-executing argv), and runs this rank's part (only rank 0
/// prints results and writes the file). Returns the exit code.
int run_profile(const ProfileConfig& config, int argc, char** argv);

}  // namespace acc::app
