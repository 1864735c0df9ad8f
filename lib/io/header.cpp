#include "io/header.hpp"
#include "io/h5.hpp"

#include "base/error.hpp"
#include "io/atomic.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace acc::io {

void write_header(H5File& file, const FileHeader& header) {
    file.write_attr("/", "format", header.format);
    file.write_attr("/", "format_version", std::to_string(header.major) + "." + std::to_string(header.minor));
    file.write_attr("/", "producer", header.provenance.producer);
    file.write_attr("/", "command_line", header.provenance.command_line);
    file.write_attr("/", "created", header.created.empty() ? utc_now() : header.created);
}

H5File create_with_header(const std::string& temp_path, const std::string& path, FileHeader header,
                          const char* format, int major, int minor) {
    H5File f = H5File::create(temp_path, path);
    header.format = format;
    header.major = major;
    header.minor = minor;
    write_header(f, header);
    return f;
}

void write_file(const std::string& path, const FileHeader& header, const char* format, int major, int minor,
                const std::function<void(H5File&)>& body) {
    check_writable_destination(path);
    AtomicPath atomic(path);
    H5File f = create_with_header(atomic.temp(), path, header, format, major, minor);
    body(f);
    f.close();
    atomic.commit();
}

FileHeader read_header(const H5File& file, const std::string& format, int supported_major) {
    if (!file.has_attr("/", "format"))
        file.fail("not an " + format + " file (it has no 'format' attribute; see docs/formats.md)");
    FileHeader h;
    h.format = file.read_attr_string("/", "format");
    if (h.format != format) file.fail("is an " + h.format + " file, expected an " + format + " file");
    if (!file.has_attr("/", "format_version")) file.fail("the 'format_version' attribute is missing");
    std::string version = file.read_attr_string("/", "format_version");
    int major = 0, minor = 0;
    char extra = 0;
    if (std::sscanf(version.c_str(), "%d.%d%c", &major, &minor, &extra) != 2 || major < 1 || minor < 0)
        file.fail("format_version '" + version + "' is not of the form MAJOR.MINOR");
    if (major > supported_major)
        file.fail("format version " + version + " is newer than this program reads (" + std::to_string(supported_major) +
                  ".x); use a newer release of the toolkit");
    h.major = major;
    h.minor = minor;
    if (file.has_attr("/", "producer")) h.provenance.producer = file.read_attr_string("/", "producer");
    if (file.has_attr("/", "command_line")) h.provenance.command_line = file.read_attr_string("/", "command_line");
    if (file.has_attr("/", "created")) h.created = file.read_attr_string("/", "created");
    return h;
}

std::string utc_now() {
    // SOURCE_DATE_EPOCH (seconds since 1970, the reproducible-builds convention) stands
    // for the clock, so that a command run twice writes the same bytes.
    std::time_t now = std::time(nullptr);
    if (const char* fixed = std::getenv("SOURCE_DATE_EPOCH"); fixed && *fixed) {
        char* end = nullptr;
        errno = 0;
        const long long seconds = std::strtoll(fixed, &end, 10);
        if (*end != '\0' || errno != 0 || seconds < 0)
            throw UsageError(std::string("SOURCE_DATE_EPOCH: must be a whole number of seconds since 1970, not '") +
                             fixed + "'");
        now = static_cast<std::time_t>(seconds);
    }
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buffer[32];
    std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buffer;
}

}  // namespace acc::io
