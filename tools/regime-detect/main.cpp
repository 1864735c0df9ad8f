// regime-detect: find critical learning regimes in a gradient-statistics file
// and write a communication schedule. See man/regime-detect.1.
#include "cli/tool.hpp"
#include "compress/spec.hpp"
#include "app/regime_detect.hpp"

int main(int argc, char** argv) {
    acc::regime::DetectConfig config;
    return acc::cli::run_tool(
        "regime-detect",
        "Find critical learning regimes (Accordion's rule) in GRADS.h5 and write a schedule:\n"
        "a compression level per epoch and parameter, or a batch size per epoch.",
        argc, argv,
        [&](CLI::App& app) {
            app.add_option("GRADS.h5", config.input, "Gradient-statistics file written by grad-dump")->required();
            app.add_option("--eta", config.eta, "Critical when the relative change of the gradient norm is >= ETA")
                ->check(acc::cli::number(0, 1e6, true));
            app.add_option("--interval", config.interval, "Epochs between decisions")
                ->check(acc::cli::whole_number(1, 1000000));
            app.add_option("--mode", config.mode, "What the schedule switches: compression level or batch size")
                ->check(CLI::IsMember({"compression", "batch"}));
            app.add_option("--low", config.low,
                           "Level for critical epochs: a compressor spec [powersgd:2], or in batch mode the small "
                           "batch size [512]");
            app.add_option("--high", config.high,
                           "Level elsewhere: a compressor spec [powersgd:1], or in batch mode the large batch "
                           "size [4096]");
            app.add_option("--granularity", config.granularity,
                           "Decide per parameter tensor (layer) or on the whole model (model) [layer; model in "
                           "batch mode]")
                ->check(CLI::IsMember({"layer", "model"}));
            app.add_flag("--monotone", config.monotone, "Batch mode: never return to the small batch once grown");
            app.add_option("-o,--output", config.output, "Schedule file to write");
            app.add_flag("--json", config.json, "Also print the summary as JSON on stdout");
            app.footer("Compressor specs:\n" + acc::compress::spec_help());
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::regime::run_detect(config);
        });
}
