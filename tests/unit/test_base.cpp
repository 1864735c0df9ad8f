// Text helpers used in messages and summaries.
#include "base/text.hpp"

#include <gtest/gtest.h>

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
