#include "cli/tool.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/version.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <new>
#include <typeinfo>

namespace acc::cli {
namespace {

Provenance g_provenance;
std::string g_tool = "accordion";
int g_rank = -1;

std::string tool_tag() { return g_rank >= 0 ? g_tool + "[" + std::to_string(g_rank) + "]" : g_tool; }

// Adds the "<tool>: warning: " style prefix; info lines stay plain so that
// summaries read as text.
class LevelPrefix : public spdlog::custom_flag_formatter {
public:
    void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
        std::string prefix;
        switch (msg.level) {
        case spdlog::level::warn: prefix = tool_tag() + ": warning: "; break;
        case spdlog::level::err:
        case spdlog::level::critical: prefix = tool_tag() + ": error: "; break;
        case spdlog::level::debug:
        case spdlog::level::trace: prefix = tool_tag() + ": debug: "; break;
        default: prefix = g_rank >= 0 ? tool_tag() + ": " : ""; break;
        }
        dest.append(prefix.data(), prefix.data() + prefix.size());
    }
    std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<LevelPrefix>(); }
};

void print_error(const std::string& message) {
    // Straight to stderr: logging may not be set up yet when options fail to parse.
    std::cerr << tool_tag() << ": error: " << message << std::endl;
}

// The levenshtein distance between two option names.
size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t above = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
            diagonal = above;
        }
    }
    return row[b.size()];
}

bool is_number(const std::string& text) {
    char* end = nullptr;
    std::strtod(text.c_str(), &end);
    return !text.empty() && *end == '\0';
}

// The first argument that looks like an option but names none of `app`'s, or empty.
// CLI11 reports a missing required option before an unknown one, and an unknown
// one only as an unexpected argument; the misspelling is usually the real problem.
std::string unknown_option(const CLI::App& app, int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") break;
        if (arg.size() < 2 || arg[0] != '-' || is_number(arg)) continue;
        const std::string name = arg[1] == '-' ? arg.substr(0, arg.find('=')) : arg.substr(0, 2);
        if (name == "--") continue;
        if (!app.get_option_no_throw(name)) return name;
    }
    return "";
}

std::string format_range(double value) { return short_number(value, 6); }

// The message of an exception that is not one of ours: its first line, since
// LibTorch appends a stack trace, and what the program was doing.
std::string foreign_message(const std::exception& e) {
    std::string text = e.what();
    if (auto newline = text.find('\n'); newline != std::string::npos) text.resize(newline);
    const std::string type = typeid(e).name();
    const bool torch = type.find("c10") != std::string::npos;
    std::string doing = Doing::failed();
    if (doing.empty()) doing = torch ? "computing with LibTorch" : "running";
    return doing + ": " + (torch ? "LibTorch failed: " : "internal error: ") + text;
}

// A number in decimal notation, as the pages describe them: strtod would also
// take hexadecimal ("0x10"), leading spaces, "inf" and "nan".
bool decimal(const std::string& text) {
    return !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
}

}  // namespace

std::vector<std::string> similar_options(const CLI::App& app, const std::string& name) {
    std::vector<std::string> names;
    for (const CLI::Option* option : app.get_options()) {
        for (const auto& l : option->get_lnames()) names.push_back("--" + l);
        for (const auto& s : option->get_snames()) names.push_back("-" + s);
    }
    // Close enough to be a typo: a third of the name's letters, at least 2.
    const size_t limit = std::max<size_t>(2, name.size() / 3);
    size_t best = limit + 1;
    std::vector<std::string> closest;
    for (const auto& candidate : names) {
        const size_t d = edit_distance(name, candidate);
        if (d > limit) continue;
        if (d < best) {
            best = d;
            closest.clear();
        }
        if (d == best && std::find(closest.begin(), closest.end(), candidate) == closest.end())
            closest.push_back(candidate);
    }
    return closest;
}

const char* version() { return ACC_VERSION; }

const char* torch_version() { return ACC_TORCH_VERSION; }

const Provenance& provenance() { return g_provenance; }

void setup_logging(const std::string& tool, int verbosity) {
    g_tool = tool;
    spdlog::drop(tool + "-log");  // set up again when a process runs a tool twice (tests)
    auto logger = spdlog::stderr_logger_st(tool + "-log");
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<LevelPrefix>('*').set_pattern("%*%v");
    logger->set_formatter(std::move(formatter));
    logger->set_level(verbosity < 0 ? spdlog::level::warn : verbosity > 0 ? spdlog::level::debug : spdlog::level::info);
    logger->flush_on(spdlog::level::trace);
    spdlog::set_default_logger(logger);
}

void set_log_rank(int rank) { g_rank = rank; }

CLI::Validator positive() {
    return CLI::Validator(
        [](std::string& input) -> std::string {
            try {
                size_t used = 0;
                double value = std::stod(input, &used);
                if (decimal(input) && used == input.size() && value > 0) return "";
            } catch (const std::exception&) {
            }
            return "must be a number > 0, not '" + input + "'";
        },
        "> 0");
}

CLI::Validator whole_number(long long minimum, long long maximum) {
    const std::string range = "[" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]";
    return CLI::Validator(
        [minimum, maximum, range](std::string& input) -> std::string {
            char* end = nullptr;
            errno = 0;
            const long long value = std::strtoll(input.c_str(), &end, 10);
            // Digits, with a minus at most: strtoll also takes "+8" and " 8", which no count is written as.
            const bool whole = !input.empty() && !std::isspace(static_cast<unsigned char>(input[0])) &&
                               input[0] != '+' && *end == '\0';
            if (whole && errno == 0 && value >= minimum && value <= maximum) return "";
            return "must be a whole number in " + range + ", not '" + input + "'";
        },
        "in " + range);
}

CLI::Option* add_whole_number_list(CLI::App& app, const std::string& name, std::vector<std::int64_t>& target,
                                   long long minimum, long long maximum, const std::string& description) {
    const CLI::Validator item = whole_number(minimum, maximum);
    const std::string range = "[" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]";
    const CLI::Validator list(
        [item, range](std::string& input) -> std::string {
            for (std::string part : split(input, ',')) {
                if (part.empty())
                    return "an empty item in '" + input + "'; give whole numbers in " + range + " separated by commas";
                if (std::string problem = item(part); !problem.empty()) return problem;
            }
            return "";
        },
        "in " + range);
    return app
        .add_option_function<std::vector<std::string>>(
            name,
            [&target](const std::vector<std::string>& texts) {
                target.clear();
                for (const std::string& text : texts)
                    for (const std::string& part : split(text, ',')) target.push_back(std::stoll(part));
            },
            description)
        ->check(list);
}

CLI::Validator number(double minimum, double maximum, bool above_minimum) {
    const std::string range =
        (above_minimum ? "(" : "[") + format_range(minimum) + ", " + format_range(maximum) + "]";
    return CLI::Validator(
        [minimum, maximum, above_minimum, range](std::string& input) -> std::string {
            char* end = nullptr;
            errno = 0;
            const double value = std::strtod(input.c_str(), &end);
            const bool whole = decimal(input) && *end == '\0';
            const bool in_range = std::isfinite(value) && (above_minimum ? value > minimum : value >= minimum) &&
                                  value <= maximum;
            if (whole && errno != ERANGE && in_range) return "";
            return "must be a number in " + range + ", not '" + input + "'";
        },
        "in " + range);
}

namespace {
std::string version_line(const std::string& tool) { return tool + " (Accordion toolkit) " + version(); }
}  // namespace

void add_build_details(CLI::App& app, const std::string& details) {
    app.set_version_flag("--version", version_line(g_tool) + "\n" + details);
}

int run_tool(const std::string& name, const std::string& description, int argc, char** argv,
             const std::function<void(CLI::App&)>& define, const std::function<int()>& run) {
    g_tool = name;
    g_provenance.producer = name + " " + version();
    g_provenance.command_line = command_line(argc, argv);

    CLI::App app(description, name);
    app.set_version_flag("--version", version_line(name));
    app.get_formatter()->column_width(34);
    app.option_defaults()->always_capture_default();
    bool quiet = false;
    bool verbose = false;
    app.add_flag("-q,--quiet", quiet, "Print only warnings and errors");
    app.add_flag("-v,--verbose", verbose, "Print debugging detail");
    define(app);
    // An empty list would show as "=[]"; list options name their default in the description.
    for (CLI::Option* option : app.get_options())
        if (option->get_default_str() == "[]") option->default_str("");
    // "--opt=" would take the next argument as its value: an empty value is refused.
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--") break;
        if (arg.size() > 3 && arg.compare(0, 2, "--") == 0 && arg.back() == '=' &&
            arg.find('=') == arg.size() - 1) {
            print_error(arg.substr(0, arg.size() - 1) + ": no value after '=' (see '" + name + " --help')");
            return kExitUsage;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
        std::cout << app.help();
        return kExitOk;
    } catch (const CLI::CallForAllHelp&) {
        std::cout << app.help("", CLI::AppFormatMode::All);
        return kExitOk;
    } catch (const CLI::CallForVersion& e) {
        std::cout << e.what() << std::endl;
        return kExitOk;
    } catch (const CLI::ParseError& e) {
        const bool about_values = dynamic_cast<const CLI::ValidationError*>(&e) != nullptr ||
                                  dynamic_cast<const CLI::ConversionError*>(&e) != nullptr;
        if (const std::string unknown = about_values ? "" : unknown_option(app, argc, argv); !unknown.empty()) {
            const auto similar = similar_options(app, unknown);
            print_error(unknown + ": unknown option" +
                        (similar.empty() ? "" : "; did you mean " + join(similar, " or ") + "?") + " (see '" + name +
                        " --help')");
            return kExitUsage;
        }
        print_error(std::string(e.what()) + " (see '" + name + " --help')");
        return kExitUsage;
    } catch (const UsageError& e) {
        // An option that turns its text into a typed value as it is read (a level, a choice).
        print_error(e.what());
        return kExitUsage;
    }
    setup_logging(name, quiet ? -1 : verbose ? 1 : 0);
    // A write to a socket whose peer has gone (a rank that gave up while this one was
    // stopped) must fail as an error the collectives report, not kill the process
    // without a word; a closed standard output then fails its writes quietly.
    ::signal(SIGPIPE, SIG_IGN);
    try {
        // Forgets what an earlier run in this process failed at; names nothing itself.
        Doing nothing_yet("");
        return run();
    } catch (const UsageError& e) {
        print_error(e.what());
        return kExitUsage;
    } catch (const Error& e) {
        print_error(e.what());
        return kExitRuntime;
    } catch (const std::bad_alloc&) {
        print_error("out of memory");
        return kExitRuntime;
    } catch (const std::exception& e) {
        print_error(foreign_message(e));
        return kExitRuntime;
    } catch (...) {
        print_error("internal error: an exception of unknown type");
        return kExitRuntime;
    }
}

}  // namespace acc::cli
