// accordion.detect: regime-detect's work called from Python. The arguments come as
// the program's own command line (the package builds it from the keywords), parsed
// by the program's option definitions: the same checks, the same words, and a
// schedule file equal byte for byte to the one the program writes for that command.
#include "guarded.hpp"

#include "app/regime_detect.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/tool.hpp"

#include <CLI/CLI.hpp>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <vector>

namespace acc::python {
namespace {

// The library's warnings (spdlog; e.g. a GPU the CUDA kernels were not built for) go to
// stderr as "accordion: warning: ...", never to the script's stdout.
const bool kLogging = (cli::setup_logging("accordion", -1), true);

// `args` are regime-detect's arguments (GRADS.h5 and options, without -o), `output` the
// file to write. Warnings go to stderr as "accordion.detect: warning: ..." (they are
// the program's); the summary is not printed.
std::int64_t detect(std::vector<std::string> args, std::string output) {
    return guarded([&] {
        app::DetectConfig config;
        CLI::App parser("accordion.detect", "regime-detect");
        app::add_detect_options(parser, config);
        std::vector<std::string> reversed(args.rbegin(), args.rend());
        try {
            parser.parse(reversed);
        } catch (const CLI::ParseError& e) {
            throw UsageError(e.what());
        }
        std::vector<const char*> argv{"regime-detect"};
        for (const std::string& a : args) argv.push_back(a.c_str());
        config.provenance.producer = std::string("regime-detect ") + cli::version();
        config.provenance.command_line = command_line(static_cast<int>(argv.size()), argv.data());
        config.output = std::move(output);
        // The warnings name accordion.detect while it runs, whatever ends it.
        struct Named {
            Named() { cli::setup_logging("accordion.detect", -1); }
            ~Named() { cli::setup_logging("accordion", -1); }
        } named;
        return static_cast<std::int64_t>(app::run_detect(std::move(config)));
    });
}

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    m.def("detect(str[] args, str output) -> int", acc::python::detect);
}
