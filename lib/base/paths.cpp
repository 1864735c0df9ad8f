#include "base/paths.hpp"

#include "base/error.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

namespace fs = std::filesystem;

namespace acc {

bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    std::error_code ea, eb;
    const fs::path ca = fs::weakly_canonical(fs::absolute(a), ea);
    const fs::path cb = fs::weakly_canonical(fs::absolute(b), eb);
    if (ea || eb) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
    return ca == cb;
}

void check_distinct_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
    for (size_t i = 0; i < outputs.size(); ++i) {
        const auto& [option, path] = outputs[i];
        if (path.empty()) continue;
        for (const auto& [in_option, in_path] : inputs)
            if (!in_path.empty() && same_file(path, in_path))
                throw UsageError(option + " " + path + ": is the same file as " + in_option + " " + in_path +
                                 "; writing it would replace the input");
        for (size_t j = 0; j < i; ++j)
            if (!outputs[j].second.empty() && same_file(path, outputs[j].second))
                throw UsageError(option + " " + path + ": is the same file as " + outputs[j].first + " " +
                                 outputs[j].second + "; each output needs a file of its own");
    }
}

void create_directories(const std::string& dir) {
    if (dir.empty()) return;
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return;
    fs::create_directories(dir, ec);
    // create_directories reports an error when the path exists as a directory symlink.
    if (ec && !fs::is_directory(dir)) throw FileError(dir, "cannot create the directory: " + ec.message());
}

void create_parent_directories(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) return;
    std::error_code ec;
    if (fs::is_directory(parent, ec)) return;
    fs::create_directories(parent, ec);
    if (ec && !fs::is_directory(parent))
        throw FileError(path, "cannot create the directory " + parent.string() + ": " + ec.message());
}

}  // namespace acc
