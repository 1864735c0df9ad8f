// Option checks, "did you mean" hints and error reporting shared by every program.
#include "base/error.hpp"
#include "cli/json.hpp"
#include "cli/tool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>
#include <sys/socket.h>
#include <unistd.h>

using namespace acc;

namespace {

// The validator's verdict on one input: empty when accepted.
std::string check(const CLI::Validator& v, std::string input) { return v(input); }

struct Outcome {
    int code = 0;
    std::string err;
};

// Runs a tiny tool with --epochs (required), --seed and --lr on `args`; `work` is its body.
Outcome invoke(std::vector<std::string> args, const std::function<int()>& work = [] { return 0; }) {
    args.insert(args.begin(), "tool");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    long long epochs = 0, seed = 0;
    double lr = 0;
    testing::internal::CaptureStderr();
    Outcome r;
    r.code = cli::run_tool(
        "tool", "A test tool.", static_cast<int>(argv.size()), argv.data(),
        [&](CLI::App& app) {
            app.add_option("--epochs", epochs)->required()->check(cli::whole_number(1, 100));
            app.add_option("--seed", seed)->check(cli::whole_number(0, 1000));
            app.add_option("--lr", lr)->check(cli::number(0, 10));
            std::vector<long long> list;
            app.add_option("--list", list)->delimiter(',');
        },
        work);
    r.err = testing::internal::GetCapturedStderr();
    return r;
}

}  // namespace

TEST(Cli, WholeNumbersInRangeOnly) {
    const auto v = cli::whole_number(1, 1000);
    EXPECT_EQ(check(v, "1"), "");
    EXPECT_EQ(check(v, "1000"), "");
    for (const char* bad : {"0", "1001", "-1", "", " 5", "5 ", "+5", "1.5", "1e3", "0x10", "99999999999999999999", "ten"})
        EXPECT_EQ(check(v, bad), "must be a whole number in [1, 1000], not '" + std::string(bad) + "'") << bad;
}

TEST(Cli, NumbersFiniteAndInRange) {
    const auto v = cli::number(0, 1e30);
    EXPECT_EQ(check(v, "0"), "");
    EXPECT_EQ(check(v, "1e30"), "");
    EXPECT_EQ(check(v, "0.5"), "");
    for (const char* bad : {"1e300", "1e400", "nan", "inf", "-0.1", "", "1x", "0.5 ", " 0.5", "0x10", "0x1p-3"})
        EXPECT_EQ(check(v, bad), "must be a number in [0, 1e+30], not '" + std::string(bad) + "'") << bad;
    const auto positive = cli::number(0, 1, true);
    EXPECT_NE(check(positive, "0"), "");
    EXPECT_EQ(check(positive, "1e-9"), "");
    EXPECT_EQ(check(positive, "0"), "must be a number in (0, 1], not '0'");
}

// A list of whole numbers is what the pages say: numbers between commas. CLI11's
// own splitting would drop an empty item; here it is refused, naming the list.
TEST(Cli, WholeNumberListsRefuseEmptyItems) {
    auto parse = [](std::vector<std::string> args) {
        CLI::App app;
        std::vector<std::int64_t> list{99};
        cli::add_whole_number_list(app, "--list", list, 1, 100, "numbers");
        std::reverse(args.begin(), args.end());
        app.parse(args);
        return list;
    };
    EXPECT_EQ(parse({"--list", "4,16,64"}), (std::vector<std::int64_t>{4, 16, 64}));
    EXPECT_EQ(parse({"--list", "4", "8", "--list", "2,3"}), (std::vector<std::int64_t>{4, 8, 2, 3}));
    EXPECT_EQ(parse({}), (std::vector<std::int64_t>{99}));
    for (const std::string bad : {"4,,8", "4,8,", ",4", ",", "0x10", "4, 8", "101", "0", "1.5"}) {
        try {
            parse({"--list", bad});
            ADD_FAILURE() << "accepted '" << bad << "'";
        } catch (const CLI::ValidationError& e) {
            const std::string message = e.what();
            if (bad.find(',') != std::string::npos && bad.find(' ') == std::string::npos)
                EXPECT_NE(message.find("an empty item in '" + bad + "'; give whole numbers in [1, 100] separated by "
                                       "commas"),
                          std::string::npos)
                    << message;
            else
                EXPECT_NE(message.find("must be a whole number in [1, 100], not '"), std::string::npos) << message;
        }
    }
    try {  // a sign is no part of a count
        parse({"--list", "4,+8"});
        ADD_FAILURE() << "accepted '4,+8'";
    } catch (const CLI::ValidationError& e) {
        EXPECT_NE(std::string(e.what()).find("must be a whole number in [1, 100], not '+8'"), std::string::npos)
            << e.what();
    }
}

TEST(Cli, UnknownOptionComesFirstWithAHint) {
    Outcome r = invoke({"--epoch", "3"});  // --epochs is missing too
    EXPECT_EQ(r.code, cli::kExitUsage);
    EXPECT_EQ(r.err, "tool: error: --epoch: unknown option; did you mean --epochs? (see 'tool --help')\n");
    r = invoke({"--epochs", "3", "--sed=4"});
    EXPECT_EQ(r.err, "tool: error: --sed: unknown option; did you mean --seed? (see 'tool --help')\n");
    r = invoke({"--epochs", "3", "--frobnicate"});
    EXPECT_EQ(r.err, "tool: error: --frobnicate: unknown option (see 'tool --help')\n");
    // Negative numbers are values, not options; the range check reports them.
    r = invoke({"--epochs", "3", "--seed", "-1"});
    EXPECT_EQ(r.code, cli::kExitUsage);
    EXPECT_NE(r.err.find("--seed: must be a whole number in [0, 1000], not '-1'"), std::string::npos) << r.err;
    r = invoke({"--epochs", "3"});
    EXPECT_EQ(r.code, cli::kExitOk) << r.err;
}

// "--seed=" with nothing after '=' would take the next argument as its value.
TEST(Cli, AnEmptyValueAfterEqualsIsRefused) {
    Outcome r = invoke({"--seed=", "--epochs", "3"});
    EXPECT_EQ(r.code, cli::kExitUsage);
    EXPECT_EQ(r.err, "tool: error: --seed: no value after '=' (see 'tool --help')\n");
    // After "--" everything is an operand, and "--seed=4" is an ordinary value.
    r = invoke({"--epochs", "3", "--seed=4"});
    EXPECT_EQ(r.code, cli::kExitOk) << r.err;
}

TEST(Cli, HelpShowsNoEmptyListDefault) {
    testing::internal::CaptureStdout();
    Outcome r = invoke({"--help"});
    const std::string help = testing::internal::GetCapturedStdout();
    EXPECT_EQ(r.code, cli::kExitOk);
    EXPECT_NE(help.find("--list"), std::string::npos) << help;
    EXPECT_EQ(help.find("=[]"), std::string::npos) << help;
}

namespace {

// What LibTorch's errors look like: a message, then a stack trace on more lines.
class FakeTorchError : public std::exception {
public:
    const char* what() const noexcept override {
        return "DefaultCPUAllocator: can't allocate memory\nException raised from alloc_cpu\nframe #0: ...";
    }
};

}  // namespace

TEST(Cli, ForeignErrorsBecomeOneLineNamingWhatWasDone) {
    Outcome r = invoke({"--epochs", "1"}, []() -> int {
        Doing outer("setting up");
        {
            Doing doing("building the model (--model mlp)");
            throw FakeTorchError();
        }
    });
    EXPECT_EQ(r.code, cli::kExitRuntime);
    EXPECT_EQ(r.err, "tool: error: building the model (--model mlp): internal error: DefaultCPUAllocator: can't "
                     "allocate memory\n");
    r = invoke({"--epochs", "1"}, []() -> int { throw std::runtime_error("first\nsecond"); });
    EXPECT_EQ(r.err, "tool: error: running: internal error: first\n");
    // A failure handled inside an activity is forgotten by the next one.
    r = invoke({"--epochs", "1"}, []() -> int {
        try {
            Doing doing("trying");
            throw std::runtime_error("handled");
        } catch (const std::runtime_error&) {
        }
        Doing later("later");
        throw std::runtime_error("bad");
    });
    EXPECT_EQ(r.err, "tool: error: later: internal error: bad\n");
}

TEST(Cli, SimilarOptionsByEditDistance) {
    CLI::App app;
    int x = 0;
    app.add_option("--epochs", x);
    app.add_option("--eval-every", x);
    app.add_option("--momentum", x);
    EXPECT_EQ(cli::similar_options(app, "--epoch"), std::vector<std::string>{"--epochs"});
    EXPECT_EQ(cli::similar_options(app, "--momentun"), std::vector<std::string>{"--momentum"});
    EXPECT_TRUE(cli::similar_options(app, "--xyz").empty());
}

// JSON has no NaN or infinity: the programs' reports write null instead, and a
// reader (Python's json module, jq) gets a document it can parse.
TEST(CliJson, NumbersThatJsonCannotHoldBecomeNull) {
    EXPECT_EQ(cli::json_number(0.25).dump(), "0.25");
    EXPECT_EQ(cli::json_number(-3).dump(), "-3.0");
    EXPECT_TRUE(cli::json_number(std::nan("")).is_null());
    EXPECT_TRUE(cli::json_number(std::numeric_limits<double>::infinity()).is_null());
    EXPECT_TRUE(cli::json_number(-std::numeric_limits<double>::infinity()).is_null());
    nlohmann::json report = {{"ratio", cli::json_number(std::nan(""))}, {"gain", cli::json_number(2.0)}};
    EXPECT_EQ(report.dump(), "{\"gain\":2.0,\"ratio\":null}");
    EXPECT_TRUE(cli::json_text_or_null("").is_null());
    EXPECT_EQ(cli::json_text_or_null("a.h5").get<std::string>(), "a.h5");
}

// A peer that went away while this process was stopped: the next write to its socket
// must fail with EPIPE, which the collectives turn into an error with a message, and
// not kill the program with SIGPIPE (exit 141, no word).
TEST(Cli, WritesToAClosedSocketFailInsteadOfKilling) {
    int written = 0, error = 0;
    const Outcome r = invoke({"--epochs", "1"}, [&] {
        int pair[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return 3;
        ::close(pair[1]);
        written = static_cast<int>(::write(pair[0], "x", 1));
        error = errno;
        ::close(pair[0]);
        return 0;
    });
    EXPECT_EQ(r.code, 0);
    EXPECT_EQ(written, -1);
    EXPECT_EQ(error, EPIPE);
}
