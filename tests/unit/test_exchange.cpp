// The gradient exchange on 1-3 ranks: error feedback loses nothing, counted bytes
// equal the documented formula, the aggregate is the mean of what the ranks sent,
// levels change as Accordion changes them, state round-trips.
//
// The test bodies see only acc::comm::Collectives. The multi-rank ones (ExchangeRanks)
// run twice: on in-process collectives (tests/support) and on the ranks of a real Gloo
// process group over loopback (lib/comm), one thread per rank.
#include "base/error.hpp"
#include "compress/codecs.hpp"
#include "comm/device_timer.hpp"
#include "compress/kernels.hpp"
#include "comm/loopback.hpp"
#include "comm/process_group.hpp"
#include "exchange/bucket_exchanges.hpp"
#include "exchange/gradient_exchange.hpp"
#include "support/gloo_ranks.hpp"
#include "support/thread_collectives.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <thread>

using namespace acc::compress;
using namespace acc::exchange;
using acc::comm::Collectives;
using acc::comm::DeviceTimer;
using acc::comm::LoopbackCollectives;
using acc::test::thread_ranks;

namespace {

using Body = std::function<void(int, Collectives&)>;

// The multi-rank tests run twice: on in-process collectives and on Gloo.
class ExchangeRanks : public ::testing::TestWithParam<std::string> {
protected:
    std::vector<std::string> attempt(int world, const Body& body) {
        if (GetParam() == "gloo")
            return acc::test::gloo_ranks(world, [&](acc::comm::ProcessGroupCollectives& comm) { body(comm.rank(), comm); });
        acc::test::ThreadGroup group(world, 30);
        return group.run_collect(body);
    }
    void run(int world, const Body& body) {
        auto errors = attempt(world, body);
        for (size_t r = 0; r < errors.size(); ++r)
            if (!errors[r].empty()) throw acc::Error("rank " + std::to_string(r) + ": " + errors[r]);
    }
};

INSTANTIATE_TEST_SUITE_P(Collectives, ExchangeRanks, ::testing::Values("threads", "gloo"));

// Conv, matrix, vectors and a scalar: PowerSGD compresses the first two, the others go uncompressed.
std::vector<TensorInfo> conv_matrix_vectors_scalar() {
    return {{"conv.weight", {16, 8, 3, 3}}, {"conv.bias", {16}}, {"fc.weight", {10, 144}},
            {"fc.bias", {10}},             {"tiny.weight", {3, 2}}, {"scale", {}}};
}

std::vector<Spec> all_levels(const std::string& text) {
    return std::vector<Spec>(conv_matrix_vectors_scalar().size(), parse_spec(text));
}

// A different gradient per rank, step and tensor.
std::vector<at::Tensor> gradients(const std::vector<TensorInfo>& tensors, int rank, int step) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
        // A generator of its own: ranks run on threads at once.
        auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * rank + 100 * step + i);
        out.push_back(at::randn(tensors[i].shape, generator));
    }
    return out;
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
    std::vector<at::Tensor> out;
    for (auto& t : v) out.push_back(t.clone());
    return out;
}

std::map<std::string, at::Tensor> state_map(const GradientExchange& x) {
    std::map<std::string, at::Tensor> out;
    for (auto& [name, t] : x.state()) out[name] = t;
    return out;
}

at::Tensor error_of(const GradientExchange& x, const TensorInfo& t) {
    auto s = state_map(x);
    auto it = s.find(t.name + "/error");
    return it == s.end() ? at::zeros(t.shape) : it->second.reshape(t.shape);
}

double max_abs(const at::Tensor& t) { return t.numel() ? t.abs().max().item<double>() : 0.0; }

const std::vector<std::string> kLevels = {"none",      "fp16",    "powersgd:1", "powersgd:2", "powersgd:4",
                                          "topk:0.05", "topk:1",  "randomk:0.1", "dgc:0.05",  "signsgd",
                                          "efsignsgd", "qsgd:4",  "qsgd:300",   "terngrad"};

}  // namespace

TEST(Exchange, ErrorFeedbackLosesNothingOnOneWorker) {
    // W = 1: g + e_old == aggregate + e_new at every step, for every level; DGC with
    // its momentum: g + m u_old + v_old == aggregate + v_new.
    for (const auto& text : kLevels)
        for (int variant = 0; variant < 2; ++variant) {
            // The second variant: Accordion's PowerSGD, or top-k's sampled selection.
            const bool psgd = text.rfind("powersgd", 0) == 0, topk = text.rfind("topk", 0) == 0;
            if (variant == 1 && !psgd && !topk) continue;
            thread_ranks(1, [&](int, Collectives& comm) {
                ExchangeOptions options;
                if (variant == 1 && psgd) options.compressors.powersgd.variant = PowerSgdVariant::accordion;
                if (variant == 1 && topk) options.compressors.topk.selection = TopkSelection::sampled;
                auto tensors = conv_matrix_vectors_scalar();
                GradientExchange x(tensors, all_levels(text), comm, options);
                for (int step = 0; step < 3; ++step) {
                    auto g = gradients(tensors, 0, step);
                    auto out = clones(g);
                    std::vector<at::Tensor> before;
                    auto state = state_map(x);
                    for (size_t i = 0; i < tensors.size(); ++i) {
                        at::Tensor input = g[i] + error_of(x, tensors[i]);
                        auto u = state.find(tensors[i].name + "/dgc_momentum");
                        if (u != state.end()) input = input + 0.9 * u->second.reshape(tensors[i].shape);
                        before.push_back(input);
                    }
                    x.step(out);
                    for (size_t i = 0; i < tensors.size(); ++i) {
                        at::Tensor after = out[i] + error_of(x, tensors[i]);
                        double scale = 1 + max_abs(before[i]);
                        double tolerance = text == "fp16" || text.rfind("qsgd", 0) == 0 || text == "terngrad" ||
                                                   text == "signsgd"
                                               ? -1
                                               : 1e-5 * scale;
                        if (tolerance > 0) {
                            EXPECT_LE(max_abs(after - before[i]), tolerance)
                                << text << " step " << step << " " << tensors[i].name;
                        }
                    }
                }
            });
        }
}

TEST(Exchange, LevelsWithoutErrorFeedbackKeepNoMemory) {
    for (const auto& text : {"none", "fp16", "signsgd", "qsgd:4", "terngrad"})
        thread_ranks(1, [&](int, Collectives& comm) {
            auto tensors = conv_matrix_vectors_scalar();
            GradientExchange x(tensors, all_levels(text), comm);
            auto g = gradients(tensors, 0, 0);
            x.step(g);
            for (auto& [name, t] : x.state()) EXPECT_EQ(name.find("/error"), std::string::npos) << text << " " << name;
        });
}

TEST_P(ExchangeRanks, CountedBytesEqualTheDocumentedFormula) {
    for (const auto& text : kLevels)
        run(2, [&](int rank, Collectives& comm) {
            auto tensors = conv_matrix_vectors_scalar();
            auto levels = all_levels(text);
            GradientExchange x(tensors, levels, comm);
            auto before = comm.traffic().bytes;
            auto g = gradients(tensors, rank, 0);
            x.step(g);
            std::int64_t formula = 0;
            for (size_t i = 0; i < tensors.size(); ++i) {
                EXPECT_EQ(x.last_tensor_bytes()[i], wire_bytes(levels[i], tensors[i].shape)) << text << " " << tensors[i].name;
                formula += wire_bytes(levels[i], tensors[i].shape);
            }
            EXPECT_EQ(x.last_step().bytes, formula) << text;
            EXPECT_EQ(comm.traffic().bytes - before, formula) << text;  // what the collectives counted
            std::int64_t planned = 0;
            for (const auto& c : x.planned_collectives()) {
                planned += c.bytes;
                EXPECT_EQ(c.kind == Collective::allgather, uses_gather(levels[0])) << text;
            }
            EXPECT_EQ(planned, formula) << text;
            EXPECT_EQ(x.last_step().collectives, static_cast<std::int64_t>(x.planned_collectives().size())) << text;
            EXPECT_DOUBLE_EQ(x.last_step().floats(), formula / 4.0);
        });
}

namespace {

// The recorded inputs of one rank's step, by the collective that carried them.
struct Sent {
    std::vector<at::Tensor> allreduce;
    at::Tensor allgather;
};

Sent sent_in(const acc::test::RecordingCollectives& r, size_t first) {
    Sent s;
    for (size_t c = first; c < r.calls.size(); ++c) {
        if (r.calls[c].kind == "allreduce") s.allreduce.push_back(r.calls[c].input);
        if (r.calls[c].kind == "allgather") s.allgather = r.calls[c].input;
    }
    return s;
}

}  // namespace

TEST_P(ExchangeRanks, AggregateIsTheMeanOfWhatTheRanksSent) {
    // For the allgather compressors: each rank's payload, decoded alone, averaged over
    // the ranks (signsgd: voted) gives every rank's result. For the allreduce ones the
    // mean of the sent buffers is what comes back. All ranks end identical.
    for (int W : {2, 3})
        for (const auto& text : kLevels) {
            auto tensors = conv_matrix_vectors_scalar();
            auto levels = all_levels(text);
            std::vector<std::vector<at::Tensor>> outputs(static_cast<size_t>(W));
            std::vector<Sent> sent(static_cast<size_t>(W));
            std::vector<std::vector<std::int64_t>> bytes(static_cast<size_t>(W));
            run(W, [&](int rank, Collectives& comm) {
                acc::test::RecordingCollectives recorder(comm);
                GradientExchange x(tensors, levels, recorder);
                for (int step = 0; step < 2; ++step) {
                    size_t first = recorder.calls.size();
                    auto g = gradients(tensors, rank, step);
                    x.step(g);
                    outputs[static_cast<size_t>(rank)] = g;
                    sent[static_cast<size_t>(rank)] = sent_in(recorder, first);
                }
                bytes[static_cast<size_t>(rank)] = x.last_tensor_bytes();
            });
            for (int r = 1; r < W; ++r)
                for (size_t i = 0; i < tensors.size(); ++i)
                    EXPECT_TRUE(outputs[0][i].equal(outputs[static_cast<size_t>(r)][i]))
                        << text << " W " << W << ": rank " << r << " differs on " << tensors[i].name;
            const Spec spec = levels[0];
            if (uses_gather(spec)) {
                std::int64_t offset = 0;
                for (size_t i = 0; i < tensors.size(); ++i) {
                    const std::int64_t n = tensors[i].numel();
                    at::Tensor expected = at::zeros({n});
                    for (int r = 0; r < W; ++r) {
                        auto codec = make_gather_codec(spec, n, {});
                        at::Tensor one = at::empty({n});
                        const std::uint8_t* payload = sent[static_cast<size_t>(r)].allgather.data_ptr<std::uint8_t>() + offset;
                        ASSERT_TRUE(codec->decode({payload}, one.data_ptr<float>()));
                        expected += one;
                    }
                    expected = spec.name == "signsgd" ? expected.sign() : expected / W;
                    at::Tensor got = outputs[0][i].reshape({n});
                    EXPECT_LE(max_abs(got - expected), 1e-5 * (1 + max_abs(expected))) << text << " " << tensors[i].name;
                    offset += bytes[0][i];
                }
            } else if (spec.name == "none" || spec.name == "randomk" || spec.name == "fp16") {
                // One flat allreduce: its mean, placed back.
                at::Tensor mean = at::zeros_like(sent[0].allreduce.at(0).to(at::kFloat));
                for (int r = 0; r < W; ++r) mean += sent[static_cast<size_t>(r)].allreduce.at(0).to(at::kFloat);
                mean /= W;
                if (spec.name == "fp16") mean = mean * W;  // fp16 sends g / W and sums
                at::Tensor flat = at::cat([&] {
                    std::vector<at::Tensor> parts;
                    for (auto& t : outputs[0]) parts.push_back(t.reshape({-1}));
                    return parts;
                }());
                if (spec.name == "randomk") {
                    at::Tensor nonzero = flat.masked_select(flat != 0);
                    ASSERT_EQ(nonzero.numel(), mean.numel());  // every rank chose the same indices
                    EXPECT_LE(max_abs(nonzero - mean), 1e-6 * (1 + max_abs(mean)));
                } else {
                    EXPECT_LE(max_abs(flat - mean), 2e-3 * (1 + max_abs(mean))) << text;
                }
            } else {
                // PowerSGD: orthogonalize the summed P, then P (sum Q / W)^T is the result.
                const auto& s0 = sent[0];
                ASSERT_EQ(s0.allreduce.size(), 3u);  // uncompressed tensors, P, Q
                at::Tensor p = at::zeros_like(s0.allreduce[1]), q = at::zeros_like(s0.allreduce[2]);
                for (int r = 0; r < W; ++r) {
                    p += sent[static_cast<size_t>(r)].allreduce[1];
                    q += sent[static_cast<size_t>(r)].allreduce[2];
                }
                q /= W;
                const int rank = static_cast<int>(spec.parameter);
                std::int64_t po = 0, qo = 0;
                for (size_t i : {size_t{0}, size_t{2}}) {  // conv.weight 16 x 72, fc.weight 10 x 144
                    MatrixView m = matrix_view(tensors[i].shape);
                    int r = static_cast<int>(std::min<std::int64_t>({rank, m.rows, m.cols}));
                    at::Tensor pm = p.narrow(0, po, m.rows * r).reshape({m.rows, r}).clone();
                    if (r <= 2)
                        kernels::gram_schmidt(pm.data_ptr<float>(), m.rows, r, 0.0f);
                    else
                        pm = std::get<0>(at::linalg_qr(pm));
                    at::Tensor qm = q.narrow(0, qo, m.cols * r).reshape({m.cols, r});
                    at::Tensor expected = at::mm(pm, qm.t());
                    EXPECT_LE(max_abs(outputs[0][i].reshape({m.rows, m.cols}) - expected), 1e-4 * (1 + max_abs(expected)))
                        << text << " " << tensors[i].name;
                    po += m.rows * r;
                    qo += m.cols * r;
                }
            }
        }
}

TEST(Exchange, LevelChangeStartsFreshStateAndKeepsTheErrorMemory) {
    thread_ranks(1, [&](int, Collectives& comm) {
        auto tensors = conv_matrix_vectors_scalar();
        GradientExchange x(tensors, all_levels("powersgd:2"), comm);
        auto g = gradients(tensors, 0, 0);
        x.step(g);
        auto before = state_map(x);
        ASSERT_TRUE(before.count("conv.weight/error"));
        ASSERT_TRUE(before.count("conv.weight/powersgd_q"));
        EXPECT_EQ(before["conv.weight/powersgd_q"].sizes(), (std::vector<std::int64_t>{72, 2}));
        x.set_levels(all_levels("powersgd:1"));
        auto after = state_map(x);
        EXPECT_TRUE(after["conv.weight/error"].equal(before["conv.weight/error"]));
        EXPECT_FALSE(after.count("conv.weight/powersgd_q"));  // a new Q is drawn at the next step
        auto g2 = gradients(tensors, 0, 1);
        x.step(g2);
        EXPECT_EQ(state_map(x)["conv.weight/powersgd_q"].sizes(), (std::vector<std::int64_t>{72, 1}));
        EXPECT_EQ(x.last_tensor_bytes()[0], 4 * (16 + 72) * 1);

        // To a level without error feedback: the memory goes out once, then none is kept.
        at::Tensor e = error_of(x, tensors[2]);
        ASSERT_GT(max_abs(e), 0);
        x.set_levels(all_levels("none"));
        auto g3 = gradients(tensors, 0, 2);
        auto out = clones(g3);
        x.step(out);
        EXPECT_LE(max_abs(out[2] - (g3[2] + e)), 1e-6);
        EXPECT_FALSE(state_map(x).count("fc.weight/error"));
    });
}

TEST(Exchange, SameLevelsKeepTheWarmStart) {
    thread_ranks(1, [&](int, Collectives& comm) {
        auto tensors = conv_matrix_vectors_scalar();
        GradientExchange x(tensors, all_levels("powersgd:2"), comm);
        auto g = gradients(tensors, 0, 0);
        x.step(g);
        auto q1 = state_map(x)["fc.weight/powersgd_q"];
        x.set_levels(all_levels("powersgd:2"));  // unchanged: nothing resets
        EXPECT_TRUE(state_map(x)["fc.weight/powersgd_q"].equal(q1));
    });
}

TEST(Exchange, WithoutWarmStartQIsDrawnEveryStep) {
    thread_ranks(1, [&](int, Collectives& comm) {
        auto tensors = conv_matrix_vectors_scalar();
        ExchangeOptions options;
        options.compressors.powersgd.warm_start = false;
        GradientExchange a(tensors, all_levels("powersgd:1"), comm, options);
        GradientExchange b(tensors, all_levels("powersgd:1"), comm);
        // Same gradient twice: with warm start the second step's Q starts from the first.
        for (int step = 0; step < 2; ++step) {
            auto ga = gradients(tensors, 0, 0), gb = gradients(tensors, 0, 0);
            a.step(ga);
            b.step(gb);
            if (step == 0) {
                EXPECT_TRUE(ga[2].equal(gb[2]));  // the same first draw
            } else {
                EXPECT_FALSE(ga[2].equal(gb[2]));
            }
        }
    });
}

TEST(Exchange, StateRoundTripsThroughACheckpoint) {
    for (const auto& text : {"powersgd:2", "topk:0.05", "dgc:0.05", "randomk:0.1", "efsignsgd", "qsgd:4"})
        thread_ranks(1, [&](int, Collectives& comm) {
            auto tensors = conv_matrix_vectors_scalar();
            GradientExchange a(tensors, all_levels(text), comm);
            for (int step = 0; step < 3; ++step) {
                auto g = gradients(tensors, 0, step);
                a.step(g);
            }
            GradientExchange b(tensors, all_levels(text), comm);
            b.load_state(a.state());
            auto ga = gradients(tensors, 0, 9), gb = gradients(tensors, 0, 9);
            a.step(ga);
            b.step(gb);
            for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(ga[i].equal(gb[i])) << text << " " << tensors[i].name;
            EXPECT_EQ(a.steps(), b.steps());
        });
}

TEST(Exchange, RefusesStateThatDoesNotFit) {
    thread_ranks(1, [&](int, Collectives& comm) {
        auto tensors = conv_matrix_vectors_scalar();
        GradientExchange x(tensors, all_levels("powersgd:2"), comm);
        auto g = gradients(tensors, 0, 0);
        x.step(g);
        auto state = x.state();
        GradientExchange y(tensors, all_levels("powersgd:1"), comm);
        try {
            y.load_state(state);
            FAIL() << "a rank-2 Q was accepted for rank 1";
        } catch (const acc::Error& e) {
            EXPECT_NE(std::string(e.what()).find("conv.weight/powersgd_q"), std::string::npos) << e.what();
        }
        EXPECT_THROW(y.load_state({{"nope/error", at::zeros({3})}}), acc::Error);
        EXPECT_THROW(y.load_state({{"fc.weight/error", at::zeros({3})}}), acc::Error);
    });
}

TEST_P(ExchangeRanks, OverlappedStepsGiveTheSameResult) {
    // Two exchanges (two "buckets") started before either finishes.
    auto tensors = conv_matrix_vectors_scalar();
    std::vector<TensorInfo> first(tensors.begin(), tensors.begin() + 3), second(tensors.begin() + 3, tensors.end());
    std::vector<std::vector<at::Tensor>> serial(2), overlapped(2);
    for (bool overlap : {false, true})
        run(2, [&](int rank, Collectives& comm) {
            GradientExchange a(first, std::vector<Spec>(3, parse_spec("powersgd:2")), comm);
            GradientExchange b(second, std::vector<Spec>(3, parse_spec("topk:0.5")), comm);
            auto g = gradients(tensors, rank, 0);
            std::vector<at::Tensor> ga(g.begin(), g.begin() + 3), gb(g.begin() + 3, g.end());
            if (overlap) {
                a.start(ga);
                b.start(gb);
                a.finish();
                b.finish();
            } else {
                a.step(ga);
                b.step(gb);
            }
            if (rank == 0) {
                auto& out = overlap ? overlapped : serial;
                out[0] = ga;
                out[1] = gb;
            }
        });
    for (size_t part = 0; part < 2; ++part)
        for (size_t i = 0; i < serial[part].size(); ++i) EXPECT_TRUE(serial[part][i].equal(overlapped[part][i]));
}

// A DDP bucket's gradients are views of one flat buffer. Where every uncompressed tensor
// lies back to back in it, the exchange sums them where they are instead of copying:
// the same averages bit for bit, the same bytes counted, a NaN still refused by name.
TEST_P(ExchangeRanks, SumsABucketsGradientsWhereTheyLie) {
    auto tensors = conv_matrix_vectors_scalar();
    for (const std::string text : {"none", "powersgd:2", "topk:0.5"}) {
        std::vector<std::vector<at::Tensor>> apart(3), together(3);
        std::vector<std::int64_t> bytes_apart(3), bytes_together(3);
        for (bool bucket : {false, true})
            run(3, [&](int rank, Collectives& comm) {
                GradientExchange x(tensors, all_levels(text), comm);
                std::vector<at::Tensor> g = gradients(tensors, rank, 0);
                at::Tensor flat;
                if (bucket) {
                    std::vector<at::Tensor> parts;
                    for (auto& t : g) parts.push_back(t.reshape({-1}));
                    flat = at::cat(parts);
                    std::int64_t at_offset = 0;
                    for (size_t i = 0; i < g.size(); ++i) {
                        g[i] = flat.narrow(0, at_offset, g[i].numel()).view(tensors[i].shape);
                        at_offset += g[i].numel();
                    }
                }
                x.step(g);
                (bucket ? together : apart)[rank] = clones(g);
                (bucket ? bytes_together : bytes_apart)[rank] = x.last_step().bytes;
                if (bucket && text == "none") {
                    // The views still share the bucket, which holds the averages.
                    EXPECT_EQ(g[1].data_ptr<float>(), flat.data_ptr<float>() + 16 * 8 * 3 * 3);
                    g[3][2] = std::numeric_limits<float>::quiet_NaN();
                    try {
                        x.step(g);
                        ADD_FAILURE() << "NaN accepted";
                    } catch (const acc::Error& e) {
                        EXPECT_NE(std::string(e.what()).find("fc.bias: gradient holds NaN or infinity at step 1"),
                                  std::string::npos)
                            << e.what();
                    }
                }
            });
        for (int r = 0; r < 3; ++r) {
            EXPECT_EQ(bytes_together[r], bytes_apart[r]) << text;
            for (size_t i = 0; i < tensors.size(); ++i)
                EXPECT_TRUE(together[r][i].equal(apart[r][i])) << text << ", rank " << r << ", " << tensors[i].name;
        }
    }
}

TEST_P(ExchangeRanks, StagesGradientsThatAreNotContiguous) {
    run(2, [&](int rank, Collectives& comm) {
        std::vector<TensorInfo> tensors = {{"w", {6, 4}}};
        GradientExchange x(tensors, {parse_spec("none")}, comm);
        at::Tensor storage = at::full({4, 6}, static_cast<double>(rank + 1));
        at::Tensor g = storage.t();  // 6 x 4, not contiguous
        x.step({g});
        EXPECT_TRUE(at::allclose(storage, at::full({4, 6}, 1.5)));
    });
}

TEST(Exchange, DgcWarmUpRaisesTheFractionInEarlyEpochs) {
    EXPECT_DOUBLE_EQ(dgc_warmup_fraction(0.001, 0, 5), std::pow(0.001, 1.0 / 6));
    EXPECT_DOUBLE_EQ(dgc_warmup_fraction(0.001, 4, 5), std::pow(0.001, 5.0 / 6));
    EXPECT_DOUBLE_EQ(dgc_warmup_fraction(0.001, 5, 5), 0.001);
    EXPECT_DOUBLE_EQ(dgc_warmup_fraction(0.001, 0, 0), 0.001);
    thread_ranks(1, [&](int, Collectives& comm) {
        ExchangeOptions options;
        options.compressors.dgc.warmup_epochs = 4;
        std::vector<TensorInfo> tensors = {{"w", {100, 100}}};
        GradientExchange x(tensors, {parse_spec("dgc:0.01")}, comm, options);
        std::vector<std::int64_t> sent;
        for (int epoch = 0; epoch < 6; ++epoch) {
            x.set_epoch(epoch);
            auto g = gradients(tensors, 0, epoch);
            x.step(g);
            sent.push_back(x.last_step().bytes);
            EXPECT_EQ(x.last_step().bytes, wire_bytes(x.effective_level(0), {100, 100}));
        }
        EXPECT_EQ(sent[0], 8 * kept_entries(std::pow(0.01, 0.2), 10000));
        EXPECT_GT(sent[0], sent[1]);
        EXPECT_EQ(sent[4], 8 * 100);
        EXPECT_EQ(sent[5], 8 * 100);
        EXPECT_TRUE(state_map(x).count("w/dgc_momentum"));  // kept across the fraction changes
    });
}

TEST(Exchange, RefusesNaNAndNamesTheTensor) {
    for (const auto& text : kLevels)
        thread_ranks(1, [&](int, Collectives& comm) {
            auto tensors = conv_matrix_vectors_scalar();
            GradientExchange x(tensors, all_levels(text), comm);
            auto g = gradients(tensors, 0, 0);
            g[2][3][7] = std::numeric_limits<float>::quiet_NaN();
            try {
                x.step(g);
                ADD_FAILURE() << text << ": NaN accepted";
            } catch (const acc::Error& e) {
                EXPECT_NE(std::string(e.what()).find("fc.weight: gradient holds NaN or infinity at step 0"),
                          std::string::npos)
                    << text << ": " << e.what();
            }
        });
}

TEST_P(ExchangeRanks, ANaNOnOneWorkerStopsEveryWorker) {
    // The worker with the bad gradient stops before its step's first collective; the
    // other one does not hang in it: it fails too (the thread group aborts it, Gloo
    // reports the lost peer).
    auto errors = attempt(2, [&](int rank, Collectives& comm) {
        auto tensors = conv_matrix_vectors_scalar();
        GradientExchange x(tensors, all_levels("powersgd:2"), comm);
        auto g = gradients(tensors, rank, 0);
        if (rank == 1) g[0][0][0][0][0] = std::numeric_limits<float>::infinity();
        x.step(g);
    });
    EXPECT_NE(errors[1].find("conv.weight: gradient holds NaN or infinity at step 0"), std::string::npos) << errors[1];
    EXPECT_FALSE(errors[0].empty()) << "rank 0 went on alone";
}

TEST(Exchange, RefusesFp16Overflow) {
    thread_ranks(1, [&](int, Collectives& comm) {
        std::vector<TensorInfo> tensors = {{"w", {4}}};
        GradientExchange x(tensors, {parse_spec("fp16")}, comm);
        at::Tensor g = at::tensor({1.0f, 2.0f, 1e6f, 3.0f});
        try {
            x.step({g});
            FAIL();
        } catch (const acc::Error& e) {
            EXPECT_NE(std::string(e.what()).find("too large for fp16"), std::string::npos) << e.what();
        }
    });
}

TEST(Exchange, RefusesGradientsThatDoNotFit) {
    thread_ranks(1, [&](int, Collectives& comm) {
        std::vector<TensorInfo> tensors = {{"w", {4, 3}}};
        GradientExchange x(tensors, {parse_spec("topk:0.5")}, comm);
        EXPECT_THROW(x.step({at::zeros({5})}), acc::UsageError);
        EXPECT_THROW(x.step({at::zeros({4, 3}, at::kDouble)}), acc::UsageError);
        EXPECT_THROW(x.step({}), acc::UsageError);
        EXPECT_THROW(x.finish(), acc::UsageError);
        EXPECT_THROW(GradientExchange(tensors, {}, comm), acc::UsageError);
        EXPECT_THROW(GradientExchange({{"a", {2}}, {"a", {3}}}, std::vector<Spec>(2, parse_spec("none")), comm),
                     acc::UsageError);
    });
}

TEST_P(ExchangeRanks, WorkersThatDisagreeOnLevelsAreStopped) {
    try {
        run(2, [&](int rank, Collectives& comm) {
            auto tensors = conv_matrix_vectors_scalar();
            GradientExchange x(tensors, all_levels(rank == 0 ? "powersgd:2" : "powersgd:1"), comm);
        });
        FAIL() << "different levels accepted";
    } catch (const acc::Error& e) {
        EXPECT_NE(std::string(e.what()).find("workers disagree"), std::string::npos) << e.what();
    }
}

TEST(Exchange, LoopbackStandsInForIdenticalWorkers) {
    // W identical workers average to one worker's result; allgather decodes W payloads.
    auto tensors = conv_matrix_vectors_scalar();
    for (const auto& text : {"topk:0.05", "qsgd:4", "powersgd:2", "none"}) {
        LoopbackCollectives four(4), one(1);
        GradientExchange a(tensors, all_levels(text), four), b(tensors, all_levels(text), one);
        auto ga = gradients(tensors, 0, 0), gb = gradients(tensors, 0, 0);
        a.step(ga);
        b.step(gb);
        for (size_t i = 0; i < tensors.size(); ++i)
            EXPECT_LE(max_abs(ga[i] - gb[i]), 1e-5 * (1 + max_abs(gb[i]))) << text << " " << tensors[i].name;
        EXPECT_EQ(a.last_step().bytes, b.last_step().bytes);
        EXPECT_EQ(four.traffic().bytes, one.traffic().bytes + 32);  // plus the check that workers agree
    }
}

TEST(BucketExchanges, StateOwnersAreParameters) {
    EXPECT_EQ(state_owner("fc1.weight/error"), "fc1.weight");
    EXPECT_EQ(state_owner("blocks/0/conv.weight/powersgd_q"), "blocks/0/conv.weight");
    EXPECT_EQ(state_owner("exchange/step"), "");
    EXPECT_EQ(state_owner("exchange/powersgd_rng"), "");
    EXPECT_EQ(state_owner("error"), "");
}

// Buckets regrouped between steps: each parameter's state follows it by name, so two
// steps over {conv.weight}, {fc.weight} and then {conv.weight, fc.weight} give what one
// exchange over both gives, and every byte is counted.
TEST(BucketExchanges, RegroupedBucketsCarryTheirParametersState) {
    LoopbackCollectives comm(2);
    const std::vector<TensorInfo> tensors = {{"conv.weight", {16, 72}}, {"fc.weight", {10, 144}}};
    const std::vector<Spec> levels(2, parse_spec("topk:0.1"));
    GradientExchange whole(tensors, levels, comm);
    BucketExchanges buckets;
    GradientExchange& first = buckets.make({tensors[0]}, {levels[0]}, comm, {});
    GradientExchange& second = buckets.make({tensors[1]}, {levels[1]}, comm, {});
    EXPECT_EQ(buckets.find({"conv.weight"}), &first);
    EXPECT_EQ(buckets.find({"fc.weight"}), &second);
    EXPECT_EQ(buckets.find({"conv.weight", "fc.weight"}), nullptr);

    auto g = gradients(tensors, 0, 0);
    auto reference = clones(g);
    whole.step(reference);
    std::vector<at::Tensor> a = {g[0].clone()}, b = {g[1].clone()};
    first.step(a);
    second.step(b);
    EXPECT_TRUE(a[0].equal(reference[0]));
    EXPECT_TRUE(b[0].equal(reference[1]));

    GradientExchange& both = buckets.make(tensors, levels, comm, {});  // dissolves the two
    EXPECT_EQ(buckets.find({"conv.weight"}), nullptr);
    EXPECT_EQ(buckets.find({"conv.weight", "fc.weight"}), &both);
    auto g2 = gradients(tensors, 0, 1);
    auto reference2 = clones(g2), out = clones(g2);
    whole.step(reference2);
    both.step(out);
    for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(out[i].equal(reference2[i])) << tensors[i].name;
    EXPECT_TRUE(error_of(both, tensors[0]).equal(error_of(whole, tensors[0])));
    EXPECT_EQ(buckets.bytes_sent(), whole.total().bytes);

    // Dissolved, the state is carried and kept: every parameter's entries, no own entry.
    buckets.dissolve_all();
    EXPECT_TRUE(buckets.empty());
    std::map<std::string, at::Tensor> carried;
    for (auto& [name, t] : buckets.parameter_state()) carried[name] = t;
    EXPECT_EQ(carried.size(), 2u);
    EXPECT_TRUE(carried["fc.weight/error"].reshape({10, 144}).equal(error_of(whole, tensors[1])));
    bool step_kept = false;
    for (auto& [name, t] : buckets.own_state()) step_kept = step_kept || name == "exchange/step";
    EXPECT_TRUE(step_kept);
    EXPECT_EQ(buckets.bytes_sent(), whole.total().bytes);
    EXPECT_EQ(buckets.take_carried("conv.weight").size(), 1u);
    EXPECT_TRUE(buckets.take_carried("conv.weight").empty());
}

TEST(BucketExchanges, RefusesARegroupingWithinAStepAndOwnEntriesToCarry) {
    LoopbackCollectives comm(1);
    const std::vector<TensorInfo> tensors = {{"a", {8, 8}}, {"b", {8}}};
    BucketExchanges buckets;
    GradientExchange& a = buckets.make({tensors[0]}, {parse_spec("topk:0.5")}, comm, {});
    a.start(gradients({tensors[0]}, 0, 0));
    try {
        buckets.make(tensors, {parse_spec("topk:0.5"), parse_spec("none")}, comm, {});
        FAIL() << "regrouped during a step";
    } catch (const acc::UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("buckets regrouped within one step"), std::string::npos) << e.what();
    }
    a.finish();
    EXPECT_THROW(buckets.carry({{"exchange/step", at::zeros({1})}}), acc::UsageError);

    // Loaded state goes to the live exchange that holds its parameter, the rest waits.
    buckets.load_state({{"a/error", at::full({8, 8}, 2.0f)}, {"b/error", at::ones({8})}}, {});
    EXPECT_TRUE(error_of(a, tensors[0]).equal(at::full({8, 8}, 2.0f)));
    auto waiting = buckets.take_carried("b");
    ASSERT_EQ(waiting.size(), 1u);
    EXPECT_EQ(waiting[0].first, "b/error");
}

// The CPU (either path) is timed with the host's clock around each part, at once,
// whether or not the device's work is asked for.
TEST(DeviceTimer, CpuPartsUseTheHostClockAtOnce) {
    DeviceTimer timer;
    for (bool device_work : {false, true}) {
        timer.begin_step(at::kCPU, device_work);
        EXPECT_EQ(timer.method(), DeviceTimer::Method::host_clock);
        double seconds = 0;
        timer.hold(1'000'000'000);  // only a GPU's stream is held: no wait here
        const auto mark = timer.start();
        EXPECT_FALSE(timer.reached(mark));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        timer.stop(mark, seconds);
        EXPECT_GE(seconds, 0.019);  // added at stop, not at finish_step
        EXPECT_LT(seconds, 10.0);
        const double before = seconds;
        timer.finish_step();
        EXPECT_EQ(seconds, before);
    }
}
