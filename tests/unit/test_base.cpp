// Text helpers used in messages and summaries; bounded waits.
#include "base/clock.hpp"
#include "base/memory.hpp"
#include "base/text.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace acc;

TEST(Text, ThousandsSeparators) {
    EXPECT_EQ(with_commas(0), "0");
    EXPECT_EQ(with_commas(999), "999");
    EXPECT_EQ(with_commas(1000), "1,000");
    EXPECT_EQ(with_commas(11173962), "11,173,962");
    EXPECT_EQ(with_commas(-1234567), "-1,234,567");
}

TEST(Text, SiCounts) {
    EXPECT_EQ(si_count(12), "12");
    EXPECT_EQ(si_count(1500), "1.5 k");
    EXPECT_EQ(si_count(11173962), "11.2 M");
    EXPECT_EQ(si_count(3.2e9), "3.2 G");
}

TEST(Text, CommandLineQuotesWhatTheShellWouldSplit) {
    const char* argv[] = {"regime-detect", "a b.h5", "--eta", "0.5", "it's", ""};
    EXPECT_EQ(command_line(6, argv), "regime-detect 'a b.h5' --eta 0.5 'it'\\''s' ''");
}

TEST(Text, SplitKeepsEmptyFieldsAndJoinReverses) {
    EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
    EXPECT_EQ(join(split("x:y:z", ':'), ":"), "x:y:z");
    EXPECT_EQ(short_number(0.5), "0.5");
    EXPECT_EQ(short_number(1e-5), "1e-05");
}

TEST(Text, BytesInDecimalUnits) {
    EXPECT_EQ(bytes_text(0), "0 B");
    EXPECT_EQ(bytes_text(999), "999 B");
    EXPECT_EQ(bytes_text(1000), "1 kB");
    EXPECT_EQ(bytes_text(25.0 * 1024 * 1024), "26.2 MB");
    EXPECT_EQ(bytes_text(1.25e9), "1.25 GB");
    EXPECT_EQ(bytes_text(3e15), "3e+03 TB");
}

// Paths compare by the file they name, not by their spelling.
#include "base/error.hpp"
#include "base/paths.hpp"

#include "test_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

using acc::test::TempDir;

// A wait for the device (an event that never completes where a collective hangs) ends
// at its timeout; without one it lasts until the condition holds.
TEST(Clock, WaitUntilEndsAtItsTimeout) {
    int asks = 0;
    const SteadyClock::time_point start = SteadyClock::now();
    EXPECT_FALSE(wait_until(
        [&] {
            ++asks;
            return false;
        },
        0.05));
    const double waited = seconds_since(start);
    EXPECT_GE(waited, 0.05);
    EXPECT_LT(waited, 10.0);
    EXPECT_GT(asks, 1);
    int calls = 0;
    EXPECT_TRUE(wait_until([&] { return ++calls == 50; }, 0.0));
    EXPECT_EQ(calls, 50);
    EXPECT_TRUE(wait_until([] { return true; }, 1e-9));
}

TEST(Paths, SameFileByIdentityNotSpelling) {
    TempDir t;
    std::ofstream(t.file("a.h5")) << "x";
    std::filesystem::create_directory(t.file("sub"));
    std::filesystem::create_hard_link(t.file("a.h5"), t.file("hard.h5"));
    std::filesystem::create_symlink(t.file("a.h5"), t.file("soft.h5"));
    EXPECT_TRUE(same_file(t.file("a.h5"), t.file("sub/../a.h5")));
    EXPECT_TRUE(same_file(t.file("a.h5"), t.file("hard.h5")));
    EXPECT_TRUE(same_file(t.file("soft.h5"), t.file("a.h5")));
    EXPECT_TRUE(same_file(t.file("new.h5"), t.file("./sub/../new.h5")));  // neither exists yet
    EXPECT_FALSE(same_file(t.file("a.h5"), t.file("new.h5")));
    EXPECT_FALSE(same_file(t.file("x.h5"), t.file("y.h5")));
}

TEST(Paths, DistinctFilesNamesBothOptions) {
    TempDir t;
    std::ofstream(t.file("in.h5")) << "x";
    EXPECT_NO_THROW(check_distinct_files({{"--from", t.file("in.h5")}}, {{"--output", t.file("out.h5")}, {"--x", ""}}));
    try {
        check_distinct_files({{"--from", t.file("in.h5")}}, {{"--output", t.file("./in.h5")}});
        FAIL() << "an output that replaces its input was accepted";
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("--output"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--from"), std::string::npos) << e.what();
    }
    EXPECT_THROW(check_distinct_files({}, {{"--output", t.file("o.h5")}, {"--checkpoint", t.file("sub/../o.h5")}}), UsageError);
}

TEST(Paths, CreatesMissingParentDirectories) {
    TempDir t;
    create_parent_directories(t.file("a/b/c.h5"));
    EXPECT_TRUE(std::filesystem::is_directory(t.file("a/b")));
    create_parent_directories("plain-name.h5");  // the working directory: nothing to do
    std::ofstream(t.file("file")) << "x";
    EXPECT_THROW(create_parent_directories(t.file("file/c.h5")), FileError);
}

// What comm-profile checks a sweep against: the machine's available memory, and
// no more than an address-space limit leaves this process.
TEST(Memory, AvailableMemoryFollowsTheAddressSpaceLimit) {
    const auto room = available_memory_bytes();
    ASSERT_TRUE(room.has_value());
    EXPECT_GT(*room, 0);
    const pid_t child = fork();
    if (child == 0) {
        // 256 MiB above what the process maps now: at most that much is available.
        const auto before = available_memory_bytes();
        rlimit as{};
        getrlimit(RLIMIT_AS, &as);
        long long mapped = 0;
        if (FILE* status = std::fopen("/proc/self/status", "r")) {
            char line[256];
            while (std::fgets(line, sizeof line, status))
                if (std::sscanf(line, "VmSize: %lld kB", &mapped) == 1) break;
            std::fclose(status);
        }
        as.rlim_cur = static_cast<rlim_t>(mapped * 1024 + (256ll << 20));
        if (setrlimit(RLIMIT_AS, &as) != 0) _exit(3);
        const auto after = available_memory_bytes();
        const bool ok = before && after && *after <= (256ll << 20) + (16ll << 20) && *after < *before;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
