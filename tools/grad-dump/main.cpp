// grad-dump: train a model (on one process, or data-parallel on several ranks)
// and record per-parameter gradient statistics, one epoch at a time. See man/grad-dump.1.
#include "app/build_info.hpp"
#include "grad-dump/driver.hpp"
#include "grad-dump/options.hpp"
#include "cli/tool.hpp"

int main(int argc, char** argv) {
    acc::app::GradDumpConfig config;
    return acc::cli::run_tool(
        "grad-dump",
        "Train a model and write its gradient statistics: per epoch and parameter tensor, the L2 norm\n"
        "of the gradient summed over the epoch's steps, with learning rate, loss and accuracy.",
        argc, argv, [&](CLI::App& app) {
            acc::app::add_grad_dump_options(app, config);
            acc::cli::add_build_details(app, acc::app::build_details());
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_grad_dump(config, argc, argv);
        });
}
