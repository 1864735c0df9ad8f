// Writing a file under a temporary name and renaming it into place, so that a
// reader never sees a half-written file under the final name.
#pragma once

#include <string>

namespace acc::io {

class AtomicPath {
public:
    /// Creates, beside `destination` (same directory, so rename is atomic), a new
    /// private directory `.<name>.tmp-<pid>-<random>` (a name over 200 bytes: its
    /// first 160, `~` and a hash of the whole, to stay within 255; mode 0700, created
    /// exclusively) and names the temporary file inside it, so nothing planted in
    /// the directory can redirect the write. Temporary entries of the same
    /// destination left by a process that no longer runs are removed first.
    explicit AtomicPath(std::string destination);
    ~AtomicPath();
    AtomicPath(const AtomicPath&) = delete;
    AtomicPath& operator=(const AtomicPath&) = delete;

    const std::string& temp() const { return temp_; }
    const std::string& destination() const { return destination_; }
    /// Syncs the temporary file to disk and renames it over the destination.
    void commit();

private:
    std::string destination_;
    std::string directory_;  ///< the private temporary directory
    std::string temp_;
    bool committed_ = false;
};

/// Fails with a FileError if `path`'s directory does not exist or is not writable, or
/// `path` is a directory or a special file (refuse_special_file); otherwise removes
/// the stale temporary entries of `path` (see below).
void check_writable_destination(const std::string& path);

/// Fails with a FileError if `path` (links followed) is a device node, FIFO or socket:
/// outputs are regular files or new names. AtomicPath checks it too.
void refuse_special_file(const std::string& path);

/// Removes temporary entries (`.<name>.tmp-<pid>-...`) of `destination` whose
/// process no longer runs; returns how many were removed.
int remove_stale_temporaries(const std::string& destination);

/// The file name of a hidden companion of `destination` in its directory: "." and
/// its file name, then `suffix`; a file name over 200 bytes is shortened to its
/// first 160, "~" and a hash of the whole, so that the result fits in NAME_MAX
/// (255 bytes) with up to 40 bytes of suffix.
std::string companion_name(const std::string& destination, const std::string& suffix);

}  // namespace acc::io
