// regime-detect's run: checks the options, reads GRADS.h5, writes the schedule and
// prints the summary (and --json's report). The detection itself is lib/app's,
// shared with the Python package.
#pragma once

#include "app/regime_detect.hpp"

namespace acc::app {

/// Validates the options (UsageError), reads the input, writes the schedule and
/// prints the summary. Returns the exit code.
int run_detect(DetectConfig config);

}  // namespace acc::app
