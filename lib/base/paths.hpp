// Which files two command-line paths name, and making room for an output file.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace acc {

/// True when `a` and `b` name the same file: the same device and inode when both
/// exist (hard links, symbolic links, "./x" and "x"), else the same weakly
/// canonical path (so a file not written yet compares by where it will be).
bool same_file(const std::string& a, const std::string& b);

/// A path named by an option, e.g. {"--output", "out/g.h5"}.
using NamedPath = std::pair<std::string, std::string>;

/// Throws a UsageError naming both options when any output is the same file as
/// another output or an input, so that no run replaces what it reads or writes
/// twice. Empty paths are skipped.
void check_distinct_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

/// Creates the missing directories above the output file `path` (like mkdir -p);
/// throws a FileError naming `path` when that fails.
void create_parent_directories(const std::string& path);

/// Creates the directory `dir` and the missing ones above it; throws a FileError when that fails.
void create_directories(const std::string& dir);

}  // namespace acc
