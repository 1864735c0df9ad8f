// lib/train without LibTorch: the learning-rate schedule, the data order, and
// the dataset file readers with one clear error per kind of bad file.
#include "base/error.hpp"
#include "train/config.hpp"
#include "train/data_files.hpp"
#include "train/lr_schedule.hpp"
#include "train/sampling.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using namespace acc::train;
using acc::test::error_of;
using acc::test::TempDir;

namespace {

using Bytes = std::vector<unsigned char>;

void write_file(const std::string& path, const Bytes& bytes, bool gzip = false) {
    if (gzip) {
        gzFile f = gzopen(path.c_str(), "wb");
        gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
        gzclose(f);
    } else {
        std::ofstream(path, std::ios::binary)
            .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
}

void put_u32(Bytes& out, std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
}

// An IDX image file of `count` images of rows x cols whose pixel j of image i is (i * 7 + j) % 256.
Bytes idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols) {
    Bytes b = {0, 0, 8, 3};
    put_u32(b, count);
    put_u32(b, rows);
    put_u32(b, cols);
    for (std::uint32_t i = 0; i < count; ++i)
        for (std::uint32_t j = 0; j < rows * cols; ++j) b.push_back(static_cast<unsigned char>((i * 7 + j) % 256));
    return b;
}

Bytes idx_labels(const std::vector<unsigned char>& labels) {
    Bytes b = {0, 0, 8, 1};
    put_u32(b, static_cast<std::uint32_t>(labels.size()));
    b.insert(b.end(), labels.begin(), labels.end());
    return b;
}

}  // namespace

TEST(LrSchedule, PaperTable7) {
    // CIFAR-10 on 4 workers: 0.1 x 4, warm-up from 0.1 over 5 epochs, /10 at 150 and 250.
    LrSchedule s;
    s.lr = 0.4;
    s.warmup_epochs = 5;
    s.warmup_lr = 0.1;
    s.decay_epochs = {150, 250};
    EXPECT_DOUBLE_EQ(s.at(0), 0.1);
    EXPECT_DOUBLE_EQ(s.at(1), 0.16);
    EXPECT_DOUBLE_EQ(s.at(4), 0.34);
    EXPECT_DOUBLE_EQ(s.at(5), 0.4);
    EXPECT_DOUBLE_EQ(s.at(149), 0.4);
    EXPECT_DOUBLE_EQ(s.at(150), 0.04);
    EXPECT_DOUBLE_EQ(s.at(249), 0.04);
    EXPECT_NEAR(s.at(250), 0.004, 1e-15);
    EXPECT_NEAR(s.at(299), 0.004, 1e-15);
}

TEST(LrSchedule, DefaultsAndChecks) {
    LrSchedule s;
    EXPECT_DOUBLE_EQ(s.at(0), 0.1);
    EXPECT_DOUBLE_EQ(s.at(1000), 0.1);
    s.warmup_epochs = 2;  // from lr / 10 by default
    EXPECT_DOUBLE_EQ(s.at(0), 0.01);
    EXPECT_DOUBLE_EQ(s.at(1), 0.055);
    EXPECT_DOUBLE_EQ(s.at(2), 0.1);
    s.scale = 8;  // e.g. a batch eight times as large
    EXPECT_DOUBLE_EQ(s.at(1), 0.44);
    s.scale = 1;
    s.decay_factor = 0.5;
    EXPECT_CONTAINS(error_of([&] { s.validate(); }), "--lr-decay-factor");
    s.decay_factor = 10;
    s.decay_epochs = {0};
    EXPECT_CONTAINS(error_of([&] { s.validate(); }), "--lr-decay-epochs");
}

TEST(ShardOrder, RanksSplitOnePermutation) {
    const std::int64_t n = 103;
    for (int world : {1, 2, 3, 8}) {
        std::set<std::int64_t> seen;
        for (int rank = 0; rank < world; ++rank) {
            auto order = shard_order(n, 4, 7, {rank, world});
            EXPECT_EQ(static_cast<std::int64_t>(order.size()), n / world);
            for (auto i : order) {
                EXPECT_GE(i, 0);
                EXPECT_LT(i, n);
                EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " on two ranks";
            }
        }
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), n / world * world);
    }
    // Rank r takes entries r, r + W, ... of the permutation rank 0 of 1 sees.
    auto whole = shard_order(n, 4, 7, {0, 1});
    auto rank1 = shard_order(n, 4, 7, {1, 2});
    for (size_t i = 0; i < rank1.size(); ++i) EXPECT_EQ(rank1[i], whole[2 * i + 1]);
}

TEST(ShardOrder, ReshuffledEveryEpochFromTheSeed) {
    auto a = shard_order(1000, 0, 42, {});
    EXPECT_EQ(a, shard_order(1000, 0, 42, {}));
    EXPECT_NE(a, shard_order(1000, 1, 42, {}));
    EXPECT_NE(a, shard_order(1000, 0, 43, {}));
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < 1000; ++i) EXPECT_EQ(sorted[i], i);
    EXPECT_THROW(shard_order(10, 0, 1, {2, 2}), acc::Error);
}

TEST(ShardOrder, RandomIsUniformEnough) {
    Random r(1);
    std::vector<int> counts(10);
    for (int i = 0; i < 100000; ++i) ++counts[r.below(10)];
    for (int c : counts) EXPECT_NEAR(c, 10000, 500);
    double sum = 0, squares = 0;
    for (int i = 0; i < 100000; ++i) {
        double x = r.normal();
        sum += x;
        squares += x * x;
    }
    EXPECT_NEAR(sum / 100000, 0, 0.02);
    EXPECT_NEAR(squares / 100000, 1, 0.02);
}

TEST(BatchSizes, LastBatchSmallerButNotSingle) {
    EXPECT_EQ(batch_sizes(10, 4), (std::vector<std::int64_t>{4, 4, 2}));
    EXPECT_EQ(batch_sizes(9, 4), (std::vector<std::int64_t>{4, 4}));
    EXPECT_EQ(batch_sizes(8, 4), (std::vector<std::int64_t>{4, 4}));
    EXPECT_TRUE(batch_sizes(1, 4).empty());
}

TEST(Idx, RawAndGzipReadTheSame) {
    TempDir dir;
    write_file(dir.file("a-images"), idx_images(5, 3, 4));
    write_file(dir.file("a-labels"), idx_labels({1, 0, 9, 3, 3}));
    write_file(dir.file("b-images.gz"), idx_images(5, 3, 4), true);
    write_file(dir.file("b-labels.gz"), idx_labels({1, 0, 9, 3, 3}), true);
    ImageSet raw = read_idx(dir.file("a-images"), dir.file("a-labels"), 0, 10);
    ImageSet gz = read_idx(find_data_file(dir.path(), "b-images", "test images"), dir.file("b-labels.gz"), 0, 10);
    for (const ImageSet* s : {&raw, &gz}) {
        EXPECT_EQ(s->count, 5);
        EXPECT_EQ(s->channels, 1);
        EXPECT_EQ(s->height, 3);
        EXPECT_EQ(s->width, 4);
        EXPECT_EQ(s->labels, (std::vector<std::int64_t>{1, 0, 9, 3, 3}));
        ASSERT_EQ(s->pixels.size(), 60u);
        EXPECT_EQ(s->pixels[12 * 2 + 5], (2 * 7 + 5) % 256);
    }
    ImageSet first = read_idx(dir.file("b-images.gz"), dir.file("b-labels.gz"), 2, 10);
    EXPECT_EQ(first.count, 2);
    EXPECT_EQ(first.labels, (std::vector<std::int64_t>{1, 0}));
    EXPECT_EQ(first.pixels, std::vector<std::uint8_t>(raw.pixels.begin(), raw.pixels.begin() + 24));
}

TEST(Idx, FashionMnistFromDebian) {
    const std::string dir = "/usr/share/datasets/fashion-mnist";
    if (!fs::exists(dir)) GTEST_SKIP() << dir << " is not installed (Debian's dataset-fashion-mnist)";
    ImageSet s = read_idx(find_data_file(dir, "t10k-images-idx3-ubyte", "x"),
                          find_data_file(dir, "t10k-labels-idx1-ubyte", "x"), 100, 10);
    EXPECT_EQ(s.count, 100);
    EXPECT_EQ(s.height, 28);
    EXPECT_EQ(s.width, 28);
    // The first test image of Fashion-MNIST is an ankle boot (class 9), the second a pullover (2).
    EXPECT_EQ(s.labels[0], 9);
    EXPECT_EQ(s.labels[1], 2);
}

TEST(Idx, EveryBrokenFileNamesItselfAndWhatWasExpected) {
    TempDir dir;
    write_file(dir.file("labels"), idx_labels({1, 2, 3}));
    write_file(dir.file("images"), idx_images(3, 2, 2));

    EXPECT_CONTAINS(
        error_of([&] { find_data_file(dir.path(), "train-images-idx3-ubyte", "Fashion-MNIST's IDX files"); }),
        dir.file("train-images-idx3-ubyte: no such file, nor train-images-idx3-ubyte.gz (expected Fashion-MNIST"));
    EXPECT_CONTAINS(error_of([&] { find_data_file(dir.file("nope"), "x", "MNIST's IDX files"); }),
                    dir.file("nope: no such directory (expected MNIST's IDX files here; see --data-dir)"));

    Bytes truncated = idx_images(3, 2, 2);
    truncated.resize(truncated.size() - 5);
    write_file(dir.file("truncated"), truncated);
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("truncated"), dir.file("labels"), 0, 10); }),
                    dir.file("truncated: truncated: expected 12 bytes of image data (3 images of 2x2), found 7"));

    write_file(dir.file("truncated.gz"), truncated, true);
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("truncated.gz"), dir.file("labels"), 0, 10); }),
                    dir.file("truncated.gz: truncated: expected 12 bytes"));

    Bytes gz;
    {
        write_file(dir.file("whole.gz"), idx_images(3, 2, 2), true);
        std::ifstream in(dir.file("whole.gz"), std::ios::binary);
        gz.assign(std::istreambuf_iterator<char>(in), {});
    }
    gz.resize(gz.size() - 12);  // cut inside the deflate stream
    write_file(dir.file("cut.gz"), gz);
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("cut.gz"), dir.file("labels"), 0, 10); }),
                    dir.file("cut.gz: truncated"));

    write_file(dir.file("short"), {0, 0, 8});
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("short"), dir.file("labels"), 0, 10); }),
                    dir.file("short: truncated: ends inside the IDX header"));

    write_file(dir.file("text"), Bytes{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!', '!', '!', '!', '!'});
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("text"), dir.file("labels"), 0, 10); }),
                    dir.file("text: is not an IDX image file: expected magic bytes 00 00 08 03 (unsigned bytes, 3 "
                             "dimensions), found 68 65 6c 6c"));
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("labels"), dir.file("labels"), 0, 10); }),
                    "is not an IDX image file");

    write_file(dir.file("four-labels"), idx_labels({1, 2, 3, 4}));
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("images"), dir.file("four-labels"), 0, 10); }),
                    dir.file("four-labels: holds 4 labels but ") + dir.file("images holds 3 images"));

    write_file(dir.file("bad-label"), idx_labels({1, 12, 3}));
    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("images"), dir.file("bad-label"), 0, 10); }),
                    dir.file("bad-label: label 12 of sample 1 is out of range (expected 0..9)"));

    EXPECT_CONTAINS(error_of([&] { read_idx(dir.file("missing"), dir.file("labels"), 0, 10); }),
                    dir.file("missing: cannot open (No such file or directory)"));
}

TEST(Cifar, RecordsLabelsAndErrors) {
    TempDir dir;
    auto records = [](int label_bytes, const std::vector<int>& labels) {
        Bytes b;
        for (size_t r = 0; r < labels.size(); ++r) {
            if (label_bytes == 2) b.push_back(static_cast<unsigned char>(labels[r] / 5));  // coarse label
            b.push_back(static_cast<unsigned char>(labels[r]));
            for (int j = 0; j < 3072; ++j) b.push_back(static_cast<unsigned char>((r + j) % 251));
        }
        return b;
    };
    write_file(dir.file("a.bin"), records(1, {3, 9}));
    write_file(dir.file("b.bin"), records(1, {0}));
    ImageSet s = read_cifar({dir.file("a.bin"), dir.file("b.bin")}, 1, 10, 0);
    EXPECT_EQ(s.count, 3);
    EXPECT_EQ(s.channels, 3);
    EXPECT_EQ(s.labels, (std::vector<std::int64_t>{3, 9, 0}));
    EXPECT_EQ(s.pixels[3072 + 1024 + 5], (1 + 1024 + 5) % 251);  // record 1, green channel, pixel 5
    EXPECT_EQ(read_cifar({dir.file("a.bin"), dir.file("b.bin")}, 1, 10, 1).count, 1);

    write_file(dir.file("c100.bin"), records(2, {99, 42}));
    ImageSet h = read_cifar({dir.file("c100.bin")}, 2, 100, 0);
    EXPECT_EQ(h.labels, (std::vector<std::int64_t>{99, 42}));  // the fine label

    Bytes cut = records(1, {1, 2});
    cut.resize(cut.size() - 100);
    write_file(dir.file("cut.bin"), cut);
    EXPECT_CONTAINS(error_of([&] { read_cifar({dir.file("cut.bin")}, 1, 10, 0); }),
                    dir.file("cut.bin: size 6,046 bytes is not a whole number of 3073-byte CIFAR records"));
    EXPECT_CONTAINS(error_of([&] { read_cifar({dir.file("c100.bin")}, 1, 10, 0); }), "c100.bin: size 6,148 bytes");
    write_file(dir.file("bad.bin"), records(1, {10}));
    EXPECT_CONTAINS(error_of([&] { read_cifar({dir.file("bad.bin")}, 1, 10, 0); }),
                    dir.file("bad.bin: label 10 of sample 0 is out of range (expected 0..9)"));
    EXPECT_CONTAINS(error_of([&] { read_cifar({dir.file("none.bin")}, 1, 10, 0); }),
                    dir.file("none.bin: no such file (expected a CIFAR binary batch; see --data-dir)"));
}

TEST(Text, TokensWithEndOfLine) {
    TempDir dir;
    std::ofstream(dir.file("wiki.txt")) << " = Title = \n\n the cat  sat\ton the mat \n";
    auto tokens = read_tokens(dir.file("wiki.txt"), 0);
    EXPECT_EQ(tokens, (std::vector<std::string>{"=", "Title", "=", "<eos>", "<eos>", "the", "cat", "sat", "on", "the",
                                                "mat", "<eos>"}));
    EXPECT_EQ(read_tokens(dir.file("wiki.txt"), 5).size(), 5u);

    std::ofstream(dir.file("empty.txt")) << "";
    EXPECT_CONTAINS(error_of([&] { read_tokens(dir.file("empty.txt"), 0); }),
                    dir.file("empty.txt: holds no tokens; expected a text file of whitespace-separated tokens"));
    write_file(dir.file("binary.txt"), Bytes{'a', ' ', 'b', '\n', 'c', 0, 'd', '\n'});
    EXPECT_CONTAINS(error_of([&] { read_tokens(dir.file("binary.txt"), 0); }),
                    dir.file("binary.txt: line 2 holds a NUL byte; expected a text file"));
    EXPECT_CONTAINS(error_of([&] { read_tokens(dir.file("none.txt"), 0); }), dir.file("none.txt: cannot open"));
}

TEST(TrainConfig, ValidateNamesTheOption) {
    TrainConfig c;
    c.model = "mlp";
    c.epochs = 3;
    EXPECT_NO_THROW(validate(c));
    auto message = [&](auto change) {
        TrainConfig copy = c;
        change(copy);
        return error_of([&] { validate(copy); });
    };
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.model = "resnet50"; }), "--model: unknown model 'resnet50'");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.model = "lstm"; }),
                    "--model lstm cannot train on --dataset fashion-mnist");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.data.name = "wikitext2"; }), "this model needs an image dataset");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.optimizer.momentum = 0, x.optimizer.nesterov = true; }),
                    "--nesterov: needs a --momentum greater than 0");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.micro_batch_size = 500; }), "--micro-batch-size");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.model_options.tied = true; }),
                    "--tied: applies only to --model lstm");
    EXPECT_CONTAINS(message([](TrainConfig& x) { x.epochs = 0; }), "--epochs");
    TrainConfig every2 = c;
    every2.epochs = 5;
    every2.eval_every = 2;
    std::vector<std::int64_t> evaluated;
    for (std::int64_t e = 0; e < 5; ++e)
        if (evaluates_after(every2, e)) evaluated.push_back(e);
    EXPECT_EQ(evaluated, (std::vector<std::int64_t>{1, 3, 4}));  // every second epoch, and the last
    every2.eval_every = 0;
    EXPECT_FALSE(evaluates_after(every2, 4));
    try {
        TrainConfig copy = c;
        copy.schedule.lr = -1;
        validate(copy);
        ADD_FAILURE();
    } catch (const acc::UsageError& e) {
        EXPECT_CONTAINS(e.what(), "--lr");
    }
}
