// The iteration-time model, checked against hand-computed cases.
#include "base/error.hpp"
#include "perf/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace acc::perf;

TEST(Collectives, RingCostsFollowTheAlphaBetaModel) {
    Network net{1e-3, 1e9};
    EXPECT_DOUBLE_EQ(allreduce_seconds(net, 4, 1e9), 2 * 3 * 1e-3 + 2 * 3.0 / 4 * 1.0);
    EXPECT_DOUBLE_EQ(allgather_seconds(net, 4, 1e6), 3e-3 + 3e-3);
    EXPECT_EQ(allreduce_seconds(net, 1, 1e9), 0);
    EXPECT_EQ(allgather_seconds(net, 1, 1e9), 0);
    // ResNet-50's 102.2 MB on 8 workers at 10 Gbit/s: 143 ms (compressor-notes, section 5.2).
    EXPECT_NEAR(allreduce_seconds({0, 1.25e9}, 8, 102.2e6), 0.1431, 1e-4);
    // Allgather grows with W, allreduce hardly does.
    EXPECT_GT(allgather_seconds({0, 1e9}, 64, 1e6) / allgather_seconds({0, 1e9}, 8, 1e6), 8.9);
    EXPECT_LT(allreduce_seconds({0, 1e9}, 64, 1e6) / allreduce_seconds({0, 1e9}, 8, 1e6), 1.15);
}

TEST(Ddp, BucketsOverlapTheBackwardPass) {
    const double MiB = 1024.0 * 1024;
    Network net{0, 1000 * MiB};  // 1 MiB per ms; with W = 2 an allreduce of M costs M / bandwidth
    Compute compute;
    compute.seconds = 0.3;  // forward 0.1 s, backward 0.2 s
    // Model order: 30 MiB then 10 MiB. The 10 MiB gradient is ready first, at 0.1 + 0.2 / 4
    // = 0.15 s, and done at 0.16 s; the 30 MiB one is ready at 0.3 s and done at 0.33 s.
    Prediction p = predict_ddp(net, 2, {30 * MiB, 10 * MiB}, compute);
    EXPECT_NEAR(p.iteration_seconds, 0.33, 1e-12);
    EXPECT_NEAR(p.communication_seconds, 0.04, 1e-12);
    EXPECT_NEAR(p.exposed_seconds, 0.03, 1e-12);
    compute.seconds = 0;
    p = predict_ddp(net, 2, {30 * MiB, 10 * MiB}, compute);
    EXPECT_NEAR(p.iteration_seconds, 0.04, 1e-12);
    // Many small tensors share one bucket: one latency instead of many.
    Network slow{1e-3, 1e12};
    p = predict_ddp(slow, 2, std::vector<double>(100, 1000.0), compute);
    EXPECT_NEAR(p.communication_seconds, 2e-3 + 1e5 / 1e12, 1e-12);
    // One worker: nothing to communicate.
    EXPECT_EQ(predict_ddp(net, 1, {30 * MiB}, compute).iteration_seconds, 0);
}

TEST(Ddp, UnboundedBucketsExchangeAfterTheBackwardPass) {
    // Buckets without a cap (the automatic mode's price of compress_fsdp's exchange, inside
    // FSDP's all-reduce hook): everything is allreduced once, when the backward pass ends.
    const double MiB = 1024.0 * 1024;
    Network net{1e-3, 1000 * MiB};
    Compute compute;
    compute.seconds = 0.3;
    compute.bucket_bytes = compute.first_bucket_bytes = INFINITY;
    const Prediction p = predict_ddp(net, 2, {30 * MiB, 10 * MiB, 1000.0}, compute);
    const double once = allreduce_seconds(net, 2, 40 * MiB + 1000.0);
    EXPECT_NEAR(p.communication_seconds, once, 1e-12);
    EXPECT_NEAR(p.iteration_seconds, 0.3 + once, 1e-12);
    EXPECT_NEAR(p.exposed_seconds, once, 1e-12);
}

TEST(Compressed, EncodeCommunicationAndDecodeFollowTheBackwardPass) {
    const double MiB = 1024.0 * 1024;
    Network net{0, 1000 * MiB};
    Compute compute;
    compute.seconds = 0.3;
    Prediction p = predict_compressed(net, net, 2, {{Collective::allreduce, 1 * MiB}, {Collective::allgather, 0.5 * MiB}},
                                      0.002, 0.001, compute);
    EXPECT_NEAR(p.communication_seconds, 0.0015, 1e-12);
    EXPECT_NEAR(p.exposed_seconds, 0.0045, 1e-12);
    EXPECT_NEAR(p.iteration_seconds, 0.3045, 1e-12);
    // Allgathers on a network of their own: half the bandwidth doubles their cost only.
    Network slow{0, 500 * MiB};
    p = predict_compressed(net, slow, 2, {{Collective::allreduce, 1 * MiB}, {Collective::allgather, 0.5 * MiB}}, 0, 0,
                           compute);
    EXPECT_NEAR(p.communication_seconds, 0.002, 1e-12);
}

TEST(Network, FromAProfilesFit) {
    // An allreduce measured on 4 workers: t(S) = 60 us + S / 1e9. A ring allreduce has
    // 2 (4 - 1) = 6 steps and moves 2 (3/4) S per link, so 10 us a step and 1.5e9 B/s a link.
    Network n = network_from_fit(Collective::allreduce, 4, 60e-6, 1e9);
    EXPECT_NEAR(n.alpha, 10e-6, 1e-18);
    EXPECT_NEAR(n.bandwidth, 1.5e9, 1e-3);
    // The model then gives back the measured time at the measured size.
    EXPECT_NEAR(allreduce_seconds(n, 4, 8e6), 60e-6 + 8e6 / 1e9, 1e-15);
    // An allgather's S is all ranks' parts: t = alpha + 4 m / B for m bytes from each of 4.
    Network g = network_from_fit(Collective::allgather, 4, 30e-6, 2e9);
    EXPECT_NEAR(allgather_seconds(g, 4, 1e6), 30e-6 + 4e6 / 2e9, 1e-15);
    EXPECT_THROW(network_from_fit(Collective::allreduce, 1, 1e-5, 1e9), acc::Error);
    EXPECT_EQ(collective_seconds(n, Collective::broadcast, 1, 1e6), 0);
    EXPECT_NEAR(collective_seconds(n, Collective::broadcast, 4, 1.5e9), 30e-6 + 1.0, 1e-12);
    EXPECT_NEAR(collective_seconds(n, Collective::reduce_scatter, 4, 2e9), 30e-6 + 1.0, 1e-12);
}

// With measured times, a size between two measured ones costs what they measured,
// linearly between them; outside them, or for another collective or world size, the fit.
TEST(Network, MeasuredTimesReplaceTheFitBetweenMeasuredSizes) {
    Network g = network_from_fit(Collective::allgather, 2, 1e-3, 1e7);
    // Measured on 2 ranks: 8 KiB (below from_bytes: left out), 256 KiB in 12 ms, 512 KiB in 28 ms, 1 MiB in 58 ms.
    g.measured = measured_times(Collective::allgather, 2, {8192, 262144, 524288, 1048576}, {0.002, 0.012, 0.028, 0.058},
                                262144);
    ASSERT_EQ(g.measured.sizes, (std::vector<double>{262144, 524288, 1048576}));
    // 196608 bytes from each of 2 ranks: S = 393216, halfway between 256 and 512 KiB.
    EXPECT_NEAR(allgather_seconds(g, 2, 196608), 0.020, 1e-12);
    EXPECT_NEAR(allgather_seconds(g, 2, 131072), 0.012, 1e-12);  // the first measured size itself
    EXPECT_NEAR(allgather_seconds(g, 2, 524288), 0.058, 1e-12);  // the last
    // Below the first and past the last measured size, the fit: 1 ms + S / 1e7.
    EXPECT_NEAR(allgather_seconds(g, 2, 4096), 1e-3 + 8192 / 1e7, 1e-12);
    EXPECT_NEAR(allgather_seconds(g, 2, 1048576), 1e-3 + 2097152 / 1e7, 1e-12);
    // Another world size or collective: the ring model of the fit.
    EXPECT_NEAR(allgather_seconds(g, 4, 196608), 3 * 1e-3 + 3 * 196608 / 5e6, 1e-12);  // link bandwidth B/2
    EXPECT_NEAR(collective_seconds(g, Collective::broadcast, 2, 393216), 1e-3 + 393216 / 5e6, 1e-12);
    // What cannot be a measurement is refused.
    EXPECT_THROW(measured_times(Collective::allreduce, 2, {1, 2}, {0.1}, 0), acc::Error);
    EXPECT_THROW(measured_times(Collective::allreduce, 2, {2, 1}, {0.1, 0.2}, 0), acc::Error);
    EXPECT_THROW(measured_times(Collective::allreduce, 2, {1, 2}, {0.1, std::nan("")}, 0), acc::Error);
}
