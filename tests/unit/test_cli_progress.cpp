// The progress reporter: what the live line and the plain lines say, and when.
#include "cli/progress.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <unistd.h>

using acc::cli::Progress;

namespace {

struct Fixture {
    double now = 100;
    std::ostringstream terminal;
    std::vector<std::string> lines;

    Progress make(Progress::Style style, double interval = 30) {
        Progress::Options o;
        o.style = style;
        o.interval = interval;
        o.unit = "images";
        o.terminal = &terminal;
        o.log = [this](const std::string& line) { lines.push_back(line); };
        o.clock = [this] { return now; };
        return Progress(o);
    }
};

}  // namespace

TEST(Progress, StatusLine) {
    Fixture f;
    Progress p = f.make(Progress::Style::lines);
    p.begin_run(20);
    p.begin_epoch(0, 2, 10);
    f.now += 2;
    p.step(100, 0.5);
    f.now += 2;
    p.step(100, 0.3);
    // 200 images in 4 s; 2 of 20 steps took 4 s, so 18 steps take 36 s more.
    EXPECT_EQ(p.status(), "epoch 0 (1/2)  step 2/10  loss 0.4000  50 images/s  0:36 left");
}

TEST(Progress, TimeLeftCountsOnlyTrainingTime) {
    Fixture f;
    Progress p = f.make(Progress::Style::quiet);
    p.begin_run(4);
    p.begin_epoch(0, 2, 2);
    f.now += 10;
    p.step(1, 1.0);
    p.step(1, 1.0);
    p.end_epoch();
    f.now += 1000;  // evaluation, not counted
    p.begin_epoch(1, 2, 2);
    f.now += 10;
    p.step(1, 1.0);
    EXPECT_EQ(p.status(), "epoch 1 (2/2)  step 1/2  loss 1.0000  0 images/s  0:07 left");
}

TEST(Progress, PlainLinesAtIntervals) {
    Fixture f;
    Progress p = f.make(Progress::Style::lines, 30);
    p.begin_run(100);
    p.begin_epoch(3, 10, 100);
    for (int i = 0; i < 100; ++i) {
        f.now += 1;
        p.step(10, 1.0);
    }
    p.end_epoch();
    ASSERT_EQ(f.lines.size(), 3u);  // at 30, 60 and 90 s
    EXPECT_EQ(f.lines[0].rfind("epoch 3 (4/10)  step 30/100  loss 1.0000  10 images/s", 0), 0u) << f.lines[0];
    EXPECT_TRUE(f.terminal.str().empty());
}

TEST(Progress, LiveLineIsRedrawnInPlaceAndCleared) {
    Fixture f;
    {
        Progress p = f.make(Progress::Style::live);
        p.begin_run(3);
        p.begin_epoch(0, 1, 3);
        for (int i = 0; i < 3; ++i) {
            f.now += 1;
            p.step(5, 2.0);
        }
        p.end_epoch();
    }
    const std::string out = f.terminal.str();
    EXPECT_NE(out.find("\r\033[Kepoch 0 (1/1)  step 1/3"), std::string::npos) << out;
    EXPECT_NE(out.find("\r\033[Kepoch 0 (1/1)  step 3/3"), std::string::npos) << out;
    EXPECT_EQ(out.substr(out.size() - 4), "\r\033[K");
    EXPECT_TRUE(f.lines.empty());
}

TEST(Progress, QuietPrintsNothing) {
    Fixture f;
    Progress p = f.make(Progress::Style::quiet, 0);
    p.begin_run(2);
    p.begin_epoch(0, 1, 2);
    f.now += 100;
    p.step(1, 1.0);
    p.end_epoch();
    EXPECT_TRUE(f.lines.empty());
    EXPECT_TRUE(f.terminal.str().empty());
}

TEST(Progress, Durations) {
    EXPECT_EQ(Progress::duration(0), "0:00");
    EXPECT_EQ(Progress::duration(65.4), "1:05");
    EXPECT_EQ(Progress::duration(3725), "1:02:05");
    EXPECT_EQ(Progress::duration(-1), "-");
    EXPECT_EQ(Progress::duration(1.0 / 0.0), "-");
}

TEST(Progress, ItemsOfASweep) {
    Fixture f;
    {
        Progress p = f.make(Progress::Style::live);
        p.begin_items(3, 4);
        p.start_item("allreduce 4 KiB");
        EXPECT_EQ(p.status(), "allreduce 4 KiB  item 1/3  - left");
        f.now += 2;
        p.finish_item();
        p.start_item("allreduce 64 KiB", 2);
        // 1 of 4 units of work took 2 s: 3 more take 6 s.
        EXPECT_EQ(p.status(), "allreduce 64 KiB  item 2/3  0:06 left");
        f.now += 4;
        p.finish_item();
        p.start_item("allreduce 1 MiB");
        EXPECT_EQ(p.status(), "allreduce 1 MiB  item 3/3  0:02 left");
        p.finish_item();
    }
    const std::string out = f.terminal.str();
    EXPECT_NE(out.find("\r\033[Kallreduce 4 KiB  item 1/3"), std::string::npos) << out;
    EXPECT_NE(out.find("\r\033[Kallreduce 64 KiB  item 2/3"), std::string::npos) << out;
    EXPECT_EQ(out.substr(out.size() - 4), "\r\033[K");  // each item's line cleared for its result
    EXPECT_TRUE(f.lines.empty());
}

TEST(Progress, ItemsInPlainLinesAndQuiet) {
    Fixture f;
    Progress lines = f.make(Progress::Style::lines, 30);
    lines.begin_items(4, 4);
    for (int i = 0; i < 4; ++i) {
        lines.start_item("item" + std::to_string(i));
        f.now += 20;
        lines.finish_item();
    }
    // Items start at 0, 20, 40 and 60 s: a line at 40 s (30 s after the start)
    // only, as 60 s is 20 s after it; 2 items took 40 s, so 2 more take 40 s.
    ASSERT_EQ(f.lines.size(), 1u);
    EXPECT_EQ(f.lines[0], "item2  item 3/4  0:40 left");
    EXPECT_TRUE(f.terminal.str().empty());
    Progress quiet = f.make(Progress::Style::quiet, 0);
    quiet.begin_items(1, 1);
    quiet.start_item("x");
    quiet.finish_item();
    EXPECT_EQ(f.lines.size(), 1u);
    EXPECT_TRUE(f.terminal.str().empty());
}

TEST(Progress, LauncherSaysItsStderrIsATerminal) {
    // A rank started by --nproc writes to a pipe; its launcher's word counts.
    ::setenv("ACC_PROGRESS_TERMINAL", "1", 1);
    ::setenv("TERM", "xterm", 1);
    EXPECT_TRUE(Progress::stderr_is_terminal());
    ::setenv("TERM", "dumb", 1);
    EXPECT_FALSE(Progress::stderr_is_terminal());
    ::unsetenv("ACC_PROGRESS_TERMINAL");
    ::setenv("TERM", "xterm", 1);
    EXPECT_EQ(Progress::stderr_is_terminal(), ::isatty(2) == 1);
}
