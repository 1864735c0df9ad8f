// Writing a file under a temporary name and renaming it into place, so that a
// reader never sees a half-written file under the final name.
#pragma once

#include <string>

namespace acc::io {

class AtomicPath {
public:
    /// Picks a temporary name beside `destination` (same directory, so rename is atomic).
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
    std::string temp_;
    bool committed_ = false;
};

/// Fails with a FileError if `path`'s directory does not exist or is not writable.
void check_writable_destination(const std::string& path);

}  // namespace acc::io
