// What every program shares: option parsing with CLI11, logging to stderr, and
// the single place where errors become messages and exit codes.
//
// Exit codes: 0 success, 1 runtime error (acc::Error), 2 usage error
// (acc::UsageError or a CLI11 parse error).
#pragma once

#include "base/provenance.hpp"
#include "cli/logging.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace acc::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

/// The toolkit's version, e.g. "0.1.0".
const char* version();

/// The LibTorch the toolkit was built against, e.g. "2.11.0" (its CMake version).
const char* torch_version();

/// Producer and command line of the running program, for file headers.
const Provenance& provenance();

/// Runs a program: `define` adds its options to the app, `run` does the work
/// after parsing. Adds -q/--quiet, -v/--verbose and --version, prints --help on
/// stdout, and turns exceptions into "<tool>: error: <message>" on stderr.
int run_tool(const std::string& name, const std::string& description, int argc, char** argv,
             const std::function<void(CLI::App&)>& define, const std::function<int()>& run);

/// Adds `details` (what the program was built with, one line) to what --version
/// prints, after "<tool> (Accordion toolkit) <version>". Call from run_tool's `define`.
void add_build_details(CLI::App& app, const std::string& details);


/// A CLI11 validator for numbers strictly greater than zero.
CLI::Validator positive();

/// A CLI11 validator for whole numbers in [minimum, maximum]: the whole text must
/// be the number, and its message gives the range. Every whole-number option
/// takes one, so that no value saturates, wraps or means "forever".
CLI::Validator whole_number(long long minimum, long long maximum);

/// A comma-separated list of whole numbers in [minimum, maximum] into `target`
/// (the option may also be given several times, or with several values): each
/// item is checked as whole_number checks one, and an empty item ("1,,2", a
/// trailing comma), which CLI11's own splitting would drop, is refused.
CLI::Option* add_whole_number_list(CLI::App& app, const std::string& name, std::vector<std::int64_t>& target,
                                   long long minimum, long long maximum, const std::string& description);

/// A CLI11 validator for finite numbers in [minimum, maximum], or in
/// (minimum, maximum] when `above_minimum`: what a float or double option may hold.
CLI::Validator number(double minimum, double maximum, bool above_minimum = false);

/// An option whose text becomes a typed value (an enum, a level) as CLI11 reads it,
/// so that nothing later handles the text: `parse` returns the value and throws
/// acc::UsageError, printed as it is with exit code 2, for text it does not take.
/// Its type shows as TEXT and no default shows unless the caller sets them.
template <class T, class Parse>
CLI::Option* add_typed_option(CLI::App& app, const std::string& name, T& target, Parse parse,
                              const std::string& description) {
    return app.add_option_function<std::string>(
        name, [&target, parse](const std::string& text) { target = parse(text); }, description);
}

/// The most threads a --threads option accepts: more cannot be meant on any
/// machine this runs on, and each costs memory and scheduler time.
inline constexpr long long kMaxThreads = 256;

/// Names of the options of `app` closest to `name` by edit distance, for
/// "did you mean" hints; empty when none is close.
std::vector<std::string> similar_options(const CLI::App& app, const std::string& name);

}  // namespace acc::cli
