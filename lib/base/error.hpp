// Typed exceptions shared by every library area.
//
// Library code throws; a tool's main() catches once and prints
// "<tool>: error: <what()>". Messages name the file or option first
// ("grads.h5: dataset /epochs/norm is missing") so they read well after that prefix.
#pragma once

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
