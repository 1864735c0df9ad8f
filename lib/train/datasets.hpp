// Datasets as batches of tensors: Fashion-MNIST/MNIST (IDX), CIFAR-10/100
// (binary, with the paper's augmentation and normalization), a text corpus for
// the language model, and a seeded synthetic set.
#pragma once

#include "train/config.hpp"
#include "train/data_files.hpp"
#include "train/models.hpp"
#include "train/sampling.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace acc::train {

/// The most bytes of images and labels a dataset copies to a GPU (Dataset::use_device).
inline constexpr std::int64_t kDeviceDataBytes = std::int64_t{2} << 30;

/// Fashion-MNIST's directory as Debian's dataset-fashion-mnist package installs it.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct DataInfo {
    std::string name;             ///< "fashion-mnist", "cifar10", ...
    std::string source;           ///< where it was read from, for messages
    DataShape shape;              ///< input shape per sample and class count (vocabulary size for text)
    std::int64_t train_size = 0;  ///< training samples (tokens for text)
    std::int64_t test_size = 0;
    std::string unit = "samples";  ///< what a sample is: "images", "tokens", "samples"
};

/// One step's data. For text, input and target are (sequence, streams) and
/// (sequence x streams) token ids and `samples` counts predicted tokens.
struct Batch {
    torch::Tensor input;
    torch::Tensor target;  ///< class indices, int64
    std::int64_t samples = 0;
};

/// The batches of one pass over a split, built when asked for.
class Batches {
public:
    virtual ~Batches() = default;
    virtual std::int64_t size() const = 0;
    virtual Batch get(std::int64_t index) const = 0;
};

class Dataset {
public:
    virtual ~Dataset() = default;
    const DataInfo& info() const { return info_; }
    /// The training batches of `epoch` for `shard`. Images: the shard's part of a
    /// permutation drawn from (seed, epoch), augmented with randomness drawn from
    /// (seed, epoch, rank, batch). Text: the shard's streams, in order.
    virtual std::unique_ptr<Batches> train(std::int64_t epoch, Shard shard, std::int64_t batch_size,
                                           std::uint64_t seed) const = 0;
    /// The whole test split, in order, without augmentation.
    virtual std::unique_ptr<Batches> test(std::int64_t batch_size) const = 0;
    /// Asks for batches on `device` (a GPU) from then on, with the same values: a
    /// dataset that fits there (kDeviceDataBytes) and needs no per-sample work on
    /// the host keeps a copy of its splits there and gathers batches on the device.
    /// Others ignore it; their batches stay in host memory. The copy is a cache:
    /// the dataset's contents do not change, hence const.
    virtual void use_device(torch::Device /*device*/) const {}

protected:
    DataInfo info_;
};

/// Opens dataset `config.name` (see dataset_names()). File problems throw
/// FileError naming the file; a dataset without a default directory and no
/// --data-dir throws UsageError.
std::unique_ptr<Dataset> open_dataset(const DataConfig& config, std::uint64_t seed);

/// Per-channel normalization (x / 255 - mean) / std of byte images.
struct Normalization {
    std::vector<float> mean;
    std::vector<float> std;
};

/// Byte images in memory; `augment` applies CIFAR's random crop (4-pixel zero
/// padding) and horizontal flip to training batches.
std::unique_ptr<Dataset> make_image_dataset(std::string name, std::string source, ImageSet train, ImageSet test,
                                            std::int64_t classes, Normalization normalization, bool augment);

/// A text corpus: the vocabulary comes from `train` (test tokens it lacks become
/// "<unk>"); training batches are `bptt` tokens of `batch_size` contiguous streams per rank.
std::unique_ptr<Dataset> make_text_dataset(std::string name, std::string source, const std::vector<std::string>& train,
                                           const std::vector<std::string>& test, std::int64_t bptt);

/// A learnable synthetic set: each class has a random mean pattern; a sample is
/// half its class's pattern plus unit Gaussian noise. Drawn from `seed`.
struct SyntheticOptions {
    std::vector<std::int64_t> shape = {3, 32, 32};
    std::int64_t classes = 10;
    std::int64_t train = 5000;
    std::int64_t test = 1000;
};
std::unique_ptr<Dataset> make_synthetic(const SyntheticOptions& options, std::uint64_t seed);

}  // namespace acc::train
