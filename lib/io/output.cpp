#include "io/output.hpp"

#include "base/error.hpp"
#include "base/paths.hpp"
#include "io/atomic.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace acc::io {
namespace {

// HDF5's signature, at byte 0 or, after a user block, at 512, 1024, 2048, ...
constexpr char kHdf5Signature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};

bool has_hdf5_signature(int fd, off_t size) {
    for (off_t at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
        char head[8];
        if (::pread(fd, head, sizeof head, at) != static_cast<ssize_t>(sizeof head)) return false;
        if (std::memcmp(head, kHdf5Signature, sizeof head) == 0) return true;
    }
    return false;
}

// What stands at an output name may be replaced when it is new, empty, or an HDF5
// file this user may write; anything else was likely put there on purpose.
void check_replaceable(const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
    // Mode bits too: root may write anything, yet a file made 0444 was meant to stay.
    if (::access(path.c_str(), W_OK) != 0 || (st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0)
        throw FileError(path, "exists and is read-only; make it writable or give --force to replace it");
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw FileError(path, std::string("exists and cannot be read (") + std::strerror(errno) +
                                          "); give --force to replace it");
    const bool hdf5 = has_hdf5_signature(fd, st.st_size);
    ::close(fd);
    if (!hdf5)
        throw FileError(path, "exists and is not an HDF5 file; choose another name or give --force to replace it");
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    ::gmtime_r(&now, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return text;
}

std::string host_name() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "this host";
    return name;
}

// The holder's line, as it wrote it; a holder that has not written it yet is "another run".
std::string read_holder(int fd) {
    char text[512];
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    std::string holder = n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string();
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    // Shown in a message: a byte that is no printable ASCII (a terminal's control
    // sequence) is written as \xNN.
    std::string shown;
    for (char c : holder) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte >= 0x20 && byte < 0x7f) {
            shown += c;
        } else {
            char escaped[5];
            std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
            shown += escaped;
        }
    }
    return shown.empty() ? "another run" : shown;
}

// Whether what `fd` holds is a lock file's: empty, or the one line a holder writes,
// "<program> (process <pid> on <host>, started <time>)". Anything else at a lock's
// name (an output written there) is never removed as a stale lock.
bool holds_lock_line(int fd) {
    char text[512];
    const ssize_t n = ::pread(fd, text, sizeof text, 0);
    if (n <= 0) return n == 0;
    if (n == static_cast<ssize_t>(sizeof text)) return false;  // longer than any holder's line
    const std::string line(text, static_cast<size_t>(n));
    return line.find('\0') == std::string::npos && line.find(" (process ") != std::string::npos &&
           line.find(", started ") != std::string::npos;
}

// An output name must not be another run's lock file (".<name>.lock", held locked):
// writing there, even with --force, would break that run's claim. (Only such names:
// HDF5 itself locks the data files it has open.)
void check_not_held(const std::string& path) {
    const std::string name = fs::path(path).filename().string();
    const std::string suffix = ".lock";
    if (name.size() <= suffix.size() + 1 || name.front() != '.' ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return;
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    const bool held = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::flock(fd, LOCK_SH | LOCK_NB) != 0 &&
                      errno == EWOULDBLOCK;
    const std::string holder = held ? read_holder(fd) : "";
    ::close(fd);
    if (held)
        throw FileError(path, "is the lock file of a run writing its output (" + holder +
                                  "); --force does not replace it: write to another name");
}

// A lock file this run did not create is only ever opened for reading (flock
// needs no more), so that neither a hard link planted at its name nor another
// user's stale lock is written to. It must be a regular file with one link.
int open_existing_lock(const std::string& path, const std::string& lock) {
    const int fd = ::open(lock.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return -1;  // removed meanwhile: create it again
        throw FileError(path, "cannot open its lock file " + lock + ": " + std::strerror(errno) +
                                  (errno == ELOOP ? " (it is a symbolic link; remove it)" : ""));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        ::close(fd);
        throw FileError(path, "its lock file " + lock + " is not a regular file with one link (a link to another "
                                  "file, or not a file at all); remove it");
    }
    return fd;
}

// Whether `fd` is still the file the name `lock` leads to.
bool still_named(int fd, const std::string& lock) {
    struct stat held, named;
    return ::fstat(fd, &held) == 0 && ::lstat(lock.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
           held.st_ino == named.st_ino;
}

}  // namespace

OutputClaim::~OutputClaim() { release(); }

OutputClaim::OutputClaim(OutputClaim&& other) noexcept
    : lock_path_(std::move(other.lock_path_)), fd_(other.fd_), owned_(other.owned_) {
    other.lock_path_.clear();
    other.fd_ = -1;
}

OutputClaim& OutputClaim::operator=(OutputClaim&& other) noexcept {
    if (this != &other) {
        release();
        lock_path_ = std::move(other.lock_path_);
        fd_ = other.fd_;
        owned_ = other.owned_;
        other.lock_path_.clear();
        other.fd_ = -1;
    }
    return *this;
}

void OutputClaim::release() {
    if (fd_ < 0) return;
    // Unlinked while still locked: a run that opened the old file finds, once it
    // holds the lock, that the name no longer leads to it, and starts again.
    if (owned_ && still_named(fd_, lock_path_)) ::unlink(lock_path_.c_str());
    ::close(fd_);
    fd_ = -1;
    lock_path_.clear();
}

OutputClaim claim_output(const std::string& path, const std::string& program, bool force) {
    check_writable_destination(path);
    check_not_held(path);
    if (!force) check_replaceable(path);
    const fs::path parent = fs::path(path).parent_path();
    const std::string lock = (parent / companion_name(path, ".lock")).string();
    OutputClaim claim;
    for (int attempt = 0; attempt < 16; ++attempt) {
        // A new lock file is this run's to write; an existing one is another run's.
        int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        const bool created = fd >= 0;
        if (!created) {
            if (errno != EEXIST)
                throw FileError(path, "cannot open its lock file " + lock + ": " + std::strerror(errno));
            fd = open_existing_lock(path, lock);
            if (fd < 0) continue;
        }
        if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
            if (errno == EWOULDBLOCK) {
                const std::string holder = read_holder(fd);
                ::close(fd);
                throw FileError(path, "is being written by " + holder +
                                          "; wait until that run ends, or write to another name");
            }
            ::close(fd);
            if (created) ::unlink(lock.c_str());
            return claim;  // a file system without locks
        }
        if (!still_named(fd, lock)) {
            ::close(fd);  // its holder removed it while this run waited: take the new one
            continue;
        }
        if (!created) {
            // A stale lock: its run is gone. It is replaced by one of this run's
            // own where the directory allows; another user's in a sticky directory
            // stays, held as it is (a refused run then reads its old line). A file
            // that is no lock (an output written at the lock's name) stays as it is.
            if (!holds_lock_line(fd)) {
                ::close(fd);
                throw FileError(path, "its lock file's name " + lock +
                                          " holds something other than a lock (another output written there?); it "
                                          "was left as it is: move it away, or write to another name");
            }
            if (::unlink(lock.c_str()) == 0) {
                ::close(fd);
                continue;
            }
            claim.lock_path_ = lock;
            claim.fd_ = fd;
            claim.owned_ = false;
            return claim;
        }
        const std::string holder = program + " (process " + std::to_string(::getpid()) + " on " + host_name() +
                                   ", started " + utc_now() + ")\n";
        // Without the line (a full disk) a refused run still learns that another holds the name.
        if (::ftruncate(fd, 0) == 0) (void)!::pwrite(fd, holder.data(), holder.size(), 0);
        claim.lock_path_ = lock;
        claim.fd_ = fd;
        claim.owned_ = true;
        return claim;
    }
    throw FileError(path, "cannot take its lock file " + lock + ": it keeps being replaced");
}

std::vector<OutputClaim> claim_outputs(const std::vector<std::string>& paths, const std::string& program, bool force) {
    std::vector<OutputClaim> claims;
    for (const std::string& path : paths) {
        if (path.empty()) continue;
        create_parent_directories(path);
        claims.push_back(claim_output(path, program, force));
    }
    return claims;
}

}  // namespace acc::io
