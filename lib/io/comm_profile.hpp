// The communication-profile file (format accordion.comm-profile), written by
// comm-profile and read by compress-bench. Layout: docs/formats.md.
#pragma once

#include "io/header.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::io {

/// The most ranks a profile may hold: the most a run of the toolkit has (comm::kMaxRanks).
inline constexpr std::int64_t kMaxProfileRanks = std::int64_t{1} << 20;
/// The longest time a profile may hold (seconds: about 11.6 days), and the least
/// bandwidth (bytes per second): beyond them a step's modelled time overflows or loses
/// all meaning, so a file holding such a value is refused, naming it.
inline constexpr double kMaxProfileSeconds = 1e6;
inline constexpr double kMinProfileBandwidth = 1;

inline constexpr const char* kCommProfileFormat = "accordion.comm-profile";
inline constexpr int kCommProfileMajor = 1;
/// 1.1 added the optional /compute group, 1.2 agg_iters, 1.3 time_mean
inline constexpr int kCommProfileMinor = 3;

/// One collective's sweep over message sizes and its alpha-beta fit.
struct CollectiveProfile {
    std::string name;         ///< "allreduce", "allgather", "broadcast", "reduce_scatter"
    std::string op = "none";  ///< reduction: "sum", or "none"
    std::string dtype = "float32";
    double bus_factor = 1;  ///< busbw = algbw * bus_factor (docs/metrics.md)

    // One entry per message size, sizes strictly increasing.
    std::vector<std::int64_t> size;   ///< bytes: the collective's size S, as in algbw
    std::vector<std::int64_t> count;  ///< elements each rank passes to the call
    std::vector<double> time_min;     ///< seconds; each iteration's time is the slowest rank's
    std::vector<double> time_median;  ///< seconds
    std::vector<double> time_max;     ///< seconds
    /// seconds: the timed iterations' mean (a file before 1.3 has none: read as time_median)
    std::vector<double> time_mean;
    std::vector<double> algbw;        ///< bytes/s: size / time_median
    std::vector<double> busbw;        ///< bytes/s: algbw * bus_factor
    std::vector<std::int64_t> wrong;  ///< wrong elements summed over ranks; -1 when not checked

    // t(S) = alpha + S / bandwidth, fitted over the sweep's median times.
    double alpha = 0;          ///< seconds
    double bandwidth = 0;      ///< bytes/s; may be +infinity
    double bus_bandwidth = 0;  ///< bytes/s: bandwidth * bus_factor
    double r2 = 0;
    double rms_relative_residual = 0;
    double max_relative_residual = 0;
    std::int64_t fit_points = 0;  ///< sizes the fit used
    std::int64_t fit_from = 0;    ///< bytes: the bandwidth was fitted from this size on (comm-profile --fit-from); 0: all

    /// Predicted time in seconds of this collective on `bytes` (its size S).
    double predict(double bytes) const;
};

/// Forward and backward compute time per training step of one model (comm-profile --model).
struct ComputeProfile {
    std::string model;                     ///< e.g. "resnet18"
    std::int64_t batch_size = 0;           ///< samples per step and rank (streams for a language model)
    std::vector<std::int64_t> input_shape; ///< per sample, e.g. {3, 32, 32}; a language model: {bptt}
    std::int64_t classes = 0;              ///< classes, or the vocabulary size
    std::string input;                     ///< where the shape comes from, e.g. "CIFAR-10"
    std::int64_t warmup_steps = 0;         ///< untimed steps before the timed ones
    std::int64_t threads = 1;              ///< CPU threads per rank
    std::vector<double> forward;   ///< seconds per timed step (forward pass and loss), each the slowest rank's
    std::vector<double> backward;  ///< seconds per timed step (backward pass), each the slowest rank's
    double forward_seconds = 0;    ///< median of `forward`
    double backward_seconds = 0;   ///< median of `backward`
};

struct CommProfile {
    FileHeader header;
    std::int64_t world_size = 1;  ///< in [1, kMaxProfileRanks]
    std::string backend = "gloo";  ///< "gloo" or "nccl"
    std::string device = "cpu";    ///< "cpu" or "cuda"
    std::int64_t iterations = 0;   ///< timed iterations per size
    std::int64_t warmup_iterations = 0;
    std::int64_t agg_iters = 1;      ///< collectives back to back per timed iteration (time: their mean)
    bool checked = false;            ///< whether results were checked (wrong >= 0)
    std::vector<std::string> hosts;  ///< host name of each rank, in rank order
    std::vector<CollectiveProfile> collectives;
    std::optional<ComputeProfile> compute;  ///< absent unless comm-profile ran with --model

    /// The collective called `name`, or nullptr.
    const CollectiveProfile* find(const std::string& name) const;
};

/// Writes the profile atomically (temporary name, then rename).
void write_comm_profile(const std::string& path, const CommProfile& profile);
/// Reads and validates a comm-profile file.
CommProfile read_comm_profile(const std::string& path);

}  // namespace acc::io
