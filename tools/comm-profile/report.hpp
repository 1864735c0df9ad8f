// comm-profile's sweep plan and results, and how they are reported: the
// nccl-tests-like table, CSV, JSON, and the accordion.comm-profile file.
// No LibTorch here; the measurement itself is in comm_profile.hpp.
#pragma once

#include "base/device.hpp"
#include "comm/backend.hpp"
#include "io/comm_profile.hpp"
#include "perf/fit.hpp"
#include "perf/stats.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::app {

/// "64M" -> 67108864: a byte count with an optional binary suffix K, M or G
/// (either case; 1K = 1024). Throws acc::UsageError naming `option`.
std::int64_t parse_size(const std::string& text, const std::string& option);

/// "8 B", "4 KiB", "64 MiB", "1.5 GiB"
std::string size_text(std::int64_t bytes);

struct SweepPlan {
    std::vector<perf::Collective> collectives{perf::Collective::allreduce, perf::Collective::allgather,
                                              perf::Collective::broadcast};
    std::int64_t min_bytes = 8;
    std::int64_t max_bytes = 64 << 20;
    int factor = 2;
    int iterations = 20;  ///< timed iterations per size
    int warmup = 5;       ///< untimed iterations per size before them
    /// Collectives issued back to back in each timed iteration, whose time is their mean
    /// (nccl-tests' -m); 1: each collective alone, after a barrier.
    int agg_iters = 1;
    bool check = false;   ///< check the results on integer-valued data
    /// The bandwidth is fitted over the sizes from this many bytes on, and alpha from the
    /// smaller ones (perf::fit_past_burst); 0: every size (perf::fit_alpha_beta).
    std::int64_t fit_from = 0;

    /// Throws acc::UsageError naming the option at fault.
    void validate() const;
    /// Text that differs whenever two ranks would measure differently.
    std::string signature() const;
};

/// Elements each rank passes to the call for the sizes min, min*factor, ...,
/// up to max: a collective's size S is rounded down to whole floats, for
/// allgather and reduce_scatter to whole floats per rank, at least one;
/// sizes that round to the same count appear once.
std::vector<std::int64_t> plan_counts(perf::Collective collective, const SweepPlan& plan, int world_size);

/// The collective's size S in bytes for `count` floats per call, as nccl-tests
/// defines it (perf::CollectiveInfo::size_counts_ranks): allreduce and broadcast
/// count * 4, allgather and reduce_scatter count * 4 * world_size.
std::int64_t collective_bytes(perf::Collective collective, std::int64_t count, int world_size);

/// One row of the table.
struct SizeResult {
    std::int64_t size = 0;    ///< bytes (S)
    std::int64_t count = 0;   ///< elements per rank passed to the call
    perf::TimingStats time;   ///< seconds; each iteration's time is the slowest rank's
    double algbw = 0;         ///< bytes/s, size / median time
    double busbw = 0;         ///< bytes/s, algbw * bus factor
    std::int64_t wrong = -1;  ///< wrong elements summed over ranks; -1: not checked
};

struct CollectiveResult {
    perf::Collective collective = perf::Collective::allreduce;
    double bus_factor = 1;
    std::vector<SizeResult> rows;
    perf::AlphaBetaFit fit;  ///< over the rows' median times
    std::int64_t fit_from = 0;  ///< SweepPlan::fit_from the fit was made with
    /// Without fit_from: the largest size whose algbw was more than 1.25x the largest
    /// size's (perf::burst_end), a burst the fit did not see past; 0: none.
    std::int64_t burst_end = 0;
};

/// Fills algbw and busbw of `row` from its median time.
void set_bandwidths(SizeResult& row, perf::Collective collective, int world_size);
/// Fits the alpha-beta model over the rows (needs two or more sizes; otherwise
/// the fit is left empty with points = 0), past `fit_from` bytes (SweepPlan::fit_from).
/// Throws acc::UsageError naming --fit-from when fewer than two sizes are past it.
void fit_rows(CollectiveResult& result, std::int64_t fit_from = 0);

/// The fit's bus bandwidth, bytes/s: bandwidth * bus factor (0 on one rank).
double fit_bus_bandwidth(const CollectiveResult& result);

/// "%.2f", "%.1f" or "%.0f", the most precise that fits `width` characters, else "%.*e".
std::string fit_number(double value, int width);

/// The table's parts, each line ending in '\n'. Times in microseconds,
/// bandwidths in GB/s (1e9 bytes per second), as nccl-tests prints them.
std::string table_header(perf::Collective collective);
std::string table_row(const SizeResult& row);
std::string fit_line(const CollectiveResult& result);

/// CSV with a header line, one line per collective and size, in seconds and bytes/s.
std::string results_csv(const std::vector<CollectiveResult>& results);

/// What the run was, for the file and the JSON report.
struct ProfileMeta {
    int world_size = 1;
    comm::Backend backend = comm::Backend::gloo;
    Device device = Device::cpu;
    std::vector<std::string> hosts;
    SweepPlan plan;
    io::Provenance provenance;
    std::string output;  ///< the file written, or empty
    std::optional<io::ComputeProfile> compute;  ///< with --model: the model's compute time per step
};

/// The compute section of the table: forward, backward and their sum per step,
/// min, median and max in milliseconds, each line ending in '\n'.
std::string compute_lines(const io::ComputeProfile& compute, int world_size);

/// The JSON report (seconds and bytes/s; an unbounded bandwidth is null).
std::string results_json(const std::vector<CollectiveResult>& results, const ProfileMeta& meta);

/// The accordion.comm-profile content.
io::CommProfile to_comm_profile(const std::vector<CollectiveResult>& results, const ProfileMeta& meta);

/// Mean busbw over every row, like nccl-tests' "Avg bus bandwidth".
double average_busbw(const std::vector<CollectiveResult>& results);
/// Wrong elements over every checked row; -1 when nothing was checked.
std::int64_t total_wrong(const std::vector<CollectiveResult>& results);

}  // namespace acc::app
