// grad-dump: train a model (on one process, or data-parallel on several ranks)
// and record per-parameter gradient statistics, one epoch at a time. See man/grad-dump.1.
#include "cli/tool.hpp"
#include "app/grad_dump.hpp"

int main(int argc, char** argv) {
    acc::app::GradDumpConfig config;
    return acc::cli::run_tool(
        "grad-dump",
        "Train a model and write its gradient statistics: per epoch and parameter tensor, the L2 norm\n"
        "of the gradient summed over the epoch's steps, with learning rate, loss and accuracy.",
        argc, argv,
        [&](CLI::App& app) {
            acc::train::add_train_options(app, config.train);
            const std::string group = "Output";
            app.add_option("-o,--output", config.output, "Gradient-statistics file to write")->group(group);
            app.add_option("--checkpoint", config.checkpoint,
                           "Checkpoint written after every epoch [OUTPUT with .ckpt.h5 for .h5]")
                ->group(group);
            app.add_flag("--resume", config.resume, "Continue a stopped run from its checkpoint")->group(group);
            app.add_option("--snapshot-epochs", config.snapshot_epochs,
                           "Also store the summed gradient tensors of these epochs (e.g. 0,10,150)")
                ->delimiter(',')
                ->check(acc::cli::whole_number(0, 1000000))
                ->default_str("")
                ->group(group);
            app.add_flag("--step-norms", config.step_norms, "Also store per-step, per-parameter gradient norms")
                ->group(group);
            app.add_flag("--json", config.json, "Also print the summary as JSON on stdout")->group(group);
            acc::comm::add_rendezvous_options(app, config.rendezvous);
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_grad_dump(config, argc, argv);
        });
}
