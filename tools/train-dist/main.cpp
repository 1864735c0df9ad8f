// train-dist: data-parallel training whose gradient compression follows
// --compress, a schedule, or Accordion's rule online. See man/train-dist.1.
#include "app/build_info.hpp"
#include "train-dist/driver.hpp"
#include "train-dist/options.hpp"
#include "cli/tool.hpp"

int main(int argc, char** argv) {
    acc::app::TrainDistConfig config;
    return acc::cli::run_tool(
        "train-dist",
        "Data-parallel SGD: every rank trains on its shard, and each parameter's gradient is averaged\n"
        "over the ranks at the compression level of the epoch (--compress, --schedule or --accordion).",
        argc, argv, [&](CLI::App& app) {
            acc::app::add_train_dist_options(app, config);
            acc::cli::add_build_details(app, acc::app::build_details());
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_train_dist(config, argc, argv);
        });
}
