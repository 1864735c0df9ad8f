// GraVAC's per-step exchange (exchange/gravac.hpp) on thread ranks: every rank
// decides alike, error feedback conserves the gradient, the bytes sent are those of
// the chosen level, a restored state continues the controller, a step's throughput
// is its own samples over its own time (a short batch and the evaluation between
// epochs do not move the decision), and multi-level top-k
// equals direct top-k; powersgd maps factors to ranks per matrix, its candidate is
// PowerSGD at the candidate's rank, and its bytes are those of --compress powersgd:R.
#include "base/error.hpp"
#include "compress/codecs.hpp"
#include "compress/spec.hpp"
#include "exchange/gravac.hpp"
#include "regime/gravac.hpp"
#include "support/thread_collectives.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <map>
#include <set>

namespace acc::exchange {
namespace {

std::vector<compress::TensorInfo> describe(const std::vector<torch::Tensor>& tensors) {
    std::vector<compress::TensorInfo> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
        compress::TensorInfo p;
        p.name = "p" + std::to_string(i);
        p.shape = tensors[i].sizes().vec();
        out.push_back(p);
    }
    return out;
}

std::vector<torch::Tensor> model() { return {torch::zeros({8, 16}), torch::zeros({8}), torch::zeros({4, 10})}; }

// Rank r's gradient at step s: heavy-tailed, so that a few entries carry most of the norm.
std::vector<torch::Tensor> gradients(int rank, std::int64_t step, double spread) {
    torch::manual_seed(static_cast<std::uint64_t>(1000 * step + rank));
    std::vector<torch::Tensor> out;
    for (const auto& p : model()) out.push_back(torch::randn(p.sizes()).pow(3) * spread + 0.01);
    return out;
}

GravacExchangeOptions options(const std::string& family, std::int64_t window, double epsilon) {
    GravacExchangeOptions o;
    o.family = regime::parse_gravac_family(family);
    o.settings = regime::gravac_defaults(2);
    o.settings.window = window;
    o.settings.epsilon = epsilon;
    o.settings.smoothing = 0.5;
    o.settings.theta_min = 4;
    o.settings.theta_max = 64;
    o.samples_per_step = 32;
    // Read twice a step where GravacStepInfo has no start: every step takes 0.25 s.
    o.clock = [t = SteadyClock::time_point{}]() mutable { return t += std::chrono::milliseconds(250); };
    return o;
}

TEST(GravacExchange, RanksTakeTheSameDecisionsFromDifferentGradients) {
    for (const std::string family : {"topk", "dgc", "randomk"}) {
        test::ThreadGroup group(2);
        std::vector<std::vector<regime::GravacStep>> steps(2);
        std::vector<regime::GravacState> states(2);
        group.run([&](int rank, comm::Collectives& comm) {
            auto tensors = model();
            GravacExchange x(describe(tensors), comm, torch::kCPU, options(family, 3, 0.6));
            for (std::int64_t s = 0; s < 14; ++s) {
                auto g = gradients(rank, s, rank == 0 ? 1.0 : 3.0);
                x.exchange(g, GravacStepInfo{s / 7});
            }
            steps[static_cast<size_t>(rank)] = x.take_steps();
            states[static_cast<size_t>(rank)] = x.controller().state();
        });
        ASSERT_EQ(steps[0].size(), 14u) << family;
        std::set<double> factors;
        for (size_t i = 0; i < steps[0].size(); ++i) {
            const auto &a = steps[0][i], &b = steps[1][i];
            EXPECT_EQ(a.factor, b.factor) << family << " step " << i;
            EXPECT_EQ(a.choice, b.choice) << family << " step " << i;
            EXPECT_EQ(a.candidate, b.candidate) << family << " step " << i;
            EXPECT_EQ(a.gain_min, b.gain_min) << family << " step " << i;
            EXPECT_EQ(a.epoch, static_cast<std::int64_t>(i) / 7);
            factors.insert(a.factor);
        }
        EXPECT_EQ(states[0].theta_min, states[1].theta_min) << family;
        EXPECT_EQ(states[0].candidate, states[1].candidate) << family;
        EXPECT_GE(states[0].checks, 4) << family;
    }
}

// On one rank the mean is this rank's own C(g_o): what was sent plus the new memory
// equals the gradient plus the old memory, entry by entry.
TEST(GravacExchange, ErrorFeedbackConservesTheGradient) {
    for (const std::string family : {"topk", "randomk", "powersgd"}) {
        for (double epsilon : {0.3, 0.999, 1.0}) {
            test::ThreadGroup group(1);
            group.run([&](int, comm::Collectives& comm) {
                auto tensors = model();
                const auto names = describe(tensors);
                GravacExchange x(names, comm, torch::kCPU, options(family, 2, epsilon));
                for (std::int64_t s = 0; s < 6; ++s) {
                    auto old_state = x.state();
                    auto g = gradients(0, s, 1.0);
                    auto sent = g;
                    for (auto& t : sent) t = t.clone();
                    x.exchange(sent, GravacStepInfo{});
                    auto new_state = x.state();
                    for (size_t p : {size_t{0}, size_t{2}}) {
                        // No error entry: the memory is empty (all zero).
                        const std::string error = names[p].name + "/error";
                        auto memory = [&](const TensorMap& state) {
                            return state.count(error) ? state.at(error) : torch::zeros_like(g[p]);
                        };
                        torch::Tensor lhs = sent[p] + memory(new_state);
                        torch::Tensor rhs = g[p] + memory(old_state);
                        EXPECT_TRUE(torch::allclose(lhs, rhs, 1e-5, 1e-6)) << family << " eps " << epsilon << " step " << s;
                    }
                    EXPECT_TRUE(torch::equal(sent[1], g[1])) << "vectors are sent whole";
                }
            });
        }
    }
}

TEST(GravacExchange, BytesAreThoseOfTheChosenLevel) {
    std::set<int> choices;
    for (double epsilon : {0.5, 1.0}) {
        test::ThreadGroup group(2);
        std::vector<std::int64_t> bytes(2);
        std::vector<std::vector<regime::GravacStep>> steps(2);
        group.run([&](int rank, comm::Collectives& comm) {
            auto tensors = model();
            GravacExchange x(describe(tensors), comm, torch::kCPU, options("topk", 2, epsilon));
            for (std::int64_t s = 0; s < 10; ++s) {
                auto g = gradients(rank, s, 1.0);
                x.exchange(g, GravacStepInfo{});
            }
            bytes[static_cast<size_t>(rank)] = x.take_totals().bytes;
            steps[static_cast<size_t>(rank)] = x.take_steps();
        });
        std::int64_t expected = 0;
        for (const auto& s : steps[0]) {
            expected += 4 * 8 + 8;  // the norms' and samples' allreduce, the step time's
            expected += 8 * 4;      // the bias, whole
            for (const auto& shape : {std::vector<std::int64_t>{8, 16}, std::vector<std::int64_t>{4, 10}}) {
                if (s.choice == 2)
                    expected += 4 * shape[0] * shape[1];
                else
                    expected += compress::wire_bytes(compress::Spec{"topk", 1 / s.factor}, shape);
            }
            choices.insert(s.choice);
        }
        EXPECT_EQ(bytes[0], expected) << "epsilon " << epsilon;
        EXPECT_EQ(bytes[1], expected) << "epsilon " << epsilon;
    }
    EXPECT_TRUE(choices.count(2)) << "epsilon 1 sends dense";
    EXPECT_GE(choices.size(), 2u) << "the test should see a compressed level too";
}

TEST(GravacExchange, RestoredStateContinuesTheController) {
    test::ThreadGroup group(1);
    group.run([&](int, comm::Collectives& comm) {
        auto tensors = model();
        const auto names = describe(tensors);
        GravacExchange a(names, comm, torch::kCPU, options("dgc", 3, 0.6));
        for (std::int64_t s = 0; s < 8; ++s) {
            auto g = gradients(0, s, 1.0);
            a.exchange(g, GravacStepInfo{});
        }
        GravacExchange b(names, comm, torch::kCPU, options("dgc", 3, 0.6));
        b.load_state(a.state());
        const auto sa = a.controller().state(), sb = b.controller().state();
        EXPECT_EQ(sa.steps, sb.steps);
        EXPECT_EQ(sa.theta_min, sb.theta_min);
        EXPECT_EQ(sa.candidate, sb.candidate);
        EXPECT_EQ(sa.gain_min, sb.gain_min);
        EXPECT_EQ(sa.gain_candidate, sb.gain_candidate);
        EXPECT_EQ(sa.checks, sb.checks);
        for (std::int64_t s = 8; s < 12; ++s) {
            auto ga = gradients(0, s, 1.0), gb = gradients(0, s, 1.0);
            a.exchange(ga, GravacStepInfo{});
            b.exchange(gb, GravacStepInfo{});
            for (size_t p = 0; p < ga.size(); ++p) EXPECT_TRUE(torch::equal(ga[p], gb[p])) << "step " << s;
        }
        EXPECT_THROW(b.load_state({{"nothing/error", torch::zeros({2})}}), Error);
        EXPECT_THROW(b.load_state({{"p0/error", torch::zeros({3})}}), Error);
        EXPECT_THROW(b.load_state({{"gravac/inputs", torch::zeros({3, 2})}}), Error);
    });
}

TEST(GravacExchange, RefusesAnUnknownFamily) {
    test::ThreadGroup group(1);
    group.run([&](int, comm::Collectives& comm) {
        auto tensors = model();
        for (const int index : {4, 9, -1}) {
            GravacExchangeOptions o = options("topk", 2, 0.7);
            o.family = static_cast<regime::GravacFamily>(index);
            EXPECT_THROW(GravacExchange(describe(tensors), comm, torch::kCPU, o), UsageError) << index;
        }
    });
}


// Throughput is the samples a step processed over the step's own time, and the table
// holds a window's median: an epoch's short last batch and the test-set evaluation
// between epochs must not change what GraVAC decides. Epochs of 3 steps (the third
// holds 4 samples a rank instead of 32), a window of 5 steps, 2 ranks. Each matrix's
// gradient has one nonzero entry, which every top-k keeps, so both gains are exactly
// 1 and only the throughputs can move a decision. A clean run (every step full,
// nothing between epochs) saturates at its second check; counting N b for the short
// step, timing from the last exchange's end (evaluation included) or keeping the last
// step's value would not (nor does a window's mean, which two short steps pull down).
TEST(GravacExchange, ShortLastBatchAndEvaluationDoNotMoveTheDecision) {
    using std::chrono::milliseconds;
    constexpr std::int64_t kSteps = 15, kPerEpoch = 3;
    struct Run {
        std::vector<regime::GravacStep> steps;
        regime::GravacState state;
        torch::Tensor inputs;
    };
    auto run = [&](bool noisy, regime::GravacStatistic statistic) {
        test::ThreadGroup group(2);
        std::vector<Run> out(2);
        group.run([&](int rank, comm::Collectives& comm) {
            auto tensors = model();
            SteadyClock::time_point t = SteadyClock::time_point{} + milliseconds(1000), end;
            GravacExchangeOptions o = options("topk", 5, 0.6);
            o.settings.theta_max = 32;
            o.settings.statistic = statistic;
            o.clock = [&end] { return end; };
            GravacExchange x(describe(tensors), comm, torch::kCPU, o);
            for (std::int64_t s = 0; s < kSteps; ++s) {
                const std::int64_t epoch = s / kPerEpoch, i = s % kPerEpoch;
                const bool last = i == kPerEpoch - 1;
                if (noisy && i == 0 && epoch > 0) t += milliseconds(5000);  // the evaluation
                const SteadyClock::time_point started = t;
                end = t += milliseconds(noisy && last ? 100 : 500);
                std::vector<torch::Tensor> g;
                for (const auto& p : model()) g.push_back(torch::zeros(p.sizes()));
                g[0][1][2].fill_(1.0 + 0.1 * static_cast<double>(s + rank));
                g[1].fill_(0.3);
                g[2][3][4].fill_(-2.0);
                x.exchange(g, GravacStepInfo{epoch, noisy && last ? 4 : 32, started});
            }
            out[static_cast<size_t>(rank)] = {x.take_steps(), x.controller().state(), x.state().at("gravac/inputs")};
        });
        return out[0];
    };
    const Run clean = run(false, regime::GravacStatistic::median);
    const Run noisy = run(true, regime::GravacStatistic::median);

    // What the steps measured: 2 x 32 samples in 0.5 s; the short step 2 x 4 in 0.1 s;
    // the first step of an epoch its own 0.5 s, not the 5 s evaluation before it.
    ASSERT_EQ(noisy.inputs.size(0), kSteps);
    for (std::int64_t s = 0; s < kSteps; ++s) {
        EXPECT_DOUBLE_EQ(clean.inputs[s][3].item<double>(), 128) << "step " << s;
        EXPECT_DOUBLE_EQ(noisy.inputs[s][3].item<double>(), s % kPerEpoch == kPerEpoch - 1 ? 80 : 128) << "step " << s;
    }
    // The clean run: candidate 8x, then 16x with theta_min raised (gains equal);
    // at the second check 8x and 16x both hold 128, so it saturates and stays at 16x.
    EXPECT_EQ(clean.state.checks, 3);
    EXPECT_TRUE(clean.state.saturated);
    EXPECT_EQ(clean.state.candidate, 16);
    ASSERT_EQ(clean.state.throughput.size(), 2u);
    EXPECT_DOUBLE_EQ(clean.state.throughput[0].throughput, 128);
    EXPECT_DOUBLE_EQ(clean.state.throughput[1].throughput, 128);

    // The noisy run decides exactly as the clean one, step for step.
    ASSERT_EQ(noisy.steps.size(), clean.steps.size());
    for (size_t i = 0; i < clean.steps.size(); ++i) {
        EXPECT_EQ(noisy.steps[i].factor, clean.steps[i].factor) << "step " << i;
        EXPECT_EQ(noisy.steps[i].choice, clean.steps[i].choice) << "step " << i;
        EXPECT_EQ(noisy.steps[i].theta_min, clean.steps[i].theta_min) << "step " << i;
    }
    EXPECT_EQ(noisy.state.candidate, clean.state.candidate);
    EXPECT_EQ(noisy.state.theta_min, clean.state.theta_min);
    EXPECT_EQ(noisy.state.saturated, clean.state.saturated);
    ASSERT_EQ(noisy.state.throughput.size(), 2u);
    EXPECT_DOUBLE_EQ(noisy.state.throughput[1].throughput, 128);

    // The same noise through a window's mean: the second window's two short steps
    // pull 16x 8 % below 8x, so it does not saturate and moves on to 32x.
    const Run mean = run(true, regime::GravacStatistic::mean);
    EXPECT_FALSE(mean.state.saturated);
    EXPECT_EQ(mean.state.candidate, 32);
}
// Paper, section IV-C: compressing the theta_min result again gives what compressing
// g directly at the larger factor gives, for top-k.
TEST(GravacMultiLevel, TopkOfTopkEqualsTopk) {
    torch::manual_seed(5);
    for (int trial = 0; trial < 5; ++trial) {
        const std::int64_t n = 1000;
        torch::Tensor g = torch::randn({n});
        compress::CodecOptions o;
        auto k1 = compress::make_codec(compress::Spec{"topk", 0.1}, {n}, o);
        auto k2a = compress::make_codec(compress::Spec{"topk", 0.025}, {n}, o);
        auto k2b = compress::make_codec(compress::Spec{"topk", 0.025}, {n}, o);
        std::vector<float> r1(g.data_ptr<float>(), g.data_ptr<float>() + n), direct = r1;
        std::vector<std::uint8_t> p1(static_cast<size_t>(k1->buffer_bytes())), p2(static_cast<size_t>(k2a->buffer_bytes())),
            p3(p2.size());
        k1->encode(r1.data(), true, 1, p1.data());
        std::vector<float> c1(n), c2(n), c3(n);
        for (std::int64_t i = 0; i < n; ++i) c1[i] = g[i].item<float>() - r1[i];
        std::vector<float> r2 = c1;
        k2a->encode(r2.data(), true, 1, p2.data());
        k2b->encode(direct.data(), true, 1, p3.data());
        ASSERT_TRUE(k2a->decode({p2.data()}, c2.data()));
        ASSERT_TRUE(k2b->decode({p3.data()}, c3.data()));
        EXPECT_EQ(c2, c3) << "trial " << trial;
        EXPECT_EQ(p2, p3) << "trial " << trial;
    }
}

// The device codecs (ATen ops, run here on CPU tensors) against the host codecs: the
// same decisions, bytes, gradients and error memories on two ranks. (dgc's device
// codec selects an exact top-k instead of the host's sampled threshold, so its
// results differ by design; DevicePathDgcRanksAgree covers it.)
TEST(GravacExchange, DevicePathMatchesTheHostPath) {
    // The inputs drawn before the threads start (torch's global generator is shared).
    std::vector<std::vector<std::vector<torch::Tensor>>> inputs(2);
    for (int rank = 0; rank < 2; ++rank)
        for (std::int64_t s = 0; s < 14; ++s) inputs[static_cast<size_t>(rank)].push_back(gradients(rank, s, rank == 0 ? 1.0 : 3.0));
    for (const std::string family : {"topk", "randomk"}) {
        std::map<bool, std::vector<std::vector<regime::GravacStep>>> steps;
        std::map<bool, std::vector<std::vector<torch::Tensor>>> grads;
        std::map<bool, std::vector<TensorMap>> states;
        std::map<bool, std::vector<std::int64_t>> bytes;
        for (bool device : {false, true}) {
            test::ThreadGroup group(2);
            steps[device].resize(2);
            grads[device].resize(2);
            states[device].resize(2);
            bytes[device].resize(2);
            group.run([&](int rank, comm::Collectives& comm) {
                auto tensors = model();
                // randomk keeps about a quarter of the norm at theta_min 4: epsilon near it
                // sends theta_min on some steps and dense on others.
                auto o = options(family, 3, family == "randomk" ? 0.26 : 0.6);
                o.device_path_on_cpu = device;
                GravacExchange x(describe(tensors), comm, torch::kCPU, o);
                const auto r = static_cast<size_t>(rank);
                for (std::int64_t s = 0; s < 14; ++s) {
                    std::vector<torch::Tensor> g;
                    for (const auto& t : inputs[r][static_cast<size_t>(s)]) g.push_back(t.clone());
                    x.exchange(g, GravacStepInfo{});
                    for (auto& t : g) grads[device][r].push_back(t);
                }
                steps[device][r] = x.take_steps();
                states[device][r] = x.state();
                bytes[device][r] = x.take_totals().bytes;
            });
        }
        std::set<int> choices;
        for (size_t r = 0; r < 2; ++r) {
            ASSERT_EQ(steps[false][r].size(), steps[true][r].size());
            for (size_t i = 0; i < steps[false][r].size(); ++i) {
                EXPECT_EQ(steps[false][r][i].factor, steps[true][r][i].factor) << family << " step " << i;
                EXPECT_EQ(steps[false][r][i].choice, steps[true][r][i].choice) << family << " step " << i;
                EXPECT_NEAR(steps[false][r][i].gain_min, steps[true][r][i].gain_min, 1e-9) << family << " step " << i;
                choices.insert(steps[false][r][i].choice);
            }
            EXPECT_EQ(bytes[false][r], bytes[true][r]) << family;
            for (size_t k = 0; k < grads[false][r].size(); ++k)
                EXPECT_TRUE(torch::allclose(grads[false][r][k], grads[true][r][k], 1e-5, 1e-5)) << family << " tensor " << k;
            for (const auto& [name, t] : states[false][r]) {
                ASSERT_TRUE(states[true][r].count(name)) << family << " " << name;
                if (name == "gravac/inputs")
                    EXPECT_TRUE(torch::allclose(t.narrow(1, 0, 3), states[true][r].at(name).narrow(1, 0, 3), 1e-9, 1e-12));
                else
                    EXPECT_TRUE(torch::allclose(t, states[true][r].at(name), 1e-5, 1e-5)) << family << " " << name;
            }
        }
        EXPECT_GE(choices.size(), 2u) << family << ": the test should see more than one level";
    }
}

TEST(GravacExchange, DevicePathDgcRanksAgree) {
    test::ThreadGroup group(2);
    std::vector<std::vector<regime::GravacStep>> steps(2);
    std::vector<std::vector<torch::Tensor>> last(2);
    group.run([&](int rank, comm::Collectives& comm) {
        auto tensors = model();
        auto o = options("dgc", 3, 0.6);
        o.device_path_on_cpu = true;
        GravacExchange x(describe(tensors), comm, torch::kCPU, o);
        for (std::int64_t s = 0; s < 14; ++s) {
            auto g = gradients(rank, s, rank == 0 ? 1.0 : 3.0);
            x.exchange(g, GravacStepInfo{});
            last[static_cast<size_t>(rank)] = g;
        }
        steps[static_cast<size_t>(rank)] = x.take_steps();
    });
    std::set<int> choices;
    for (size_t i = 0; i < steps[0].size(); ++i) {
        EXPECT_EQ(steps[0][i].factor, steps[1][i].factor) << "step " << i;
        EXPECT_EQ(steps[0][i].gain_min, steps[1][i].gain_min) << "step " << i;
        choices.insert(steps[0][i].choice);
    }
    EXPECT_GE(choices.size(), 2u);
    for (size_t p = 0; p < last[0].size(); ++p) EXPECT_TRUE(torch::equal(last[0][p], last[1][p])) << "parameter " << p;
}

// A state taken on the device path continues on the host path as if it had run there.
TEST(GravacExchange, DevicePathStateContinuesOnTheHost) {
    test::ThreadGroup group(1);
    group.run([&](int, comm::Collectives& comm) {
        auto tensors = model();
        const auto names = describe(tensors);
        auto od = options("topk", 3, 0.6);
        od.device_path_on_cpu = true;
        GravacExchange a(names, comm, torch::kCPU, od), b(names, comm, torch::kCPU, options("topk", 3, 0.6));
        for (std::int64_t s = 0; s < 6; ++s) {
            auto ga = gradients(0, s, 1.0), gb = gradients(0, s, 1.0);
            a.exchange(ga, GravacStepInfo{});
            b.exchange(gb, GravacStepInfo{});
        }
        GravacExchange c(names, comm, torch::kCPU, options("topk", 3, 0.6));
        c.load_state(a.state());
        for (std::int64_t s = 6; s < 9; ++s) {
            auto gb = gradients(0, s, 1.0), gc = gradients(0, s, 1.0);
            b.exchange(gb, GravacStepInfo{});
            c.exchange(gc, GravacStepInfo{});
            for (size_t p = 0; p < gb.size(); ++p) EXPECT_TRUE(torch::allclose(gb[p], gc[p], 1e-5, 1e-5)) << "step " << s;
        }
    });
}

// ---------------------------------------------------------------- powersgd

// Matrices large enough for ranks above 1 at theta_min 4, and one PowerSGD sends whole.
std::vector<torch::Tensor> powersgd_model() {
    return {torch::zeros({32, 64}), torch::zeros({32}), torch::zeros({16, 24}), torch::zeros({3, 3})};
}

// Low-rank signal plus noise that differs by rank and step, so that gains move.
std::vector<torch::Tensor> powersgd_gradients(int rank, std::int64_t step, double noise) {
    torch::manual_seed(static_cast<std::uint64_t>(7000 + 100 * step + rank));
    std::vector<torch::Tensor> out;
    for (const auto& p : powersgd_model()) {
        if (p.dim() < 2) {
            out.push_back(torch::randn(p.sizes()));
            continue;
        }
        torch::Tensor u = torch::randn({p.size(0), 2}), v = torch::randn({p.size(1), 2});
        out.push_back(u.mm(v.t()) + noise * torch::randn(p.sizes()));
    }
    return out;
}

TEST(GravacPowersgd, RanksOfEachMatrixByHand) {
    test::ThreadGroup group(1);
    group.run([&](int, comm::Collectives& comm) {
        std::vector<torch::Tensor> tensors = {torch::zeros({32, 64}), torch::zeros({32}), torch::zeros({16, 24}),
                                              torch::zeros({3, 3}), torch::zeros({16, 3, 3, 3}),
                                              torch::zeros({4, 4})};
        GravacExchange x(describe(tensors), comm, torch::kCPU, options("powersgd", 2, 0.7));
        // 32 x 64: 2048 / (f 96); 16 x 24: 384 / (f 40); a conv weight is 16 x 27: 432 / (f 43).
        // 3 x 3 and 4 x 4 at rank 1 send 6 or 8 floats of 9 or 16: PowerSGD sends them whole (0).
        EXPECT_EQ(x.powersgd_ranks(4), (std::vector<std::int64_t>{5, 2, 0, 2, 0}));    // 5.3, 2.4, 2.5
        EXPECT_EQ(x.powersgd_ranks(10), (std::vector<std::int64_t>{2, 1, 0, 1, 0}));   // 2.1, 0.96 -> 1, 1.004
        EXPECT_EQ(x.powersgd_ranks(64), (std::vector<std::int64_t>{1, 1, 0, 1, 0}));   // the floor at rank 1
        // 1.5: ranks 14, 6, 6 would send 2/3 of the floats; PowerSGD wants at least 2x, so all go whole.
        EXPECT_EQ(x.powersgd_ranks(1.5), (std::vector<std::int64_t>{0, 0, 0, 0, 0}));
        // The bytes of each level: those of --compress powersgd:R at each matrix's rank.
        const GravacLevelBytes b = x.level_bytes();
        EXPECT_EQ(b.theta_min, 4 * (5 * 96 + 2 * 40 + 9 + 2 * 43 + 16));  // theta_min 4
        EXPECT_EQ(b.candidate, 4 * (2 * 96 + 1 * 40 + 9 + 1 * 43 + 16));  // candidate 8: 2.67, 1.2, 1.26
        EXPECT_EQ(b.dense, 4 * (2048 + 384 + 9 + 432 + 16));
        EXPECT_EQ(b.theta_min, compress::wire_bytes({"powersgd", 5}, {32, 64}) +
                                   compress::wire_bytes({"powersgd", 2}, {16, 24}) +
                                   compress::wire_bytes({"powersgd", 1}, {3, 3}) +
                                   compress::wire_bytes({"powersgd", 2}, {16, 3, 3, 3}) +
                                   compress::wire_bytes({"powersgd", 1}, {4, 4}));
    });
}

// Two ranks with different gradients take the same decisions, end every step with the
// same gradients, and each step sends the norms, the time, the vector whole, and every
// matrix at its rank of the chosen factor exactly as --compress powersgd:R would.
TEST(GravacPowersgd, RanksAgreeAndSendTheBytesOfPowersgdAtTheRank) {
    std::set<int> choices;
    std::set<double> factors;
    // The inputs drawn before the threads start (torch's global generator is shared).
    std::vector<std::vector<std::vector<torch::Tensor>>> inputs(2);
    for (int rank = 0; rank < 2; ++rank)
        for (std::int64_t s = 0; s < 15; ++s)
            inputs[static_cast<size_t>(rank)].push_back(powersgd_gradients(rank, s, rank == 0 ? 0.2 : 0.6));
    for (double epsilon : {0.6, 0.9, 1.0}) {
        test::ThreadGroup group(2);
        std::vector<std::vector<regime::GravacStep>> steps(2);
        std::vector<std::int64_t> bytes(2);
        std::vector<std::vector<torch::Tensor>> last(2);
        std::vector<regime::GravacState> states(2);
        group.run([&](int rank, comm::Collectives& comm) {
            auto tensors = powersgd_model();
            GravacExchange x(describe(tensors), comm, torch::kCPU, options("powersgd", 3, epsilon));
            for (std::int64_t s = 0; s < 15; ++s) {
                std::vector<torch::Tensor> g;
                for (const auto& t : inputs[static_cast<size_t>(rank)][static_cast<size_t>(s)]) g.push_back(t.clone());
                x.exchange(g, GravacStepInfo{});
                last[static_cast<size_t>(rank)] = g;
            }
            steps[static_cast<size_t>(rank)] = x.take_steps();
            bytes[static_cast<size_t>(rank)] = x.take_totals().bytes;
            states[static_cast<size_t>(rank)] = x.controller().state();
        });
        ASSERT_EQ(steps[0].size(), 15u);
        std::int64_t expected = 0;
        for (size_t i = 0; i < steps[0].size(); ++i) {
            const auto &a = steps[0][i], &b = steps[1][i];
            EXPECT_EQ(a.factor, b.factor) << "step " << i;
            EXPECT_EQ(a.choice, b.choice) << "step " << i;
            EXPECT_EQ(a.gain_min, b.gain_min) << "step " << i;
            EXPECT_EQ(a.gain_candidate, b.gain_candidate) << "step " << i;
            choices.insert(a.choice);
            factors.insert(a.factor);
            expected += 4 * 8 + 8 + 4 * 32;
            for (const auto& shape : {std::vector<std::int64_t>{32, 64}, std::vector<std::int64_t>{16, 24},
                                      std::vector<std::int64_t>{3, 3}}) {
                const std::int64_t r = regime::powersgd_rank_for_factor(shape[0], shape[1], a.factor);
                expected += a.choice == 2 ? 4 * shape[0] * shape[1] : compress::wire_bytes({"powersgd", double(r)}, shape);
            }
        }
        EXPECT_EQ(bytes[0], expected) << "epsilon " << epsilon;
        EXPECT_EQ(bytes[1], expected) << "epsilon " << epsilon;
        EXPECT_EQ(states[0].theta_min, states[1].theta_min);
        EXPECT_EQ(states[0].candidate, states[1].candidate);
        for (size_t p = 0; p < last[0].size(); ++p)
            EXPECT_TRUE(torch::allclose(last[0][p], last[1][p], 1e-5, 1e-6)) << "parameter " << p;
    }
    EXPECT_TRUE(choices.count(0) && choices.count(2)) << "the test should see the candidate and dense";
    EXPECT_GE(factors.size(), 3u) << "the candidate should have moved";
}

// On one rank the exchange at a level is that level's local approximation, so the
// squared norm of what was sent equals the norm the controller was given for the
// level sent (the candidate's: truncated theta_min factors = PowerSGD at its rank).
TEST(GravacPowersgd, SentIsTheLocalApproximationWhoseNormWasMeasured) {
    std::set<int> seen;
    for (double epsilon : {0.3, 0.95}) {
        test::ThreadGroup group(1);
        group.run([&](int, comm::Collectives& comm) {
            auto tensors = powersgd_model();
            GravacExchange x(describe(tensors), comm, torch::kCPU, options("powersgd", 3, epsilon));
            for (std::int64_t s = 0; s < 9; ++s) {
                auto g = powersgd_gradients(0, s, 0.5);
                x.exchange(g, GravacStepInfo{});
                const auto record = x.take_steps().at(0);
                const torch::Tensor inputs = x.state().at("gravac/inputs");
                const double measured = inputs[s][record.choice == 0 ? 2 : record.choice == 1 ? 1 : 0].item<double>();
                double sent = 0;
                for (size_t p : {size_t{0}, size_t{2}, size_t{3}}) sent += g[p].to(torch::kFloat64).square().sum().item<double>();
                EXPECT_NEAR(sent, measured, 1e-4 * measured) << "epsilon " << epsilon << " step " << s;
                seen.insert(record.choice);
            }
        });
    }
    EXPECT_TRUE(seen.count(0) && seen.count(1)) << "both compressed levels should be sent";
}

// The warm-start Q and the error memory go into the state; a restored exchange
// continues with the same gradients.
TEST(GravacPowersgd, RestoredStateContinuesWithTheSameQ) {
    test::ThreadGroup group(1);
    group.run([&](int, comm::Collectives& comm) {
        auto tensors = powersgd_model();
        const auto names = describe(tensors);
        GravacExchange a(names, comm, torch::kCPU, options("powersgd", 3, 0.6));
        for (std::int64_t s = 0; s < 6; ++s) {
            auto g = powersgd_gradients(0, s, 0.5);
            a.exchange(g, GravacStepInfo{});
        }
        const auto state = a.state();
        ASSERT_TRUE(state.count("p0/powersgd_q"));
        EXPECT_EQ(state.at("p0/powersgd_q").sizes().vec(), (std::vector<std::int64_t>{64, 5}));  // theta_min 4: rank 5
        EXPECT_FALSE(state.count("p3/powersgd_q")) << "3 x 3 is sent whole";
        GravacExchange b(names, comm, torch::kCPU, options("powersgd", 3, 0.6));
        b.load_state(state);
        for (std::int64_t s = 6; s < 10; ++s) {
            auto ga = powersgd_gradients(0, s, 0.5), gb = powersgd_gradients(0, s, 0.5);
            a.exchange(ga, GravacStepInfo{});
            b.exchange(gb, GravacStepInfo{});
            for (size_t p = 0; p < ga.size(); ++p) EXPECT_TRUE(torch::equal(ga[p], gb[p])) << "step " << s;
        }
        EXPECT_THROW(b.load_state({{"p0/powersgd_q", torch::zeros({32, 2})}}), Error);
        EXPECT_THROW(b.load_state({{"p0/powersgd_q", torch::zeros({64, 40})}}), Error);
        EXPECT_THROW(b.load_state({{"p0/dgc_momentum", torch::zeros({32, 64})}}), Error);
    });
}

}  // namespace
}  // namespace acc::exchange
