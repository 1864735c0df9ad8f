// An output name held by one run from its start to its end, and what may stand at
// that name before the run replaces it.
#pragma once

#include <string>
#include <vector>

namespace acc::io {

/// One run's claim on an output name: an advisory lock (flock) on the hidden file
/// `.<name>.lock` beside it, which holds the program, process id, host and start time
/// (UTC) of the run. The lock goes with the process however it ends, so a killed
/// run never blocks the next; the lock file is removed when the claim ends. Only a
/// lock file the claim created is written; one found there is opened for reading,
/// and refused unless it is a regular file with one link.
class OutputClaim {
public:
    OutputClaim() = default;
    ~OutputClaim();
    OutputClaim(OutputClaim&& other) noexcept;
    OutputClaim& operator=(OutputClaim&& other) noexcept;
    OutputClaim(const OutputClaim&) = delete;
    OutputClaim& operator=(const OutputClaim&) = delete;

    /// The lock file, empty when the claim holds nothing.
    const std::string& lock_path() const { return lock_path_; }

private:
    friend OutputClaim claim_output(const std::string& path, const std::string& program, bool force);
    void release();
    std::string lock_path_;
    int fd_ = -1;
    bool owned_ = false;  // this run created the lock file, and removes it
};

/// Checks `path` as check_writable_destination does, then what stands there: an
/// existing file that is not empty must be an HDF5 file this user may write, unless
/// `force` (a file of another kind, or one made read-only, is worth keeping: the
/// FileError says so and names --force). Then claims the name for `program`; a name
/// another running process holds is refused with a FileError that names that run.
/// A file system without locks (some network mounts) is written without one.
OutputClaim claim_output(const std::string& path, const std::string& program, bool force);

/// A program's outputs claimed at its start: for each non-empty path, its missing
/// directories created, then claim_output. The claims end with the vector.
std::vector<OutputClaim> claim_outputs(const std::vector<std::string>& paths, const std::string& program, bool force);

}  // namespace acc::io
