// compress-bench: how fast, how small and how accurate each gradient compressor is,
// and whether it pays on a given network at a given scale. See man/compress-bench.1.
#include "base/text.hpp"
#include "cli/tool.hpp"
#include "app/compress_bench.hpp"
#include "app/training_options.hpp"
#include "compress/spec.hpp"

namespace {

// --alpha, --bandwidth and --compute-ms: whether each was given matters, not only its value.
struct GivenOptions {
    CLI::Option* alpha = nullptr;
    CLI::Option* bandwidth = nullptr;
    CLI::Option* compute_ms = nullptr;
};

// What to compress: the gradients' shapes or snapshots, the compressors, the world sizes.
void add_input_options(CLI::App& app, acc::compress::BenchConfig& config) {
    app.add_option("--shapes", config.shapes,
                   "Model whose parameter shapes to use (resnet18, resnet50, vgg19, bert-base, lstm) or a "
                   "shapes file of NAME SHAPE lines [resnet18]")
        ->type_name("MODEL|FILE");
    app.add_option("--from", config.from, "Gradient-statistics file whose gradient snapshots to use")
        ->type_name("GRADS.h5");
    app.add_option("--snapshots", config.snapshots, "With --from: the snapshot epochs to use [all]")
        ->delimiter(',')
        ->check(acc::cli::whole_number(0, 1000000))
        ->type_name("EPOCH,...");
    app.add_option("--compressors", config.compressors,
                   "Compressor specs, comma-separated [" +
                       acc::join(acc::compress::default_bench_compressors(), ",") + "]")
        ->delimiter(',')
        ->type_name("SPEC,...");
    app.add_option("--world", config.worlds, "World sizes to predict for, comma-separated [4,16,64]")
        ->delimiter(',')
        ->check(acc::cli::whole_number(1, 1000000))
        ->type_name("W,...");
    app.add_option("--reps", config.reps, "Timed steps per compressor and world size, after one warm-up")
        ->check(acc::cli::whole_number(1, 1000000))
        ->type_name("N");
}

// The network and compute time the performance model predicts with.
void add_network_options(CLI::App& app, acc::compress::BenchConfig& config, GivenOptions& given) {
    app.add_option("--comm", config.comm,
                   "Communication profile written by comm-profile: the network's latency and bandwidth")
        ->type_name("COMM.h5");
    given.alpha = app.add_option("--alpha", config.alpha,
                                 "Network latency per message step, in seconds (default: 10 Gbit/s Ethernet)")
                      ->check(acc::cli::number(0, 60))
                      ->type_name("SECONDS");
    given.bandwidth = app.add_option("--bandwidth", config.bandwidth, "Network bandwidth in bytes per second")
                          ->check(acc::cli::number(0, 1e15, true))
                          ->type_name("BYTES_PER_S");
    given.compute_ms = app.add_option("--compute-ms", config.compute_ms,
                                      "Forward plus backward time of one iteration, in ms [the time comm-profile "
                                      "--model stored in --comm, else 0]")
                           ->check(acc::cli::number(0, 3.6e6))
                           ->type_name("MS");
}

// How the compressors run, and where the results go.
void add_run_options(CLI::App& app, acc::compress::BenchConfig& config) {
    app.add_option("--vectors", config.vectors,
                   "Parameters with fewer than 2 dimensions: sent uncompressed (none) or compressed too")
        ->check(CLI::IsMember({"none", "compress"}));
    app.add_option("--topk-selection", config.topk_selection,
                   "Top-k selection: exact, or sampled (a DGC-style threshold)")
        ->check(CLI::IsMember({"exact", "sampled"}));
    app.add_option("--threads", config.threads, "LibTorch threads (the compressors' own loops use one)")
        ->check(acc::cli::whole_number(1, acc::cli::kMaxThreads))
        ->type_name("N");
    acc::app::add_device_option(app, config.device,
                                "Where the gradients live: cpu, or cuda (the device codecs on the GPU) [cpu]");
    // Unset (no default shown) means the device's own path.
    app.add_option_function<std::string>(
           "--path", [&config](const std::string& name) { config.path = acc::compress::parse_compressor_path(name); },
           "Compressor code: host (raw float loops) or device (ATen operations, as on a GPU) "
           "[host on cpu, device on cuda]")
        ->check(CLI::IsMember(acc::compress::compressor_path_names()));
    app.add_option("-o,--output", config.output, "Results file to write (format accordion.compress-bench)")
        ->type_name("BENCH.h5");
    app.add_flag("--force", config.force, "Replace an output file that is read-only or not an HDF5 file");
    app.add_flag("--csv", config.csv, "Print the results as CSV on stdout");
    app.add_flag("--json", config.json, "Print the results as JSON on stdout");
}

}  // namespace

int main(int argc, char** argv) {
    acc::compress::BenchConfig config;
    GivenOptions given;
    return acc::cli::run_tool(
        "compress-bench",
        "Run gradient compressors on tensors with a real model's shapes (or on the gradient snapshots of a\n"
        "grads.h5): size, encode and decode time, error, and the iteration time the performance model\n"
        "predicts against uncompressed data-parallel SGD.",
        argc, argv,
        [&](CLI::App& app) {
            add_input_options(app, config);
            add_network_options(app, config, given);
            add_run_options(app, config);
            app.footer("Compressor specs:\n" + acc::compress::spec_help());
        },
        [&] {
            config.alpha_given = given.alpha->count() > 0;
            config.bandwidth_given = given.bandwidth->count() > 0;
            config.compute_ms_given = given.compute_ms->count() > 0;
            config.provenance = acc::cli::provenance();
            return acc::compress::run_bench(config);
        });
}
