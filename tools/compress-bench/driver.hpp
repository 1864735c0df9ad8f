// compress-bench's work: run every compressor on gradients with a real model's
// shapes (or a grads.h5's snapshots), measure size, speed and quality, and predict
// with the performance model whether it pays; and the program's options, which
// main() parses into a BenchConfig.
#pragma once

#include "app/comm_network.hpp"
#include "base/device.hpp"
#include "compress/codecs.hpp"
#include "compress/spec.hpp"
#include "io/header.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace acc::app {

/// The compressor code compress-bench times (--path): the loops over raw float arrays
/// (host), or the ATen operations that run on a GPU (device; on CPU tensors too).
enum class CompressorPath { host, device };

/// --path's choices in help order, its spelling of each, and back (UsageError naming --path).
const std::vector<std::string>& compressor_path_names();
const char* compressor_path_name(CompressorPath path);
CompressorPath parse_compressor_path(const std::string& name);

/// --vectors: the level of parameters with fewer than 2 dimensions.
enum class VectorLevel { none, compress };
const char* vector_level_name(VectorLevel level);
const char* topk_selection_name(compress::TopkSelection selection);

struct BenchConfig {
    std::string shapes;                    ///< a model preset or a shapes file; empty: resnet18
    std::string from;                      ///< a grads.h5 whose snapshots are the inputs
    std::vector<std::int64_t> snapshots;   ///< snapshot epochs to use; empty: all
    std::vector<compress::Spec> compressors;  ///< distinct, in the order given; empty: the default list
    std::vector<std::int64_t> worlds;      ///< world sizes; empty: 4, 16, 64
    std::int64_t reps = 5;                 ///< timed steps after one warm-up step
    std::string comm;                      ///< a comm-profile file for the network; empty: flags or defaults
    CommModel comm_model = CommModel::fit;  ///< how --comm prices a collective
    double alpha = 50e-6;                  ///< seconds per message step (default: 10 Gbit/s Ethernet)
    double bandwidth = 1.25e9;             ///< bytes per second
    bool alpha_given = false;              ///< --alpha was given (it needs --bandwidth, and vice versa)
    bool bandwidth_given = false;
    double compute_ms = 0;                 ///< forward plus backward time of one iteration
    bool compute_ms_given = false;         ///< --compute-ms was given (else a --comm file's compute time, if any)
    VectorLevel vectors = VectorLevel::none;  ///< none: parameters with < 2 dimensions go uncompressed
    compress::TopkSelection topk_selection = compress::TopkSelection::exact;
    std::int64_t threads = 1;
    /// Where the gradients live: the CPU, or the first GPU (the device codecs there).
    Device device = Device::cpu;
    /// The compressor code that runs; unset: host on the CPU, device on a GPU.
    std::optional<CompressorPath> path;
    std::string output;                    ///< bench.h5 to write; empty: none
    std::string trace;                     ///< a trace of the timed steps to write (Chrome trace JSON); empty: none
    bool force = false;                    ///< replace an output that is read-only or not HDF5
    bool csv = false;                      ///< the results as CSV on stdout
    bool json = false;                     ///< the results as JSON on stdout
    /// --what-if: price plans on other links, world sizes and compute speeds (what_if.hpp)
    /// instead of running the compressors.
    bool what_if = false;
    std::string metrics;                   ///< --what-if: a train-dist metrics file whose plan to price; empty: --shapes
    std::vector<double> links;             ///< --what-if: link bandwidths, Gbit/s (10^9 bits per second); empty: see docs
    double compute_speed = 1;              ///< --what-if: compute, encode and decode seconds are divided by it
    bool compute_speed_given = false;
    io::Provenance provenance;
};

/// Adds compress-bench's options and its footer (the compressor specs) to `app`.
void add_compress_bench_options(CLI::App& app, BenchConfig& config);

/// Validates the options (UsageError), runs the benchmark, prints and writes the results
/// (with --what-if: run_what_if, what_if.hpp). Returns the exit code.
int run_bench(BenchConfig config);

}  // namespace acc::app
