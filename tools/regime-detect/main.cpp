// regime-detect: find critical learning regimes in a gradient-statistics file
// and write a communication schedule. See man/regime-detect.1.
#include "regime-detect/driver.hpp"
#include "cli/tool.hpp"

#include <string>

int main(int argc, char** argv) {
    acc::app::DetectConfig config;
    return acc::cli::run_tool(
        "regime-detect",
        "Find critical learning regimes (Accordion's rule) in GRADS.h5 and write a schedule:\n"
        "a compression level per epoch and parameter, or a batch size per epoch.",
        argc, argv, [&](CLI::App& app) {
            acc::app::add_detect_options(app, config);
            // It loads no LibTorch, but comes from the build (or the Python package) of one.
            acc::cli::add_build_details(app, std::string("built with LibTorch ") + acc::cli::torch_version() +
                                                 " (which regime-detect does not load)");
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_detect(config);
        });
}
