// The root attributes every file of the toolkit carries (docs/formats.md, "Common attributes").
#pragma once

#include "base/provenance.hpp"

#include <functional>
#include <string>

namespace acc::io {

// Declared only: HDF5's headers (io/h5.hpp) reach just the files that read or write one.
class H5File;

/// Who wrote a file and how; filled by the tool, stored as root attributes.
using acc::Provenance;

struct FileHeader {
    std::string format;  ///< e.g. "accordion.grads"
    int major = 1;       ///< readers refuse a newer major version
    int minor = 0;       ///< minor versions only add optional content
    Provenance provenance;
    std::string created;  ///< UTC time, ISO 8601
};

/// Writes format, format_version ("MAJOR.MINOR"), producer, command_line and created.
void write_header(H5File& file, const FileHeader& header);

/// Creates a whole file in one go: `temp_path` (an AtomicPath's temporary name) is
/// created, messages name `path`, and the common attributes of `format`
/// MAJOR.MINOR are written from `header`'s provenance.
H5File create_with_header(const std::string& temp_path, const std::string& path, FileHeader header,
                          const char* format, int major, int minor);

/// Writes a whole file of `format` MAJOR.MINOR at `path`: checks that it can be
/// written there, creates it under a temporary name with the common attributes
/// from `header`'s provenance, lets `body` fill it, and renames it into place.
void write_file(const std::string& path, const FileHeader& header, const char* format, int major, int minor,
                const std::function<void(H5File&)>& body);

/// Reads and checks the root attributes: the file must be of `format` with a
/// major version no newer than `supported_major`. Missing producer or command
/// line are tolerated (reported as empty).
FileHeader read_header(const H5File& file, const std::string& format, int supported_major);

/// The current UTC time as "2026-11-22T10:00:00Z", or SOURCE_DATE_EPOCH's where it is set
/// (UsageError where it is not a whole number of seconds).
std::string utc_now();

}  // namespace acc::io
