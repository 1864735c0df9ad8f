// The compressor benchmark file (format accordion.compress-bench), written by
// compress-bench. Layout: docs/formats.md.
#pragma once

#include "io/header.hpp"
#include "io/parameters.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::io {

inline constexpr const char* kBenchFormat = "accordion.compress-bench";
inline constexpr int kBenchMajor = 1;
inline constexpr int kBenchMinor = 1;  ///< 1.1 added comm_model

/// One gradient the compressors ran on: synthetic, or a snapshot of a grads.h5.
struct BenchInput {
    std::string name;  ///< "synthetic" or "epoch 7"
    double norm = 0;   ///< L2 norm of the whole gradient
};

/// One compressor on one input at one world size.
struct BenchRow {
    std::int64_t input = 0;  ///< index into BenchFile::inputs
    std::string compressor;  ///< the spec, e.g. "powersgd:2"
    std::int64_t world_size = 1;
    std::int64_t bytes_per_worker = 0;  ///< per step (docs/metrics.md, "Data sent")
    double compression_ratio = 0;       ///< fp32 bytes / bytes_per_worker
    double encode_median = 0, encode_min = 0, encode_max = 0;  ///< seconds
    double decode_median = 0, decode_min = 0, decode_max = 0;  ///< seconds, W payloads
    double throughput = 0;       ///< gradient bytes per second of encode plus decode (medians)
    double relative_error = 0;   ///< ||C(g) - g|| / ||g||
    double cosine = 0;           ///< <C(g), g> / (||C(g)|| ||g||)
    double gain = 0;             ///< ||C(g)||^2 / ||g||^2 (GraVAC's compression gain)
    double comm_seconds = 0;     ///< model: the compressed exchange's collectives
    double iteration_seconds = 0;           ///< model: one compressed iteration
    double baseline_iteration_seconds = 0;  ///< model: one uncompressed DDP iteration
    double speedup = 0;                     ///< baseline / compressed iteration time
};

struct BenchFile {
    FileHeader header;
    std::string source;          ///< the --shapes preset or file, or the grads.h5 read
    std::string network_source;  ///< "flags", "default" or "comm" (a comm-profile file)
    std::string comm_model = "fit";  ///< "fit" or "measured" (compress-bench --comm-model)
    std::string comm_profile;    ///< the comm-profile file read, or empty
    double alpha = 0;            ///< seconds per ring step (allreduce and the other collectives)
    double bandwidth = 0;        ///< bytes per second a link carries
    double allgather_alpha = 0;  ///< the same for allgathers (from their own profile, if any)
    double allgather_bandwidth = 0;
    double compute_seconds = 0;
    double backward_share = 0;
    double bucket_bytes = 0;
    std::int64_t reps = 0;
    std::int64_t threads = 1;
    double memcpy_bandwidth = 0;  ///< bytes per second, measured by the run
    std::string vectors;          ///< "none" or "compress": what parameters with fewer than 2 dimensions got
    std::string topk_selection;   ///< "exact" or "sampled"
    std::vector<Parameter> parameters;
    std::vector<BenchInput> inputs;
    std::vector<BenchRow> rows;
};

/// Writes the file atomically (temporary name, then rename).
void write_bench(const std::string& path, const BenchFile& bench);
/// Reads and validates a benchmark file.
BenchFile read_bench(const std::string& path);

}  // namespace acc::io
