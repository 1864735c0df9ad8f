#include "io/atomic.hpp"

#include "base/error.hpp"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;

namespace acc::io {
namespace {

std::string directory_of(const std::string& path) {
    fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? "." : parent.string();
}

void sync_path(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

}  // namespace

AtomicPath::AtomicPath(std::string destination) : destination_(std::move(destination)) {
    static std::atomic<unsigned> counter{0};
    fs::path dest(destination_);
    fs::path temp = dest.parent_path() / ("." + dest.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                          "-" + std::to_string(counter++));
    temp_ = temp.string();
}

AtomicPath::~AtomicPath() {
    if (!committed_) ::unlink(temp_.c_str());
}

void AtomicPath::commit() {
    sync_path(temp_, O_RDONLY);
    if (::rename(temp_.c_str(), destination_.c_str()) != 0)
        throw FileError(destination_, std::string("cannot move the finished file into place: ") + std::strerror(errno));
    committed_ = true;
    sync_path(directory_of(destination_), O_RDONLY | O_DIRECTORY);
}

void check_writable_destination(const std::string& path) {
    if (path.empty()) throw UsageError("output file name is empty");
    std::string dir = directory_of(path);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw FileError(path, "directory " + dir + " does not exist");
    if (::access(dir.c_str(), W_OK) != 0) throw FileError(path, "directory " + dir + " is not writable");
    if (fs::is_directory(path, ec)) throw FileError(path, "is a directory");
}

}  // namespace acc::io
