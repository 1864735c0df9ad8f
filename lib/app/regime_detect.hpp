// regime-detect's work, from a gradient-statistics file to a schedule file and a
// summary. The program's main() only parses options into a DetectConfig.
#pragma once

#include "io/header.hpp"

#include <cstdint>
#include <string>

namespace acc::regime {

struct DetectConfig {
    std::string input;               ///< gradient-statistics file (accordion.grads)
    std::string output = "sched.h5"; ///< schedule file to write
    double eta = 0.5;
    std::int64_t interval = 10;      ///< epochs
    std::string mode = "compression";  ///< "compression" or "batch"
    std::string low;                 ///< empty: powersgd:2, or batch 512
    std::string high;                ///< empty: powersgd:1, or batch 4096
    std::string granularity;         ///< empty: layer (compression) or model (batch)
    bool monotone = false;
    bool json = false;               ///< also print the summary as JSON on stdout
    io::Provenance provenance;
};

/// Validates the options (UsageError), reads the input, writes the schedule and
/// prints the summary. Returns the exit code.
int run_detect(DetectConfig config);

}  // namespace acc::regime
