#include "cli/tool.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "base/version.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>
#include <new>

namespace acc::cli {
namespace {

io::Provenance g_provenance;
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

}  // namespace

const char* version() { return ACC_VERSION; }

const io::Provenance& provenance() { return g_provenance; }

void setup_logging(const std::string& tool, int verbosity) {
    g_tool = tool;
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
                if (used == input.size() && value > 0) return "";
            } catch (const std::exception&) {
            }
            return "must be a number > 0, not '" + input + "'";
        },
        "> 0");
}

CLI::Validator at_least(long long minimum) {
    return CLI::Validator(
        [minimum](std::string& input) -> std::string {
            try {
                size_t used = 0;
                long long value = std::stoll(input, &used);
                if (used == input.size() && value >= minimum) return "";
            } catch (const std::exception&) {
            }
            return "must be a whole number >= " + std::to_string(minimum) + ", not '" + input + "'";
        },
        ">= " + std::to_string(minimum));
}

int run_tool(const std::string& name, const std::string& description, int argc, char** argv,
             const std::function<void(CLI::App&)>& define, const std::function<int()>& run) {
    g_tool = name;
    g_provenance.producer = name + " " + version();
    g_provenance.command_line = command_line(argc, argv);

    CLI::App app(description, name);
    app.set_version_flag("--version", name + " (Accordion toolkit) " + version());
    app.get_formatter()->column_width(34);
    app.option_defaults()->always_capture_default();
    bool quiet = false;
    bool verbose = false;
    app.add_flag("-q,--quiet", quiet, "Print only warnings and errors");
    app.add_flag("-v,--verbose", verbose, "Print debugging detail");
    define(app);
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
        print_error(std::string(e.what()) + " (see '" + name + " --help')");
        return kExitUsage;
    }
    setup_logging(name, quiet ? -1 : verbose ? 1 : 0);
    try {
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
        print_error(std::string("internal error: ") + e.what());
        return kExitRuntime;
    }
}

}  // namespace acc::cli
