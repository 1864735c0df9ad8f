// The automatic mode's run-time part (lib/app/auto_mode), as train-dist and the
// Python package drive it, on one rank standing in for the world: the first plan
// before the compute is known (every parameter uncompressed, "measuring"), the
// compute taken from the caller or from an epoch, the guard on a link that costs
// nothing, and when a drifted prediction is measured again.
#include "app/auto_mode.hpp"
#include "base/error.hpp"
#include "comm/loopback.hpp"
#include "compress/spec.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace acc;
using acc::compress::parse_spec;

namespace {

std::vector<io::Parameter> model() { return {{"fc1.weight", {32, 16}}, {"fc1.bias", {32}}, {"fc2.weight", {4, 32}}}; }

std::vector<compress::Spec> candidates() {
    return {compress::no_compression(), parse_spec("powersgd:2"), parse_spec("powersgd:1"), parse_spec("topk:0.01")};
}

app::AutoMode make_mode() {
    app::AutoSettings s;
    s.low = parse_spec("powersgd:2");
    s.high = parse_spec("powersgd:1");
    return app::AutoMode(s, model(), candidates(), exchange::ExchangeOptions());
}

std::vector<at::Tensor> sums() {
    at::manual_seed(1);
    std::vector<at::Tensor> out;
    for (const auto& p : model()) out.push_back(at::randn(p.shape));
    return out;
}

void measure(app::AutoMode& mode, const std::function<app::ComputeSeconds()>& compute = {}) {
    comm::LoopbackCollectives one(1);
    mode.measure(one, at::Device(at::kCPU), one, true, compute);
}

const std::vector<std::uint8_t> kCritical = {1, 1, 1};

}  // namespace

TEST(AutoMode, BeforeTheComputeIsKnownEveryParameterIsSentUncompressedToTimeIt) {
    app::AutoMode mode = make_mode();
    EXPECT_TRUE(mode.due(0));
    measure(mode);  // no compute callback: the package's first epoch gives it
    EXPECT_FALSE(mode.knows_compute());
    const plan::AutoPlan& p = mode.plan(kCritical);
    EXPECT_EQ(p.level, (std::vector<std::int32_t>{0, 0, 0}));
    for (auto r : p.reason) EXPECT_EQ(r, plan::AutoReason::measuring);
    EXPECT_FALSE(p.pays);
    EXPECT_EQ(mode.summary().rfind("measuring: ", 0), 0u) << mode.summary();
    EXPECT_STREQ(plan::auto_reason_name(plan::AutoReason::measuring), "measuring");

    // The epoch's own compute: its seconds less the exchange's, per step.
    mode.after_epoch(sums(), 1.0, 0.8, 10);
    EXPECT_TRUE(mode.knows_compute());
    EXPECT_FALSE(mode.due(1));  // nothing was predicted, so nothing drifted
    mode.skip_measure();
    const plan::AutoPlan& next = mode.plan(kCritical);
    const io::MetricsAuto m = mode.metrics();
    EXPECT_DOUBLE_EQ(m.compute_seconds, 0.08);
    EXPECT_EQ(m.measured, 0);
    // One rank: the link costs nothing, so no compressed plan beats uncompressed.
    EXPECT_FALSE(next.pays);
    EXPECT_EQ(next.reason[0], plan::AutoReason::does_not_pay);
    EXPECT_EQ(next.reason[1], plan::AutoReason::vector);
    EXPECT_EQ(mode.summary().rfind("does not pay: ", 0), 0u) << mode.summary();
}

TEST(AutoMode, TakesTheCallersComputeOnceAndItsBackwardShare) {
    app::AutoMode mode = make_mode();
    int calls = 0;
    auto compute = [&calls] {
        ++calls;
        return app::ComputeSeconds{0.01, 0.03};
    };
    measure(mode, compute);
    EXPECT_TRUE(mode.knows_compute());
    mode.plan(kCritical);
    EXPECT_DOUBLE_EQ(mode.metrics().compute_seconds, 0.04);
    measure(mode, compute);  // measured again: the compute is not
    EXPECT_EQ(calls, 1);
}

TEST(AutoMode, MeasuresADriftedPredictionAgainOnlyWithinItsShareOfTheRun) {
    app::AutoMode mode = make_mode();
    measure(mode, [] { return app::ComputeSeconds{0.01, 0.02}; });
    const double predicted = mode.plan(kCritical).seconds;
    ASSERT_GT(predicted, 0);
    // Within the drift of 25 %: not measured again.
    mode.after_epoch(sums(), 10 * predicted * 1.2, NAN, 10);
    EXPECT_FALSE(mode.due(1));
    // Far off, after a long epoch: measuring again is within 3 % of the time trained.
    const double again = mode.plan(kCritical).seconds;
    mode.after_epoch(sums(), 1000.0, NAN, 10);
    ASSERT_GT(100.0, 1.25 * again);
    EXPECT_TRUE(mode.due(2));
}

TEST(AutoMode, RefusesSumsOfAnotherModel) {
    app::AutoMode mode = make_mode();
    measure(mode);
    mode.plan(kCritical);
    std::vector<at::Tensor> two = sums();
    two.pop_back();
    EXPECT_THROW(mode.after_epoch(two, 1.0, 0.5, 10), Error);
}
