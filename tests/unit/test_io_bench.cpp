// The compress-bench results file: round trip and refusal of bad files.
#include "base/error.hpp"
#include "io/bench.hpp"
#include "io/h5.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

using namespace acc::io;

namespace {

BenchFile sample() {
    BenchFile b;
    b.header.provenance = {"compress-bench 0.1.0", "compress-bench -o bench.h5"};
    b.source = "resnet18";
    b.network_source = "flags";
    b.alpha = 5e-5;
    b.bandwidth = 1.25e9;
    b.compute_seconds = 0.1;
    b.backward_share = 2.0 / 3;
    b.bucket_bytes = 25 * 1024 * 1024;
    b.reps = 5;
    b.threads = 1;
    b.memcpy_bandwidth = 2e10;
    b.vectors = "none";
    b.topk_selection = "exact";
    b.parameters = {{"fc.weight", {10, 4}}, {"fc.bias", {10}}};
    b.inputs = {{"synthetic", 7.5}, {"epoch 3", 0.0}};
    for (int i = 0; i < 3; ++i) {
        BenchRow r;
        r.input = i % 2;
        r.compressor = i ? "topk:0.01" : "none";
        r.world_size = 4 << i;
        r.bytes_per_worker = 200 - i;
        r.compression_ratio = 1.0 + i;
        r.encode_median = 0.001 * (i + 1);
        r.encode_min = 0.0009;
        r.encode_max = 0.002;
        r.decode_median = 0.003;
        r.decode_min = 0.002;
        r.decode_max = 0.004;
        r.throughput = 1e9;
        r.relative_error = i == 1 ? std::nan("") : 0.25;
        r.cosine = 0.9;
        r.gain = 0.8;
        r.comm_seconds = 0.01;
        r.iteration_seconds = 0.12;
        r.baseline_iteration_seconds = 0.15;
        r.speedup = 1.25;
        b.rows.push_back(r);
    }
    return b;
}

}  // namespace

TEST(BenchFile, RoundTrips) {
    acc::test::TempDir dir;
    std::string path = dir.file("bench-roundtrip.h5");
    BenchFile b = sample();
    write_bench(path, b);
    BenchFile r = read_bench(path);
    EXPECT_EQ(r.header.format, "accordion.compress-bench");
    EXPECT_EQ(r.header.provenance.producer, "compress-bench 0.1.0");
    EXPECT_EQ(r.source, "resnet18");
    EXPECT_DOUBLE_EQ(r.alpha, 5e-5);
    EXPECT_DOUBLE_EQ(r.memcpy_bandwidth, 2e10);
    EXPECT_EQ(r.reps, 5);
    EXPECT_EQ(r.vectors, "none");
    ASSERT_EQ(r.parameters.size(), 2u);
    EXPECT_EQ(r.parameters[0].shape, (std::vector<std::int64_t>{10, 4}));
    ASSERT_EQ(r.inputs.size(), 2u);
    EXPECT_EQ(r.inputs[1].name, "epoch 3");
    ASSERT_EQ(r.rows.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        const auto& a = b.rows[i];
        const auto& c = r.rows[i];
        EXPECT_EQ(c.input, a.input);
        EXPECT_EQ(c.compressor, a.compressor);
        EXPECT_EQ(c.world_size, a.world_size);
        EXPECT_EQ(c.bytes_per_worker, a.bytes_per_worker);
        EXPECT_DOUBLE_EQ(c.encode_median, a.encode_median);
        EXPECT_DOUBLE_EQ(c.speedup, a.speedup);
        if (std::isnan(a.relative_error))
            EXPECT_TRUE(std::isnan(c.relative_error));
        else
            EXPECT_DOUBLE_EQ(c.relative_error, a.relative_error);
    }
}

TEST(BenchFile, RefusesBadFiles) {
    acc::test::TempDir dir;
    std::string path = dir.file("bench-bad.h5");
    BenchFile b = sample();
    b.rows[2].input = 5;
    write_bench(path, b);
    try {
        read_bench(path);
        FAIL();
    } catch (const acc::FileError& e) {
        EXPECT_NE(std::string(e.what()).find("/results/input is 5 at row 2, but there are 2 inputs"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(read_bench(dir.file("no-such-bench.h5")), acc::FileError);
}
