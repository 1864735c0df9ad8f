#include "train/data_files.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

namespace acc::train {
namespace {

bool is_file(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Reads raw or gzip-compressed files through zlib, which passes raw files through unchanged.
class ZFile {
public:
    explicit ZFile(std::string path) : path_(std::move(path)) {
        if (!is_file(path_)) throw FileError(path_, std::string("cannot open (") + std::strerror(ENOENT) + ")");
        file_ = gzopen(path_.c_str(), "rb");
        if (!file_) throw FileError(path_, std::string("cannot open (") + std::strerror(errno) + ")");
        gzbuffer(file_, 1 << 17);
    }
    ~ZFile() {
        if (file_) gzclose(file_);
    }
    ZFile(const ZFile&) = delete;
    ZFile& operator=(const ZFile&) = delete;

    /// Reads up to `size` bytes; returns how many were read (fewer at the end of the data).
    size_t read(void* out, size_t size) {
        size_t done = 0;
        auto* bytes = static_cast<unsigned char*>(out);
        while (done < size) {
            unsigned chunk = static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
            int got = gzread(file_, bytes + done, chunk);
            if (got < 0) {
                int code = 0;
                const char* message = gzerror(file_, &code);
                throw FileError(path_, std::string("truncated or corrupt gzip data (") + message + ")");
            }
            if (got == 0) {
                int code = 0;
                const char* message = gzerror(file_, &code);
                if (code != Z_OK && code != Z_STREAM_END)
                    throw FileError(path_, std::string("truncated or corrupt gzip data (") + message + ")");
                break;
            }
            done += static_cast<size_t>(got);
        }
        return done;
    }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    gzFile file_ = nullptr;
};

std::uint32_t big_endian(const unsigned char* p) {
    return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

std::string hex_bytes(const unsigned char* p, size_t n) {
    std::string out;
    char buffer[4];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(buffer, sizeof buffer, i ? " %02x" : "%02x", p[i]);
        out += buffer;
    }
    return out;
}

// Reads an IDX header of unsigned bytes with `ndim` dimensions and returns the dimensions.
std::vector<std::int64_t> read_idx_header(ZFile& file, int ndim, const std::string& kind) {
    unsigned char magic[4];
    size_t got = file.read(magic, 4);
    if (got < 4)
        throw FileError(file.path(), "truncated: ends inside the IDX header (expected an IDX " + kind + " file)");
    if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] != ndim)
        throw FileError(file.path(), "is not an IDX " + kind + " file: expected magic bytes 00 00 08 0" +
                                         std::to_string(ndim) + " (unsigned bytes, " + std::to_string(ndim) +
                                         " dimensions), found " + hex_bytes(magic, 4));
    std::vector<unsigned char> raw(4 * static_cast<size_t>(ndim));
    if (file.read(raw.data(), raw.size()) < raw.size())
        throw FileError(file.path(), "truncated: ends inside the IDX header");
    std::vector<std::int64_t> dims;
    for (int d = 0; d < ndim; ++d) {
        std::uint32_t v = big_endian(raw.data() + 4 * d);
        if (v == 0 || v > (1u << 30))
            throw FileError(file.path(), "IDX header gives dimension " + std::to_string(d) + " as " +
                                             std::to_string(v) + "; expected 1..2^30");
        dims.push_back(v);
    }
    return dims;
}

void read_exactly(ZFile& file, void* out, size_t size, const std::string& what) {
    size_t got = file.read(out, size);
    if (got < size)
        throw FileError(file.path(), "truncated: expected " + with_commas(static_cast<std::int64_t>(size)) +
                                         " bytes of " + what + ", found " +
                                         with_commas(static_cast<std::int64_t>(got)));
}

void check_labels(const std::string& path, const std::vector<std::int64_t>& labels, std::int64_t classes,
                  std::int64_t first_index) {
    for (size_t i = 0; i < labels.size(); ++i)
        if (labels[i] < 0 || labels[i] >= classes)
            throw FileError(path, "label " + std::to_string(labels[i]) + " of sample " +
                                      std::to_string(first_index + static_cast<std::int64_t>(i)) +
                                      " is out of range (expected 0.." + std::to_string(classes - 1) + ")");
}

}  // namespace

std::string find_data_file(const std::string& dir, const std::string& name, const std::string& what) {
    const std::string base = dir + "/" + name;
    if (is_file(base + ".gz")) return base + ".gz";
    if (is_file(base)) return base;
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0)
        throw FileError(dir, "no such directory (expected " + what + " here; see --data-dir)");
    throw FileError(base, "no such file, nor " + name + ".gz (expected " + what + ")");
}

ImageSet read_idx(const std::string& images_path, const std::string& labels_path, std::int64_t limit,
                  std::int64_t classes) {
    ZFile images(images_path);
    auto dims = read_idx_header(images, 3, "image");
    ZFile labels(labels_path);
    auto label_dims = read_idx_header(labels, 1, "label");
    if (label_dims[0] != dims[0])
        throw FileError(labels_path, "holds " + with_commas(label_dims[0]) + " labels but " + images_path + " holds " +
                                         with_commas(dims[0]) + " images");
    ImageSet set;
    set.count = limit > 0 ? std::min(limit, dims[0]) : dims[0];
    set.channels = 1;
    set.height = dims[1];
    set.width = dims[2];
    set.pixels.resize(static_cast<size_t>(set.count * set.height * set.width));
    read_exactly(images, set.pixels.data(), set.pixels.size(),
                 "image data (" + with_commas(set.count) + " images of " + std::to_string(set.height) + "x" +
                     std::to_string(set.width) + ")");
    std::vector<std::uint8_t> raw(static_cast<size_t>(set.count));
    read_exactly(labels, raw.data(), raw.size(), "labels (" + with_commas(set.count) + " labels)");
    set.labels.assign(raw.begin(), raw.end());
    check_labels(labels_path, set.labels, classes, 0);
    return set;
}

ImageSet read_cifar(const std::vector<std::string>& paths, int label_bytes, std::int64_t classes, std::int64_t limit) {
    constexpr std::int64_t kPixels = 3 * 32 * 32;
    const std::int64_t record = label_bytes + kPixels;
    ImageSet set;
    set.channels = 3;
    set.height = 32;
    set.width = 32;
    for (const auto& path : paths) {
        if (limit > 0 && set.count >= limit) break;
        struct stat st;
        if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
            throw FileError(path, "no such file (expected a CIFAR binary batch; see --data-dir)");
        const std::int64_t size = st.st_size;
        if (size == 0 || size % record != 0)
            throw FileError(path, "size " + with_commas(size) + " bytes is not a whole number of " +
                                      std::to_string(record) + "-byte CIFAR records (truncated or not a CIFAR-" +
                                      (label_bytes == 1 ? "10" : "100") + " binary file)");
        std::int64_t records = size / record;
        if (limit > 0) records = std::min(records, limit - set.count);
        std::ifstream in(path, std::ios::binary);
        if (!in) throw FileError(path, std::string("cannot open (") + std::strerror(errno) + ")");
        std::vector<unsigned char> buffer(static_cast<size_t>(records * record));
        if (!in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size())))
            throw FileError(path, "read error");
        std::vector<std::int64_t> labels(static_cast<size_t>(records));
        const size_t offset = set.pixels.size();
        set.pixels.resize(offset + static_cast<size_t>(records * kPixels));
        for (std::int64_t r = 0; r < records; ++r) {
            const unsigned char* rec = buffer.data() + r * record;
            labels[r] = rec[label_bytes - 1];
            std::memcpy(set.pixels.data() + offset + r * kPixels, rec + label_bytes, kPixels);
        }
        check_labels(path, labels, classes, 0);
        set.labels.insert(set.labels.end(), labels.begin(), labels.end());
        set.count += records;
    }
    return set;
}

std::vector<std::string> read_tokens(const std::string& path, std::int64_t limit) {
    if (!is_file(path)) throw FileError(path, std::string("cannot open (") + std::strerror(ENOENT) + ")");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(path, std::string("cannot open (") + std::strerror(errno) + ")");
    std::vector<std::string> tokens;
    std::string line;
    std::int64_t line_number = 0;
    while (std::getline(in, line)) {
        ++line_number;
        if (line.find('\0') != std::string::npos)
            throw FileError(path, "line " + std::to_string(line_number) +
                                      " holds a NUL byte; expected a text file of whitespace-separated tokens");
        std::istringstream words(line);
        std::string word;
        while (words >> word) tokens.push_back(word);
        tokens.push_back("<eos>");
        if (limit > 0 && static_cast<std::int64_t>(tokens.size()) >= limit) {
            tokens.resize(static_cast<size_t>(limit));
            break;
        }
    }
    if (in.bad()) throw FileError(path, "read error");
    if (tokens.empty()) throw FileError(path, "holds no tokens; expected a text file of whitespace-separated tokens");
    return tokens;
}

}  // namespace acc::train
