// Typed exceptions shared by every library area.
//
// Library code throws; a tool's main() catches once and prints
// "<tool>: error: <what()>". Messages name the file or option first
// ("grads.h5: dataset /epochs/norm is missing") so they read well after that prefix.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace acc {

/// A runtime failure: bad input file, lost peer, I/O error. Tools exit with 1.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A problem with how the program was invoked (option out of range, unknown
/// compressor spec). Tools exit with 2.
class UsageError : public Error {
public:
    using Error::Error;
};

/// A file that cannot be read, is of the wrong kind, or breaks its format.
/// what() starts with the file's path.
class FileError : public Error {
public:
    FileError(const std::string& path, const std::string& problem)
        : Error(path + ": " + problem), path_(path) {}
    const std::string& path() const noexcept { return path_; }

private:
    std::string path_;
};

}  // namespace acc

namespace acc {

/// Names what the program is doing while it lives ("building the model"), so that
/// an exception without context of its own (LibTorch's) can still say where it came
/// from once the stack has unwound. Nested ones stack; the innermost wins.
class Doing {
public:
    explicit Doing(std::string what) : previous_(current_), exceptions_(std::uncaught_exceptions()) {
        current_ = std::move(what);
        failed_.clear();  // an earlier failure was handled, or this one would not run
    }
    ~Doing() {
        if (std::uncaught_exceptions() > exceptions_ && failed_.empty()) failed_ = current_;
        current_ = std::move(previous_);
    }
    Doing(const Doing&) = delete;
    Doing& operator=(const Doing&) = delete;
    /// What was being done when the exception now being handled left it; empty if unknown.
    static const std::string& failed() { return failed_; }

private:
    std::string previous_;
    int exceptions_;
    static inline thread_local std::string current_;
    static inline thread_local std::string failed_;
};

}  // namespace acc
