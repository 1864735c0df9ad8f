// The comm-profile file: round trip, predictions, and one clear error per kind of bad file.
#include "base/error.hpp"
#include "io/comm_profile.hpp"
#include "io/h5.hpp"

#include "comm_profile_sample.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace acc::io;

namespace {

using acc::test::TempDir;

CollectiveProfile allreduce() { return acc::test::sample_collective(); }

CommProfile sample() {
    CommProfile p;
    p.header.provenance = {"comm-profile 0.1.0", "comm-profile -o comm.h5"};
    p.world_size = 4;
    p.iterations = 20;
    p.warmup_iterations = 5;
    p.agg_iters = 4;
    p.checked = true;
    p.hosts = {"a", "a", "b", "b"};
    p.collectives.push_back(allreduce());
    CollectiveProfile b = allreduce();
    b.name = "broadcast";
    b.op = "none";
    b.bus_factor = 1;
    b.wrong = {-1, -1, -1};
    b.bandwidth = std::numeric_limits<double>::infinity();
    b.bus_bandwidth = b.bandwidth;
    p.collectives.push_back(b);
    return p;
}

std::string read_error(const std::string& path) {
    return acc::test::error_of([&] { read_comm_profile(path); });
}

}  // namespace

TEST(CommProfileFile, RoundTrip) {
    TempDir dir;
    write_comm_profile(dir.file("comm.h5"), sample());
    CommProfile p = read_comm_profile(dir.file("comm.h5"));
    EXPECT_EQ(p.header.format, "accordion.comm-profile");
    EXPECT_EQ(p.header.provenance.producer, "comm-profile 0.1.0");
    EXPECT_EQ(p.world_size, 4);
    EXPECT_EQ(p.backend, "gloo");
    EXPECT_EQ(p.iterations, 20);
    EXPECT_EQ(p.agg_iters, 4);
    EXPECT_TRUE(p.checked);
    EXPECT_EQ(p.hosts, (std::vector<std::string>{"a", "a", "b", "b"}));
    ASSERT_EQ(p.collectives.size(), 2u);
    const CollectiveProfile* a = p.find("allreduce");
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->size, allreduce().size);
    EXPECT_EQ(a->time_median, allreduce().time_median);
    EXPECT_EQ(a->time_mean, allreduce().time_mean);
    EXPECT_EQ(a->wrong, allreduce().wrong);
    EXPECT_EQ(a->op, "sum");
    EXPECT_DOUBLE_EQ(a->bus_factor, 1.5);
    EXPECT_DOUBLE_EQ(a->alpha, 8e-6);
    EXPECT_EQ(a->fit_points, 3);
    EXPECT_TRUE(std::isinf(p.find("broadcast")->bandwidth));
    EXPECT_EQ(p.find("allgather"), nullptr);
}

TEST(CommProfileFile, PredictsFromTheFit) {
    CollectiveProfile c = allreduce();
    EXPECT_DOUBLE_EQ(c.predict(0), 8e-6);
    EXPECT_DOUBLE_EQ(c.predict(1.25e9), 1 + 8e-6);
    c.bandwidth = std::numeric_limits<double>::infinity();
    EXPECT_DOUBLE_EQ(c.predict(1e12), 8e-6);
}

TEST(CommProfileFile, RefusesBadFiles) {
    TempDir dir;
    auto broken = [&](const std::string& name, auto&& edit) {
        CommProfile p = sample();
        edit(p.collectives[0]);
        write_comm_profile(dir.file(name), p);
        return read_error(dir.file(name));
    };
    EXPECT_CONTAINS(broken("order.h5",
                           [](CollectiveProfile& c) {
                               c.size = {1024, 1024, 16384};
                           }),
                    "/collectives/allreduce/size is not strictly increasing at row 1");
    EXPECT_CONTAINS(broken("nan.h5", [](CollectiveProfile& c) { c.time_median[2] = std::nan(""); }),
                    "/collectives/allreduce: a time is nan s at size 16384 B; times are numbers in (0, 1e+06] seconds");
    // Valid-looking but beyond any measurement: the model's sums would overflow to inf and NaN.
    EXPECT_CONTAINS(broken("huge.h5",
                           [](CollectiveProfile& c) {
                               c.time_max[2] = 1e308;
                           }),
                    "/collectives/allreduce: a time is 1e+308 s at size 16384 B");
    EXPECT_CONTAINS(broken("minmax.h5", [](CollectiveProfile& c) { c.time_min[0] = 1; }),
                    "time_min <= time_median <= time_max does not hold at size 1024 B");
    EXPECT_CONTAINS(broken("mean.h5", [](CollectiveProfile& c) { c.time_mean[1] = 16e-6; }),
                    "time_min <= time_mean <= time_max does not hold at size 4096 B");
    EXPECT_CONTAINS(broken("alpha.h5", [](CollectiveProfile& c) { c.alpha = -1; }),
                    "alpha is -1; it is a latency in [0, 1e+06] seconds");
    EXPECT_CONTAINS(broken("alpha-huge.h5", [](CollectiveProfile& c) { c.alpha = 1e308; }), "alpha is 1e+308;");
    EXPECT_CONTAINS(broken("bw.h5", [](CollectiveProfile& c) { c.bandwidth = 0; }),
                    "bandwidth is 0; it is at least 1 byte/s (inf: no time per byte)");
    EXPECT_CONTAINS(broken("bw-tiny.h5", [](CollectiveProfile& c) { c.bandwidth = 1e-300; }), "bandwidth is 1e-300;");
    EXPECT_CONTAINS(broken("fit-from.h5", [](CollectiveProfile& c) { c.fit_from = -5; }),
                    "/collectives/allreduce: fit_from is -5; it is the size in bytes the fit starts from, >= 0");
    EXPECT_CONTAINS(broken("wrong.h5", [](CollectiveProfile& c) { c.wrong[1] = -2; }), "/wrong is -2 at size 4096 B");

    // Layout problems, written with the HDF5 layer directly.
    write_comm_profile(dir.file("good.h5"), sample());
    {
        H5File f = H5File::open(dir.file("good.h5"), true);
        f.write<double>("/collectives/allreduce/busbw", {1, 2}, {2});
        f.close();
    }
    EXPECT_CONTAINS(read_error(dir.file("good.h5")), "/collectives/allreduce/busbw has shape 2, expected 3");
    write_comm_profile(dir.file("hosts.h5"), sample());
    {
        H5File f = H5File::open(dir.file("hosts.h5"), true);
        f.write_strings("/hosts", {"a"});
        f.write_attr("/", "format_version", std::string("2.0"));
        f.close();
    }
    EXPECT_CONTAINS(read_error(dir.file("hosts.h5")), "format version 2.0 is newer");
    {
        H5File f = H5File::create(dir.file("empty.h5"), dir.file("empty.h5"));
        FileHeader h;
        h.format = kCommProfileFormat;
        write_header(f, h);
        f.write_attr("/", "world_size", std::int64_t{2});
        f.create_group("/collectives");
        f.close();
    }
    EXPECT_CONTAINS(read_error(dir.file("empty.h5")), "/collectives holds no collective");
    CommProfile none_timed = sample();
    none_timed.agg_iters = 0;
    write_comm_profile(dir.file("agg.h5"), none_timed);
    EXPECT_CONTAINS(read_error(dir.file("agg.h5")), "agg_iters is 0; it must be at least 1");
    CommProfile p = sample();
    p.hosts = {"a"};
    write_comm_profile(dir.file("few-hosts.h5"), p);
    EXPECT_CONTAINS(read_error(dir.file("few-hosts.h5")), "/hosts lists 1 hosts for a world of 4 ranks");
    // A count read at its full width: 2^32 + 2 ranks are not 2, 2^31 not a negative number.
    for (std::int64_t world : {(std::int64_t{1} << 32) + 2, std::int64_t{1} << 31}) {
        CommProfile huge = sample();
        huge.world_size = world;
        huge.hosts.clear();
        write_comm_profile(dir.file("huge.h5"), huge);
        EXPECT_CONTAINS(read_error(dir.file("huge.h5")),
                        "huge.h5: world_size is " + std::to_string(world) + "; no run has more than 1048576 ranks");
    }
}

TEST(CommProfileFile, OneRankHasNoBusTraffic) {
    TempDir dir;
    CommProfile p = sample();
    p.world_size = 1;
    p.hosts = {"a"};
    p.collectives[0].bus_factor = 0;
    p.collectives[0].bus_bandwidth = 0;
    for (auto& b : p.collectives[0].busbw) b = 0;
    write_comm_profile(dir.file("one.h5"), p);
    EXPECT_EQ(read_comm_profile(dir.file("one.h5")).find("allreduce")->bus_bandwidth, 0);
    p.collectives[0].bus_factor = -1;
    write_comm_profile(dir.file("negative.h5"), p);
    EXPECT_CONTAINS(read_error(dir.file("negative.h5")), "bus_factor is not a finite number >= 0");
}

TEST(CommProfileFile, ComputeGroupIsOptional) {
    TempDir dir;
    write_comm_profile(dir.file("plain.h5"), sample());
    CommProfile plain = read_comm_profile(dir.file("plain.h5"));
    EXPECT_FALSE(plain.compute.has_value());
    EXPECT_EQ(plain.header.major, 1);
    EXPECT_EQ(plain.header.minor, 3);

    // A file of version 1.0 (no /compute, no agg_iters: each call timed alone; no
    // time_mean: read as the median) reads as before.
    {
        H5File f = H5File::open(dir.file("plain.h5"), true);
        f.write_attr("/", "format_version", std::string("1.0"));
        H5Adelete(f.id(), "agg_iters");
        for (const char* name : {"allreduce", "broadcast"})
            H5Ldelete(f.id(), ("/collectives/" + std::string(name) + "/time_mean").c_str(), H5P_DEFAULT);
        f.close();
    }
    const CommProfile old = read_comm_profile(dir.file("plain.h5"));
    EXPECT_FALSE(old.compute.has_value());
    EXPECT_EQ(old.agg_iters, 1);
    EXPECT_EQ(old.find("allreduce")->time_mean, allreduce().time_median);

    CommProfile p = sample();
    ComputeProfile c;
    c.model = "resnet18";
    c.batch_size = 128;
    c.input_shape = {3, 32, 32};
    c.classes = 10;
    c.input = "CIFAR-10";
    c.warmup_steps = 5;
    c.threads = 1;
    c.forward = {0.11, 0.10, 0.12};
    c.backward = {0.21, 0.20, 0.25};
    c.forward_seconds = 0.11;
    c.backward_seconds = 0.21;
    p.compute = c;
    write_comm_profile(dir.file("compute.h5"), p);
    CommProfile back = read_comm_profile(dir.file("compute.h5"));
    ASSERT_TRUE(back.compute.has_value());
    EXPECT_EQ(back.compute->model, "resnet18");
    EXPECT_EQ(back.compute->batch_size, 128);
    EXPECT_EQ(back.compute->input_shape, (std::vector<std::int64_t>{3, 32, 32}));
    EXPECT_EQ(back.compute->classes, 10);
    EXPECT_EQ(back.compute->input, "CIFAR-10");
    EXPECT_EQ(back.compute->warmup_steps, 5);
    EXPECT_EQ(back.compute->forward, c.forward);
    EXPECT_EQ(back.compute->backward, c.backward);
    EXPECT_DOUBLE_EQ(back.compute->forward_seconds, 0.11);
    EXPECT_DOUBLE_EQ(back.compute->backward_seconds, 0.21);

    auto broken = [&](const std::string& name, auto&& edit) {
        CommProfile q = p;
        edit(*q.compute);
        write_comm_profile(dir.file(name), q);
        return read_error(dir.file(name));
    };
    EXPECT_CONTAINS(broken("nan.h5", [](ComputeProfile& x) { x.backward[1] = std::nan(""); }),
                    "/compute: a time is not among numbers in (0, 1e+06] seconds at step 1 (forward ");
    EXPECT_CONTAINS(broken("huge.h5", [](ComputeProfile& x) { x.forward[0] = 1e308; }),
                    "at step 0 (forward 1e+308, backward ");
    EXPECT_CONTAINS(broken("short.h5", [](ComputeProfile& x) { x.backward.pop_back(); }),
                    "/compute/backward has shape 2, expected 3");
    EXPECT_CONTAINS(broken("median.h5", [](ComputeProfile& x) { x.forward_seconds = 0; }),
                    "/compute: forward_seconds and backward_seconds must be numbers in (0, 1e+06] seconds");
    EXPECT_CONTAINS(broken("batch.h5", [](ComputeProfile& x) { x.batch_size = 0; }),
                    "/compute: batch_size is 0; it must be at least 1");
}
