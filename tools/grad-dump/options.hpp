// grad-dump's command-line options. No LibTorch here.
#pragma once

#include "grad-dump/driver.hpp"

namespace CLI {
class App;
}

namespace acc::app {

/// Adds grad-dump's own options (--output, --resume, --snapshot-epochs, ...) and
/// the shared training and rendezvous options to `app`.
void add_grad_dump_options(CLI::App& app, GradDumpConfig& config);

}  // namespace acc::app
