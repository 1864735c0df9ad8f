// The exchange's level changes within a family (LevelChange::within_family) and its
// squared norms of a level (GradientExchange::squared_norms), which GraVAC decides
// with: a level's norm is that of what the step at that level sends, measuring changes
// no state, PowerSGD keeps Q's columns across ranks, DGC keeps its momentum across
// dense steps and applies it there, and a state with every column kept round-trips.
#include "base/error.hpp"
#include "exchange/gradient_exchange.hpp"
#include "support/thread_collectives.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <map>

using namespace acc::compress;
using namespace acc::exchange;
using acc::comm::Collectives;
using acc::test::thread_ranks;

namespace {

// Two matrices PowerSGD compresses at rank 3 and a vector.
std::vector<TensorInfo> tensors() { return {{"a.weight", {24, 40}}, {"a.bias", {24}}, {"b.weight", {16, 8, 3, 3}}}; }

std::vector<Spec> levels(const std::string& matrices) {
    return {parse_spec(matrices), no_compression(), parse_spec(matrices)};
}

std::vector<at::Tensor> gradients(int step, int rank = 0) {
    std::vector<at::Tensor> out;
    const auto t = tensors();
    for (size_t i = 0; i < t.size(); ++i) {
        auto generator = at::make_generator<at::CPUGeneratorImpl>(7000 + 1000 * rank + 10 * step + i);
        out.push_back(at::randn(t[i].shape, generator));
    }
    return out;
}

std::map<std::string, at::Tensor> state_map(const GradientExchange& x) {
    std::map<std::string, at::Tensor> out;
    for (auto& [name, t] : x.state()) out[name] = t;
    return out;
}

ExchangeOptions family_options(bool device_path = false) {
    ExchangeOptions o;
    o.level_change = LevelChange::within_family;
    o.compressors.powersgd.variant = PowerSgdVariant::accordion;
    o.device_path_on_cpu = device_path;
    o.seed = 5;
    return o;
}

const std::vector<size_t> kMatrices = {0, 2};

}  // namespace

// On one worker the step sends its own approximation: for every level, the squared norm
// measured before the step equals that of what the step sent, on both paths, however the
// level changed before. Measuring twice gives the same and changes no state.
TEST(ExchangeFamily, MeasuredNormIsWhatTheStepSends) {
    const std::map<std::string, std::vector<std::string>> families = {
        {"topk", {"topk:0.1", "topk:0.02", "none", "topk:0.1"}},
        {"dgc", {"dgc:0.1", "dgc:0.02", "none", "dgc:0.1"}},
        {"randomk", {"randomk:0.25", "randomk:0.1", "none", "randomk:0.25"}},
        {"powersgd", {"powersgd:3", "powersgd:1", "none", "powersgd:3", "powersgd:2"}}};
    for (bool device : {false, true})
        for (const auto& [family, sequence] : families)
            thread_ranks(1, [&](int, Collectives& comm) {
                GradientExchange x(tensors(), levels(sequence.front()), comm, family_options(device));
                for (size_t step = 0; step < 2 * sequence.size(); ++step) {
                    const std::vector<Spec> at_level = levels(sequence[step % sequence.size()]);
                    auto g = gradients(static_cast<int>(step));
                    const auto before = state_map(x);
                    const auto norms = x.squared_norms(g, kMatrices, {at_level, levels("none")});
                    const auto again = x.squared_norms(g, kMatrices, {at_level, levels("none")});
                    EXPECT_EQ(norms, again) << family;
                    const auto after = state_map(x);
                    for (const auto& [name, t] : before) {
                        if (name.find("powersgd") != std::string::npos) continue;  // Q's columns may be drawn
                        EXPECT_TRUE(after.count(name) && after.at(name).equal(t)) << family << " " << name;
                    }
                    EXPECT_NEAR(norms[2], norms[0], 1e-9 * norms[0]) << "a level sending whole keeps all";
                    x.set_levels(at_level);
                    x.step(g);
                    double sent = 0;
                    for (size_t i : kMatrices) sent += g[i].to(at::kDouble).square().sum().item<double>();
                    EXPECT_NEAR(norms[1], sent, 1e-4 * sent) << family << " step " << step << " device " << device;
                    EXPECT_LT(norms[1], norms[0] * (1 + 1e-9)) << family;
                }
            });
}

// A lower rank takes Q's first columns and keeps the others; going back up takes them
// again; a dense step leaves Q as it was; the checkpoint holds every column, which a
// restart-kind exchange refuses and a within-family one restores.
TEST(ExchangeFamily, PowersgdKeepsQsColumnsAcrossRanks) {
    thread_ranks(1, [&](int, Collectives& comm) {
        GradientExchange x(tensors(), levels("powersgd:3"), comm, family_options());
        x.step(gradients(0));
        const at::Tensor q3 = state_map(x).at("a.weight/powersgd_q");
        ASSERT_EQ(q3.sizes(), (std::vector<std::int64_t>{40, 3}));
        x.set_levels(levels("powersgd:1"));
        EXPECT_TRUE(state_map(x).at("a.weight/powersgd_q").equal(q3)) << "a rank change keeps every column";
        x.step(gradients(1));
        const at::Tensor q1 = state_map(x).at("a.weight/powersgd_q");
        EXPECT_FALSE(q1.narrow(1, 0, 1).equal(q3.narrow(1, 0, 1))) << "the step replaced the first column";
        EXPECT_TRUE(q1.narrow(1, 1, 2).equal(q3.narrow(1, 1, 2))) << "and kept the others";
        x.set_levels(levels("none"));
        x.step(gradients(2));
        EXPECT_TRUE(state_map(x).at("a.weight/powersgd_q").equal(q1)) << "a dense step leaves Q";
        EXPECT_FALSE(state_map(x).count("a.weight/error")) << "a dense step sends the memory whole";
        x.set_levels(levels("powersgd:2"));
        const auto saved = x.state();

        GradientExchange restarted(tensors(), levels("powersgd:2"), comm);
        EXPECT_THROW(restarted.load_state(saved), acc::Error) << "a 3-column Q for rank 2";
        GradientExchange y(tensors(), levels("powersgd:2"), comm, family_options());
        y.load_state(saved);
        EXPECT_TRUE(state_map(y).at("a.weight/powersgd_q").equal(q1));
        auto gx = gradients(3), gy = gradients(3);
        x.step(gx);
        y.step(gy);
        for (size_t i = 0; i < gx.size(); ++i) EXPECT_TRUE(gx[i].equal(gy[i])) << i;
        EXPECT_THROW(y.load_state({{"a.bias/powersgd_q", at::zeros({24, 1})}}), acc::Error);
        EXPECT_THROW(y.load_state({{"a.weight/powersgd_q", at::zeros({40, 25})}}), acc::Error) << "more than min(rows, cols)";
    });
}

// DGC on a dense step: what is sent is the memory plus the momentum-corrected gradient
// (u = m u + g), the memory is cleared, and u is kept for the steps after; the state
// names it throughout.
TEST(ExchangeFamily, DgcMomentumCorrectsDenseStepsAndIsKept) {
    for (bool device : {false, true})
        thread_ranks(1, [&](int, Collectives& comm) {
            ExchangeOptions o = family_options(device);
            o.compressors.dgc.momentum = 0.5;
            GradientExchange x(tensors(), levels("dgc:0.05"), comm, o);
            x.step(gradients(0));
            auto s = state_map(x);
            const at::Tensor u = s.at("a.weight/dgc_momentum").view({24, 40});
            const at::Tensor memory = s.at("a.weight/error").view({24, 40});
            x.set_levels(levels("none"));
            EXPECT_TRUE(state_map(x).at("a.weight/dgc_momentum").view({24, 40}).equal(u));
            auto g = gradients(1);
            const at::Tensor expected_u = u * 0.5 + g[0];
            const at::Tensor expected_sent = memory + expected_u;
            x.step(g);
            EXPECT_TRUE(at::allclose(g[0], expected_sent, 1e-6, 1e-6)) << "device " << device;
            s = state_map(x);
            EXPECT_FALSE(s.count("a.weight/error"));
            EXPECT_TRUE(at::allclose(s.at("a.weight/dgc_momentum").view({24, 40}), expected_u, 1e-6, 1e-6));
            x.set_levels(levels("dgc:0.05"));
            EXPECT_TRUE(at::allclose(state_map(x).at("a.weight/dgc_momentum").view({24, 40}), expected_u, 1e-6, 1e-6))
                << "taken up again by the family's level";
        });
}

// Level sets that do not fit, and levels it cannot measure, are refused.
TEST(ExchangeFamily, RefusesWhatItCannotMeasure) {
    thread_ranks(1, [&](int, Collectives& comm) {
        GradientExchange x(tensors(), levels("topk:0.1"), comm, family_options());
        auto g = gradients(0);
        EXPECT_THROW(x.squared_norms(g, kMatrices, {{no_compression()}}), acc::UsageError);
        EXPECT_THROW(x.squared_norms(g, kMatrices, {levels("signsgd")}), acc::UsageError);
    });
}
