#include "io/atomic.hpp"

#include "base/error.hpp"

#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace acc::io {
namespace {

std::string directory_of(const std::string& path) {
    fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? "." : parent.string();
}

void sync_path(const std::string& path, int flags) {
    int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
    }
}

// FNV-1a: the same digits in every run and build, so that a later run finds a
// killed run's temporaries of the same destination.
std::string name_hash(const std::string& name) {
    std::uint64_t h = 14695981039346656037ull;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
    return text;
}

// The temporary directory: the companion ".<name>.tmp-", then a pid and a random suffix (up to 29 bytes).
std::string temp_prefix(const std::string& destination) { return companion_name(destination, ".tmp-"); }

// A process that no longer runs cannot be writing its temporary file.
bool process_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace

std::string companion_name(const std::string& destination, const std::string& suffix) {
    // An output's own name may take all of NAME_MAX.
    std::string name = fs::path(destination).filename().string();
    if (name.size() > 200) name = name.substr(0, 160) + "~" + name_hash(name);
    return "." + name + suffix;
}

void refuse_special_file(const std::string& path) {
    // The finished file is renamed over the name: a device node or FIFO there would be
    // replaced (as root, /dev/full itself). Links are followed to what they name.
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status) && !fs::is_directory(status))
        throw FileError(path, "is not a regular file (a device, FIFO or socket); an output is a regular file or a new name");
}

int remove_stale_temporaries(const std::string& destination) {
    const std::string prefix = temp_prefix(destination);
    int removed = 0;
    std::error_code ec;
    for (fs::directory_iterator it(directory_of(destination), ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        // Only our own pattern: prefix, a process id, '-', anything.
        size_t digits = 0;
        while (prefix.size() + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[prefix.size() + digits])))
            ++digits;
        if (digits == 0 || digits > 9 || prefix.size() + digits >= name.size() || name[prefix.size() + digits] != '-')
            continue;
        const pid_t pid = static_cast<pid_t>(std::stol(name.substr(prefix.size(), digits)));
        if (pid == ::getpid() || !process_gone(pid)) continue;
        std::error_code remove_ec;
        // symlink_status: a planted link is removed itself, never followed.
        if (fs::is_directory(fs::symlink_status(it->path(), remove_ec)))
            fs::remove_all(it->path(), remove_ec);
        else
            fs::remove(it->path(), remove_ec);
        if (!remove_ec) ++removed;
    }
    return removed;
}

AtomicPath::AtomicPath(std::string destination) : destination_(std::move(destination)) {
    refuse_special_file(destination_);
    remove_stale_temporaries(destination_);
    fs::path dest(destination_);
    const fs::path parent = dest.parent_path();
    std::random_device entropy;
    std::uniform_int_distribution<unsigned long long> pick;
    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    for (int attempt = 0;; ++attempt) {
        unsigned long long r = pick(entropy);
        std::string suffix;
        for (int i = 0; i < 12; ++i, r /= 36) suffix += digits[r % 36];
        fs::path dir = parent / (temp_prefix(destination_) + std::to_string(::getpid()) + "-" + suffix);
        // mkdir never follows a link and fails if the name exists: the directory is ours.
        if (::mkdir(dir.c_str(), 0700) == 0) {
            directory_ = dir.string();
            break;
        }
        if (errno != EEXIST || attempt >= 16)
            throw FileError(destination_, std::string("cannot create a temporary file beside it: ") + std::strerror(errno));
    }
    temp_ = (fs::path(directory_) / dest.filename()).string();
}

AtomicPath::~AtomicPath() {
    if (!committed_) ::unlink(temp_.c_str());
    ::rmdir(directory_.c_str());
}

void AtomicPath::commit() {
    sync_path(temp_, O_RDONLY);
    if (::rename(temp_.c_str(), destination_.c_str()) != 0)
        throw FileError(destination_, std::string("cannot move the finished file into place: ") + std::strerror(errno));
    committed_ = true;
    ::rmdir(directory_.c_str());
    sync_path(directory_of(destination_), O_RDONLY | O_DIRECTORY);
}

void check_writable_destination(const std::string& path) {
    if (path.empty()) throw UsageError("output file name is empty");
    std::string dir = directory_of(path);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) throw FileError(path, "directory " + dir + " does not exist");
    if (::access(dir.c_str(), W_OK) != 0) throw FileError(path, "directory " + dir + " is not writable");
    if (fs::is_directory(path, ec)) throw FileError(path, "is a directory");
    refuse_special_file(path);
    // Programs call this when they start: what a killed run left goes now.
    remove_stale_temporaries(path);
}

}  // namespace acc::io
