// What the unit tests share: a scratch directory, the message of an error or of
// a usage error, and the check that every rank of a multi-rank test succeeded.
#pragma once

#include "base/error.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace acc::test {

/// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "acc-test-XXXXXX").string();
        path_ = mkdtemp(pattern.data());
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    const std::string& path() const { return path_; }
    std::string file(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
    std::vector<std::string> entries() const {
        std::vector<std::string> out;
        for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
        return out;
    }

private:
    std::string path_;
};

/// The message of the acc::Error that `action` throws, or "(no error)".
inline std::string error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const acc::Error& e) {
        return e.what();
    }
    return "(no error)";
}

/// The message of the acc::UsageError that `action` throws, or "(no usage error)".
inline std::string usage_error_of(const std::function<void()>& action) {
    try {
        action();
    } catch (const acc::UsageError& e) {
        return e.what();
    }
    return "(no usage error)";
}

/// Expects every rank's error message ("" for a rank that succeeded, as
/// ThreadGroup::run_collect and gloo_ranks return them) to be empty.
inline void expect_all_ok(const std::vector<std::string>& errors) {
    for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace acc::test

/// Expects `text` to contain `fragment`, printing `text` if it does not.
#define EXPECT_CONTAINS(text, fragment) EXPECT_NE(std::string(text).find(fragment), std::string::npos) << (text)
