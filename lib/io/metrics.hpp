// The metrics file (format accordion.metrics) of a train-dist run: per epoch loss,
// accuracy, learning rate, levels used, data sent and time. Layout: docs/formats.md.
#pragma once

#include "io/header.hpp"
#include "io/parameters.hpp"
#include "regime/gravac.hpp"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace acc::io {

/// The names of /auto/reason's codes, code by code (plan::AutoReason's order); the
/// file's attribute `meaning` lists them.
const std::vector<std::string>& auto_reason_names();

inline constexpr const char* kMetricsFormat = "accordion.metrics";
inline constexpr int kMetricsMajor = 1;
/// 1.1 adds /gravac (train-dist --gravac), 1.2 /epochs/rank_communication_seconds, 1.3 /auto
/// (train-dist --auto); older files still read
inline constexpr int kMetricsMinor = 3;

/// How the run was set up (root attributes).
struct MetricsRun {
    std::string model;
    std::string dataset;
    std::int64_t batch_size = 0;  ///< per rank (a batch schedule overrides it per epoch)
    std::int64_t world_size = 1;
    std::int64_t seed = 0;
    std::string mode;             ///< "compress", "schedule" or "accordion"
    std::string compress;         ///< the --compress level ("none" when not given), in compress mode
    std::string schedule;         ///< the schedule file, in schedule mode
    std::string schedule_mode;    ///< its mode: "compression" or "batch"
    double eta = 0;               ///< accordion mode: the rule's settings
    std::int64_t interval = 0;
    std::string low, high;
    std::string backend;          ///< "gloo" or "nccl"
    std::string device;           ///< "cpu" or "cuda"
};

/// One epoch of train-dist --auto (/auto); docs/auto.md defines each quantity.
struct MetricsAuto {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    std::uint8_t pays = 0;      ///< a compressed plan was in force (else every parameter went uncompressed)
    std::uint8_t measured = 0;  ///< the link, compute and codecs were measured before the epoch
    double measure_seconds = 0;  ///< rank 0's seconds spent measuring before the epoch
    double predicted_seconds = kNone;     ///< predicted seconds per step of the levels in force, overhead included
    double overhead_seconds = kNone;      ///< per step, what the model left out in the epoch before (measured - modelled)
    double uncompressed_seconds = kNone;  ///< predicted seconds per step, every parameter uncompressed
    double compressed_seconds = kNone;    ///< the fastest compressed plan's (infinity: none within the budget)
    double measured_seconds = kNone;      ///< rank 0's seconds per step: the epoch's seconds / steps
    double compute_seconds = kNone;       ///< forward and backward seconds per step the model used
    double allreduce_alpha = kNone, allreduce_bandwidth = kNone;  ///< the link: seconds per ring step, bytes/s
    double allgather_alpha = kNone, allgather_bandwidth = kNone;
    /// Seconds of sending a burst lets through free after a pause (a token bucket's); 0 on a link
    /// without one. NaN in files written before it was measured.
    double burst_seconds = kNone;
    double budget = kNone;  ///< Accordion's levels' summed error (NaN: no profile yet)
    double error = kNone;   ///< the levels in force: their summed error
    std::vector<std::int8_t> reason;  ///< per parameter: plan::AutoReason, an index into auto_reason_names()
};

/// One row of /epochs.
struct MetricsEpoch {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    double lr = 0;                       ///< learning rate of the epoch (schedule and scale applied)
    double loss = kNone;                 ///< mean training loss per sample, over every rank's samples
    double accuracy = kNone;             ///< training accuracy over every rank's samples
    double test_loss = kNone;            ///< NaN when the epoch was not evaluated
    double test_accuracy = kNone;
    std::int64_t steps = 0;              ///< optimizer steps
    std::int64_t samples = 0;            ///< training samples of all ranks together
    std::int64_t batch_size = 0;         ///< global batch size (all ranks, one step)
    std::int64_t bytes_sent = 0;         ///< per worker, this epoch (docs/metrics.md)
    std::int64_t bytes_sent_total = 0;   ///< per worker, since the start of the run
    double floats_sent = 0;              ///< bytes_sent / 4
    double floats_sent_total = 0;
    double seconds = kNone;              ///< wall time of the epoch's training, evaluation excluded
    double compute_seconds = kNone;      ///< seconds minus compression and communication
    double compression_seconds = kNone;  ///< encode + decode
    double encode_seconds = kNone;
    double decode_seconds = kNone;
    double communication_seconds = kNone;  ///< issuing and waiting for collectives, not hidden by compute
    /// Every rank's communication_seconds, in rank order (empty in files before 1.2). A rank
    /// that reaches a collective first waits there for the others: the smallest of these is
    /// the closest to the network's own time.
    std::vector<double> rank_communication_seconds;
    std::vector<std::int32_t> level;     ///< per parameter: index into Metrics::levels
    // Accordion mode (empty otherwise): rank 0's gradient norms and the decision governing the epoch.
    std::vector<double> norm;
    std::vector<std::uint8_t> critical;
    std::vector<double> ratio;
    std::vector<std::int8_t> reason;
    // train-dist --auto (has_auto false otherwise).
    bool has_auto = false;
    MetricsAuto automatic;
};

/// GraVAC's settings and record (/gravac); absent (enabled = false) in other modes.
struct MetricsGravac {
    bool enabled = false;
    std::string family;  ///< topk, dgc, randomk or powersgd
    std::string policy;  ///< exponential or geometric
    double theta_min = 0, theta_max = 0, epsilon = 0, omega = 0, theta_s = 0, smoothing = 0;
    std::int64_t window = 0;
    std::vector<regime::GravacStep> steps;             ///< every step of the run, in order
    std::vector<regime::GravacThroughputRow> throughput;  ///< per epoch, ascending factor
};

struct Metrics {
    FileHeader header;
    MetricsGravac gravac;
    bool complete = false;
    MetricsRun run;
    std::vector<Parameter> parameters;
    std::vector<std::string> levels;  ///< every level the run may use; "none" first
    std::vector<MetricsEpoch> epochs;
    bool has_decisions() const { return !epochs.empty() && !epochs.front().critical.empty(); }
    bool has_auto() const { return !epochs.empty() && epochs.front().has_auto; }
};

/// Writes the whole file under a temporary name and renames it into place.
void write_metrics(const std::string& path, const Metrics& metrics);
/// Reads and validates a metrics file.
Metrics read_metrics(const std::string& path);

/// Keeps a run's metrics in memory and rewrites the file after every epoch, so
/// that the file under its final name is always whole: after a crash it holds
/// every completed epoch, with complete = 0.
class MetricsWriter {
public:
    MetricsWriter(std::string path, Metrics metrics);
    /// Continues the file of a stopped run: keeps its first `keep_epochs` epochs
    /// after checking that it lists the same parameters and levels as `expected`.
    static MetricsWriter resume(std::string path, const Metrics& expected, std::int64_t keep_epochs);

    /// GraVAC's records of the epoch about to be appended (--gravac runs).
    void append_gravac(const std::vector<regime::GravacStep>& steps, const std::vector<regime::GravacThroughputRow>& throughput);
    void append_epoch(const MetricsEpoch& epoch);
    /// Marks the file complete.
    void finish();
    const Metrics& metrics() const { return metrics_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    Metrics metrics_;
};

}  // namespace acc::io
