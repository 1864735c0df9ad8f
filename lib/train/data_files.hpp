// Readers for the dataset files on disk, without LibTorch: MNIST-style IDX files
// (raw or gzip), CIFAR-10/100 binary batches and whitespace-tokenized text.
// Every problem throws acc::FileError naming the file and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc::train {

/// Images as unsigned bytes, count x channels x height x width, with their labels.
struct ImageSet {
    std::int64_t count = 0;
    std::int64_t channels = 0;
    std::int64_t height = 0;
    std::int64_t width = 0;
    std::vector<std::uint8_t> pixels;
    std::vector<std::int64_t> labels;  ///< in [0, classes)
};

/// `dir/name.gz` if it exists, else `dir/name` if it exists; otherwise throws a
/// FileError naming both and saying what `what` should have been there.
std::string find_data_file(const std::string& dir, const std::string& name, const std::string& what);

/// Reads an IDX image file (magic 0x00000803) and its label file (0x00000801),
/// each raw or gzip-compressed. `limit` > 0 reads only the first `limit` samples.
/// Labels must lie in [0, classes).
ImageSet read_idx(const std::string& images_path, const std::string& labels_path, std::int64_t limit,
                  std::int64_t classes);

/// Reads CIFAR binary batches: records of `label_bytes` label bytes (the label
/// used is the last one: CIFAR-100's fine label) and 3x32x32 pixels, channel-major.
/// `limit` > 0 reads only the first `limit` records over all files.
ImageSet read_cifar(const std::vector<std::string>& paths, int label_bytes, std::int64_t classes, std::int64_t limit);

/// Whitespace-separated tokens of a text file, with "<eos>" after every line (as
/// PyTorch's word-language-model example reads WikiText-2). `limit` > 0 keeps
/// only the first `limit` tokens.
std::vector<std::string> read_tokens(const std::string& path, std::int64_t limit);

}  // namespace acc::train
