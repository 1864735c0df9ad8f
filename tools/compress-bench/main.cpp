// compress-bench: how fast, how small and how accurate each gradient compressor is,
// and whether it pays on a given network at a given scale. See man/compress-bench.1.
#include "app/build_info.hpp"
#include "compress-bench/driver.hpp"
#include "cli/tool.hpp"

int main(int argc, char** argv) {
    acc::app::BenchConfig config;
    return acc::cli::run_tool(
        "compress-bench",
        "Run gradient compressors on tensors with a real model's shapes (or on the gradient snapshots of a\n"
        "grads.h5): size, encode and decode time, error, and the iteration time the performance model\n"
        "predicts against uncompressed data-parallel SGD.",
        argc, argv, [&](CLI::App& app) {
            acc::app::add_compress_bench_options(app, config);
            acc::cli::add_build_details(app, acc::app::build_details());
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_bench(config);
        });
}
