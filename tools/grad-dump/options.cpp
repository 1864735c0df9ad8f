#include "grad-dump/options.hpp"

#include "app/rank_options.hpp"
#include "app/training_options.hpp"
#include "cli/tool.hpp"

#include <CLI/CLI.hpp>

namespace acc::app {

void add_grad_dump_options(CLI::App& app, GradDumpConfig& config) {
    add_train_options(app, config.train);
    const std::string group = "Output";
    app.add_option("-o,--output", config.output, "Gradient-statistics file to write")->group(group);
    app.add_option("--checkpoint", config.checkpoint, "Checkpoint written after every epoch [OUTPUT with .ckpt.h5 for .h5]")
        ->group(group);
    app.add_flag("--resume", config.resume, "Continue a stopped run from its checkpoint")->group(group);
    app.add_flag("--force", config.force, "Replace an output file that is read-only or not an HDF5 file")->group(group);
    cli::add_whole_number_list(app, "--snapshot-epochs", config.snapshot_epochs, 0, 1000000,
                               "Also store the summed gradient tensors of these epochs (e.g. 0,10,150)")
        ->type_name("LIST")
        ->group(group);
    app.add_flag("--profile", config.profile,
                 "Also store each epoch's compressibility profile (singular values, Top-k tails) for "
                 "regime-detect --plan")
        ->group(group);
    app.add_flag("--step-norms", config.step_norms, "Also store per-step, per-parameter gradient norms")->group(group);
    app.add_flag("--json", config.json, "Also print the summary as JSON on stdout")->group(group);
    add_rendezvous_options(app, config.rendezvous);
    add_backend_option(app, config.backend, "Communication");
}

}  // namespace acc::app
