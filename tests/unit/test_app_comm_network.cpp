// A comm-profile file as compress-bench's --comm takes it: both networks from the
// fits (or the measured times), the allreduce's standing in for a missing allgather,
// the profiled compute, and the two files it refuses.
#include "app/comm_network.hpp"
#include "base/error.hpp"
#include "io/comm_profile.hpp"

#include "comm_profile_sample.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

using namespace acc;
using acc::test::TempDir;

namespace {

io::CommProfile profile(std::int64_t world) {
    io::CommProfile p;
    p.header.provenance = {"comm-profile 0.1.0", "comm-profile -o comm.h5"};
    p.world_size = world;
    p.backend = "gloo";
    p.iterations = 20;
    p.hosts.assign(static_cast<size_t>(world), "a");
    p.collectives.push_back(test::sample_collective("allreduce", 8e-6, 1.25e9));
    p.collectives.push_back(test::sample_collective("allgather", 6e-6, 2.5e9));
    return p;
}

std::string written(const TempDir& dir, const std::string& name, const io::CommProfile& p) {
    const std::string path = dir.file(name);
    io::write_comm_profile(path, p);
    return path;
}

}  // namespace

TEST(ProfiledNetworks, BothCollectivesFromTheirFits) {
    TempDir dir;
    io::CommProfile p = profile(4);
    io::ComputeProfile compute;
    compute.model = "mlp";
    compute.batch_size = 32;
    compute.input_shape = {784};
    compute.classes = 10;
    compute.input = "MNIST";
    compute.forward = {1e-3, 1e-3};
    compute.backward = {2e-3, 2e-3};
    compute.forward_seconds = 1e-3;
    compute.backward_seconds = 2e-3;
    p.compute = compute;
    const std::string path = written(dir, "comm.h5", p);

    const app::ProfiledNetworks n = app::read_profiled_networks(path, app::CommModel::fit);
    EXPECT_EQ(n.backend, "gloo");
    EXPECT_EQ(n.world, 4);
    const perf::Network allreduce = perf::network_from_fit(perf::Collective::allreduce, 4, 8e-6, 1.25e9);
    const perf::Network allgather = perf::network_from_fit(perf::Collective::allgather, 4, 6e-6, 2.5e9);
    EXPECT_DOUBLE_EQ(n.allreduce.alpha, allreduce.alpha);
    EXPECT_DOUBLE_EQ(n.allreduce.bandwidth, allreduce.bandwidth);
    EXPECT_TRUE(n.allreduce.measured.sizes.empty());
    ASSERT_TRUE(n.has_allgather);
    EXPECT_DOUBLE_EQ(n.allgather.alpha, allgather.alpha);
    EXPECT_DOUBLE_EQ(n.allgather.bandwidth, allgather.bandwidth);
    ASSERT_TRUE(n.compute);
    EXPECT_EQ(n.compute->model, "mlp");
    EXPECT_DOUBLE_EQ(n.compute->backward_seconds, 2e-3);

    perf::Compute buckets;
    buckets.bucket_bytes = 1e6;
    const perf::Compute c = app::profiled_compute(*n.compute, buckets);
    EXPECT_DOUBLE_EQ(c.seconds, 3e-3);
    EXPECT_DOUBLE_EQ(c.backward_share, 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(c.bucket_bytes, 1e6);
}

TEST(ProfiledNetworks, MeasuredTimesUnderCommModelMeasured) {
    TempDir dir;
    const std::string path = written(dir, "comm.h5", profile(2));
    const app::ProfiledNetworks n = app::read_profiled_networks(path, app::CommModel::measured);
    EXPECT_EQ(n.allreduce.measured.sizes.size(), 3u);
    EXPECT_EQ(n.allreduce.measured.world, 2);
    EXPECT_EQ(n.allgather.measured.kind, perf::Collective::allgather);
    EXPECT_FALSE(n.compute);
}

TEST(ProfiledNetworks, AllgatherAsAllreduceWhereTheFileHasNone) {
    TempDir dir;
    io::CommProfile p = profile(4);
    p.collectives.pop_back();
    const app::ProfiledNetworks n = app::read_profiled_networks(written(dir, "comm.h5", p), app::CommModel::fit);
    EXPECT_FALSE(n.has_allgather);
    EXPECT_DOUBLE_EQ(n.allgather.alpha, n.allreduce.alpha);
    EXPECT_DOUBLE_EQ(n.allgather.bandwidth, n.allreduce.bandwidth);
}

TEST(ProfiledNetworks, RefusesAFileWithoutAllreduce) {
    TempDir dir;
    io::CommProfile p = profile(4);
    p.collectives.erase(p.collectives.begin());
    const std::string path = written(dir, "gather-only.h5", p);
    EXPECT_EQ(test::error_of([&] { app::read_profiled_networks(path, app::CommModel::fit); }),
              path + ": has no allreduce profile; run comm-profile with --collectives allreduce,allgather");
    EXPECT_THROW(app::read_profiled_networks(path, app::CommModel::fit), FileError);
}

TEST(ProfiledNetworks, RefusesOneRank) {
    TempDir dir;
    const std::string path = written(dir, "one-rank.h5", profile(1));
    EXPECT_EQ(test::error_of([&] { app::read_profiled_networks(path, app::CommModel::fit); }),
              path + ": was measured on 1 rank, which says nothing about the network; profile at least 2 ranks");
    EXPECT_THROW(app::read_profiled_networks(path, app::CommModel::fit), FileError);
    EXPECT_THROW(app::check_profiled_ranks(path, profile(1)), FileError);
    EXPECT_NO_THROW(app::check_profiled_ranks(path, profile(2)));
}
