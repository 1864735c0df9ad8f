// Logging on stderr, without CLI11: the programs set it up through run_tool, the
// Python package's library when it loads.
#pragma once

#include <string>

namespace acc::cli {

/// Logging on stderr: info lines plain, warnings as "<tool>: warning: ...",
/// errors as "<tool>: error: ...". `verbosity` -1 quiet (warnings and errors
/// only), 0 normal, 1 debug.
void setup_logging(const std::string& tool, int verbosity);

/// Tags log lines of one rank in a multi-process run ("<tool>[1]: ...").
void set_log_rank(int rank);

}  // namespace acc::cli
