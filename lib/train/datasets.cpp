#include "train/datasets.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <sys/stat.h>

#include <unordered_map>

namespace acc::train {
namespace {

// Images (bytes or floats) in memory, with labels; batches gather samples by index.
class ImageDataset : public Dataset {
public:
    struct Split {
        torch::Tensor images;  // N x C x H x W, uint8 (normalized per batch) or float (used as is)
        torch::Tensor labels;  // N, int64
    };

    ImageDataset(DataInfo info, Split train, Split test, Normalization normalization, bool augment)
        : train_(std::move(train)), test_(std::move(test)), augment_(augment) {
        info_ = std::move(info);
        if (!normalization.mean.empty()) {
            const auto channels = static_cast<std::int64_t>(normalization.mean.size());
            mean_ = torch::tensor(normalization.mean).view({1, channels, 1, 1});
            std_ = torch::tensor(normalization.std).view({1, channels, 1, 1});
        }
    }

    std::unique_ptr<Batches> train(std::int64_t epoch, Shard shard, std::int64_t batch_size,
                                   std::uint64_t seed) const override {
        auto order = shard_order(train_.images.size(0), epoch, seed, shard);
        const std::uint64_t augment_seed =
            mix_seed(seed, 0xa7, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(shard.rank));
        return std::make_unique<ImageBatches>(*this, on_device_ ? device_train_ : train_, std::move(order), batch_size,
                                              augment_, augment_seed);
    }

    std::unique_ptr<Batches> test(std::int64_t batch_size) const override {
        std::vector<std::int64_t> order(static_cast<size_t>(test_.images.size(0)));
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
        return std::make_unique<ImageBatches>(*this, on_device_ ? device_test_ : test_, std::move(order), batch_size,
                                              false, 0);
    }

    // Augmented batches are cropped and flipped per sample on the host, so those
    // datasets stay there; the others are gathered on the device from one copy.
    void use_device(torch::Device device) const override {
        if (!device.is_cuda() || augment_ || on_device_) return;
        const std::int64_t bytes = static_cast<std::int64_t>(train_.images.nbytes() + train_.labels.nbytes() +
                                                             test_.images.nbytes() + test_.labels.nbytes());
        if (bytes > kDeviceDataBytes) return;
        device_train_ = {train_.images.to(device), train_.labels.to(device)};
        device_test_ = {test_.images.to(device), test_.labels.to(device)};
        if (mean_.defined()) {
            device_mean_ = mean_.to(device);
            device_std_ = std_.to(device);
        }
        on_device_ = true;
    }

private:
    class ImageBatches : public Batches {
    public:
        ImageBatches(const ImageDataset& data, const Split& split, std::vector<std::int64_t> order,
                     std::int64_t batch_size, bool augment, std::uint64_t seed)
            : data_(data), split_(split), order_(std::move(order)), augment_(augment), seed_(seed) {
            std::int64_t start = 0;
            for (std::int64_t size : batch_sizes(static_cast<std::int64_t>(order_.size()), batch_size)) {
                starts_.push_back(start);
                sizes_.push_back(size);
                start += size;
            }
            // Data on a GPU: the pass's order goes there once, and each batch's indices are a slice of it.
            if (split_.images.is_cuda()) device_order_ = torch::tensor(order_).to(split_.images.device());
        }
        std::int64_t size() const override { return static_cast<std::int64_t>(sizes_.size()); }
        Batch get(std::int64_t index) const override {
            auto indices =
                device_order_.defined()
                    ? device_order_.slice(0, starts_[index], starts_[index] + sizes_[index])
                    : torch::tensor(std::vector<std::int64_t>(order_.begin() + starts_[index],
                                                              order_.begin() + starts_[index] + sizes_[index]));
            Batch batch;
            batch.input = split_.images.index_select(0, indices);
            batch.target = split_.labels.index_select(0, indices);
            batch.samples = sizes_[index];
            if (augment_)
                batch.input = data_.crop_and_flip(batch.input, mix_seed(seed_, static_cast<std::uint64_t>(index)));
            batch.input = data_.normalize(batch.input);
            return batch;
        }

    private:
        const ImageDataset& data_;
        const Split& split_;
        std::vector<std::int64_t> order_, starts_, sizes_;
        torch::Tensor device_order_;
        bool augment_;
        std::uint64_t seed_;
    };

    // Random crop after 4-pixel zero padding, and a horizontal flip with probability 1/2,
    // drawn per sample (torchvision's RandomCrop(32, padding=4) and RandomHorizontalFlip).
    torch::Tensor crop_and_flip(const torch::Tensor& images, std::uint64_t seed) const {
        constexpr std::int64_t kPad = 4;
        const std::int64_t height = images.size(2), width = images.size(3);
        auto padded = torch::constant_pad_nd(images, {kPad, kPad, kPad, kPad}, 0);
        auto out = torch::empty_like(images);
        Random random(seed);
        for (std::int64_t i = 0; i < images.size(0); ++i) {
            const auto dy = static_cast<std::int64_t>(random.below(2 * kPad + 1));
            const auto dx = static_cast<std::int64_t>(random.below(2 * kPad + 1));
            auto crop = padded[i].slice(1, dy, dy + height).slice(2, dx, dx + width);
            if (random.below(2)) crop = crop.flip({2});
            out[i].copy_(crop);
        }
        return out;
    }

    torch::Tensor normalize(const torch::Tensor& images) const {
        if (images.scalar_type() != torch::kUInt8) return images;
        auto x = images.to(torch::kFloat32).div_(255.0f);
        if (mean_.defined()) {
            if (images.is_cuda())
                x.sub_(device_mean_).div_(device_std_);
            else
                x.sub_(mean_).div_(std_);
        }
        return x;
    }

    Split train_, test_;
    bool augment_;
    torch::Tensor mean_, std_;
    // The copy on a GPU that use_device made, if any.
    mutable bool on_device_ = false;
    mutable Split device_train_, device_test_;
    mutable torch::Tensor device_mean_, device_std_;
};

ImageDataset::Split to_split(ImageSet& set) {
    ImageDataset::Split split;
    split.images =
        torch::from_blob(set.pixels.data(), {set.count, set.channels, set.height, set.width}, torch::kUInt8).clone();
    split.labels = torch::tensor(set.labels, torch::kInt64);
    set.pixels = {};
    return split;
}

// Token ids of a corpus laid out as streams: column s is one contiguous stretch of the text.
class TextDataset : public Dataset {
public:
    TextDataset(DataInfo info, torch::Tensor train, torch::Tensor test, std::int64_t bptt)
        : train_(std::move(train)), test_(std::move(test)), bptt_(bptt) {
        info_ = std::move(info);
    }

    std::unique_ptr<Batches> train(std::int64_t, Shard shard, std::int64_t batch_size, std::uint64_t) const override {
        return std::make_unique<TextBatches>(streams(train_, "training", batch_size * shard.world_size)
                                                 .slice(1, shard.rank * batch_size, (shard.rank + 1) * batch_size)
                                                 .contiguous(),
                                             bptt_);
    }
    std::unique_ptr<Batches> test(std::int64_t batch_size) const override {
        return std::make_unique<TextBatches>(streams(test_, "test", batch_size), bptt_);
    }

private:
    class TextBatches : public Batches {
    public:
        TextBatches(torch::Tensor data, std::int64_t bptt) : data_(std::move(data)), bptt_(bptt) {}
        std::int64_t size() const override { return (data_.size(0) - 1 + bptt_ - 1) / bptt_; }
        Batch get(std::int64_t index) const override {
            const std::int64_t start = index * bptt_;
            const std::int64_t length = std::min(bptt_, data_.size(0) - 1 - start);
            Batch batch;
            batch.input = data_.slice(0, start, start + length);
            batch.target = data_.slice(0, start + 1, start + 1 + length).reshape({-1});
            batch.samples = length * data_.size(1);
            return batch;
        }

    private:
        torch::Tensor data_;
        std::int64_t bptt_;
    };

    // PyTorch's batchify: `count` columns of equal length, the remainder dropped.
    torch::Tensor streams(const torch::Tensor& tokens, const std::string& split, std::int64_t count) const {
        const std::int64_t length = tokens.size(0) / count;
        if (length < 2)
            throw Error(info_.source + ": the " + split + " split holds " + with_commas(tokens.size(0)) +
                        " tokens, too few for " + std::to_string(count) + " streams of at least 2 tokens");
        return tokens.slice(0, 0, length * count).view({count, length}).t().contiguous();
    }

    torch::Tensor train_, test_;
    std::int64_t bptt_;
};

void check_same_shape(const ImageSet& train, const ImageSet& test, const std::string& test_source) {
    if (train.channels != test.channels || train.height != test.height || train.width != test.width)
        throw FileError(test_source, "test images are " + std::to_string(test.channels) + "x" +
                                         std::to_string(test.height) + "x" + std::to_string(test.width) +
                                         " but training images are " + std::to_string(train.channels) + "x" +
                                         std::to_string(train.height) + "x" + std::to_string(train.width));
}

std::unique_ptr<Dataset> open_idx(const DataConfig& c, const std::string& title, Normalization normalization) {
    const std::string what = title + "'s IDX files";
    const std::string train_images = find_data_file(c.dir, "train-images-idx3-ubyte", what);
    ImageSet train =
        read_idx(train_images, find_data_file(c.dir, "train-labels-idx1-ubyte", what), c.train_samples, 10);
    const std::string test_images = find_data_file(c.dir, "t10k-images-idx3-ubyte", what);
    ImageSet test = read_idx(test_images, find_data_file(c.dir, "t10k-labels-idx1-ubyte", what), c.test_samples, 10);
    check_same_shape(train, test, test_images);
    return make_image_dataset(c.name, c.dir, std::move(train), std::move(test), 10, std::move(normalization), false);
}

std::unique_ptr<Dataset> open_cifar(const DataConfig& c) {
    const bool hundred = c.name == "cifar100";
    std::vector<std::string> train_files, test_files;
    if (hundred) {
        train_files = {c.dir + "/train.bin"};
        test_files = {c.dir + "/test.bin"};
    } else {
        for (int i = 1; i <= 5; ++i) train_files.push_back(c.dir + "/data_batch_" + std::to_string(i) + ".bin");
        test_files = {c.dir + "/test_batch.bin"};
    }
    const int label_bytes = hundred ? 2 : 1;
    const std::int64_t classes = hundred ? 100 : 10;
    ImageSet train = read_cifar(train_files, label_bytes, classes, c.train_samples);
    ImageSet test = read_cifar(test_files, label_bytes, classes, c.test_samples);
    // The paper's per-channel statistics (Appendix A), for CIFAR-10 and CIFAR-100 alike.
    Normalization paper{{0.49f, 0.48f, 0.45f}, {0.25f, 0.24f, 0.26f}};
    return make_image_dataset(c.name, c.dir, std::move(train), std::move(test), classes, paper, true);
}

}  // namespace

std::unique_ptr<Dataset> make_image_dataset(std::string name, std::string source, ImageSet train, ImageSet test,
                                            std::int64_t classes, Normalization normalization, bool augment) {
    DataInfo info;
    info.name = std::move(name);
    info.source = std::move(source);
    info.shape = {{train.channels, train.height, train.width}, classes};
    info.train_size = train.count;
    info.test_size = test.count;
    info.unit = "images";
    if (!normalization.mean.empty() && (normalization.mean.size() != static_cast<size_t>(train.channels) ||
                                        normalization.std.size() != normalization.mean.size()))
        throw Error(info.name + ": normalization statistics do not match the image channels");
    return std::make_unique<ImageDataset>(std::move(info), to_split(train), to_split(test), std::move(normalization),
                                          augment);
}

std::unique_ptr<Dataset> make_text_dataset(std::string name, std::string source, const std::vector<std::string>& train,
                                           const std::vector<std::string>& test, std::int64_t bptt) {
    std::unordered_map<std::string, std::int64_t> ids;
    auto id_of = [&ids](const std::string& word) {
        auto [it, added] = ids.emplace(word, static_cast<std::int64_t>(ids.size()));
        return it->second;
    };
    std::vector<std::int64_t> train_ids, test_ids;
    train_ids.reserve(train.size());
    for (const auto& word : train) train_ids.push_back(id_of(word));
    test_ids.reserve(test.size());
    for (const auto& word : test) {
        auto it = ids.find(word);
        test_ids.push_back(it != ids.end() ? it->second : id_of("<unk>"));
    }
    DataInfo info;
    info.name = std::move(name);
    info.source = std::move(source);
    info.shape = {{}, static_cast<std::int64_t>(ids.size())};
    info.train_size = static_cast<std::int64_t>(train_ids.size());
    info.test_size = static_cast<std::int64_t>(test_ids.size());
    info.unit = "tokens";
    return std::make_unique<TextDataset>(std::move(info), torch::tensor(train_ids, torch::kInt64),
                                         torch::tensor(test_ids, torch::kInt64), bptt);
}

std::unique_ptr<Dataset> make_synthetic(const SyntheticOptions& o, std::uint64_t seed) {
    std::int64_t features = 1;
    for (auto d : o.shape) features *= d;
    Random random(mix_seed(seed, 0x5e7));
    std::vector<float> means(static_cast<size_t>(o.classes * features));
    for (auto& m : means) m = static_cast<float>(0.5 * random.normal());
    auto make_split = [&](std::int64_t count) {
        std::vector<float> values(static_cast<size_t>(count * features));
        std::vector<std::int64_t> labels(static_cast<size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) {
            labels[i] = static_cast<std::int64_t>(random.below(static_cast<std::uint64_t>(o.classes)));
            const float* mean = means.data() + labels[i] * features;
            float* x = values.data() + i * features;
            for (std::int64_t f = 0; f < features; ++f) x[f] = mean[f] + static_cast<float>(random.normal());
        }
        std::vector<std::int64_t> dims = {count};
        dims.insert(dims.end(), o.shape.begin(), o.shape.end());
        return ImageDataset::Split{torch::tensor(values).view(dims), torch::tensor(labels, torch::kInt64)};
    };
    DataInfo info;
    info.name = "synthetic";
    info.source = "synthetic data (seed " + std::to_string(seed) + ")";
    info.shape = {o.shape, o.classes};
    info.train_size = o.train;
    info.test_size = o.test;
    auto train = make_split(o.train);
    auto test = make_split(o.test);
    return std::make_unique<ImageDataset>(std::move(info), std::move(train), std::move(test), Normalization{}, false);
}

std::unique_ptr<Dataset> open_dataset(const DataConfig& config, std::uint64_t seed) {
    DataConfig c = config;
    const std::string& n = c.name;
    if (n == "synthetic") {
        SyntheticOptions o;
        if (c.train_samples > 0) o.train = c.train_samples;
        if (c.test_samples > 0) o.test = c.test_samples;
        return make_synthetic(o, seed);
    }
    if (c.dir.empty()) {
        if (n == "fashion-mnist") {
            c.dir = kFashionMnistDir;
        } else {
            const char* expected = n == "cifar10"    ? "data_batch_1.bin ... data_batch_5.bin and test_batch.bin"
                                   : n == "cifar100" ? "train.bin and test.bin"
                                   : n == "mnist"    ? "train-images-idx3-ubyte.gz and the other IDX files"
                                                     : "wiki.train.tokens and wiki.test.tokens";
            throw UsageError("--data-dir: dataset " + n + " has no default location; give the directory that holds " +
                             expected);
        }
    }
    if (n == "fashion-mnist") {
        struct stat st;
        if (config.dir.empty() && ::stat(c.dir.c_str(), &st) != 0)
            throw FileError(c.dir,
                            "no such directory: install Debian's dataset-fashion-mnist package, or give "
                            "--data-dir");
        return open_idx(c, "Fashion-MNIST", {{0.2860f}, {0.3530f}});
    }
    if (n == "mnist") return open_idx(c, "MNIST", {{0.1307f}, {0.3081f}});
    if (n == "cifar10" || n == "cifar100") return open_cifar(c);
    if (n == "wikitext2") {
        auto train = read_tokens(c.dir + "/wiki.train.tokens", c.train_samples);
        auto test = read_tokens(c.dir + "/wiki.test.tokens", c.test_samples);
        return make_text_dataset(n, c.dir, train, test, c.bptt);
    }
    throw UsageError("--dataset: unknown dataset '" + n + "'");
}

}  // namespace acc::train
