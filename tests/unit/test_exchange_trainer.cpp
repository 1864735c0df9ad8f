// The trainer's hooks over the exchanges (lib/exchange/trainer), on ranks that are
// threads of this process: the bucketed reducer (DDP's bucket layout, averages,
// launches during the backward pass), BucketSync (identical results on every rank,
// the same results as one exchange::GradientExchange through level changes, state
// that round-trips), state transfer, DGC's optimizer rule, the trainer's calls of
// its hook and GravacSync over GraVAC's exchange.
#include "base/error.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/trainer/bucket_sync.hpp"
#include "exchange/trainer/gravac_sync.hpp"
#include "exchange/trainer/reducer.hpp"
#include "exchange/trainer/run_sync.hpp"
#include "exchange/trainer/state.hpp"
#include "support/thread_collectives.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include "test_support.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

using namespace acc::exchange;
using acc::comm::Collectives;
using acc::test::error_of;
using acc::test::thread_ranks;

namespace {

std::vector<acc::compress::Spec> specs_of(const std::vector<std::string>& levels) {
    std::vector<acc::compress::Spec> out;
    for (const auto& l : levels) out.push_back(acc::compress::parse_spec(l));
    return out;
}

// A small network whose gradients depend on the rank's data.
struct Net {
    // Ranks are threads: every random draw uses a generator of its own, not the global one.
    explicit Net(std::uint64_t seed) {
        layers = torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::ReLU(), torch::nn::Linear(16, 12),
                                       torch::nn::ReLU(), torch::nn::Linear(12, 3));
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
        torch::NoGradGuard no_grad;
        for (const auto& item : layers->named_parameters()) {
            names.push_back(item.key());
            parameters.push_back(item.value());
            item.value().copy_(torch::randn(item.value().sizes(), generator, torch::kFloat32) * 0.3);
        }
    }
    std::vector<acc::io::Parameter> description() const {
        std::vector<acc::io::Parameter> out;
        for (size_t i = 0; i < parameters.size(); ++i) out.push_back({names[i], parameters[i].sizes().vec()});
        return out;
    }
    torch::Tensor loss(std::int64_t rank, std::int64_t step, std::int64_t rows = 4) {
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(100 * rank + step));
        torch::Tensor x = torch::randn({rows, 6}, generator, torch::kFloat32);
        torch::Tensor y = torch::randint(0, 3, {rows}, generator, torch::kLong);
        return torch::nn::functional::cross_entropy(layers->forward(x), y);
    }
    void zero_grad() {
        for (auto& p : parameters)
            if (p.grad().defined()) p.grad().zero_();
    }
    std::vector<torch::Tensor> grads() {
        std::vector<torch::Tensor> out;
        for (auto& p : parameters) out.push_back(p.grad());
        return out;
    }
    torch::nn::Sequential layers{nullptr};
    std::vector<std::string> names;
    std::vector<torch::Tensor> parameters;
};

// One step of `net` through `exchange`, its bucket hooks armed: the averaged gradients.
std::vector<torch::Tensor> exchanged(Net& net, BucketSync& exchange, std::int64_t rank, std::int64_t step) {
    net.zero_grad();
    exchange.before_backward({}, false);
    net.loss(rank, step).backward();
    std::vector<torch::Tensor> g = net.grads();
    exchange.exchange(g, {});
    return g;
}

// Synthetic one-channel side x side images in `classes` classes.
std::unique_ptr<acc::train::Dataset> tiny_data(std::int64_t side, std::int64_t classes, std::int64_t train,
                                               std::int64_t test, std::uint64_t seed) {
    acc::train::SyntheticOptions o;
    o.shape = {1, side, side};
    o.classes = classes;
    o.train = train;
    o.test = test;
    return acc::train::make_synthetic(o, seed);
}

acc::train::TrainerOptions batches(std::int64_t batch, std::int64_t micro) {
    acc::train::TrainerOptions options;
    options.batch_size = batch;
    options.micro_batch_size = micro;
    return options;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
    std::vector<torch::Tensor> out;
    for (const auto& t : tensors) out.push_back(t.detach().clone());
    return out;
}

}  // namespace

TEST(Buckets, ReverseOrderWithASmallFirstBucket) {
    // Sizes in floats; bytes are 4x: 1000 floats = 4000 bytes.
    std::vector<torch::Tensor> params;
    for (std::int64_t n : {100, 2000, 300, 300, 700, 50, 400})
        params.push_back(torch::zeros({n}, torch::requires_grad()));
    acc::test::ThreadGroup group(1);
    BucketOptions options;
    options.first_bucket_bytes = 1200;  // 300 floats
    options.bucket_bytes = 4000;        // 1000 floats
    BucketReducer reducer(params, group.rank(0), torch::kCPU, options);
    reducer.set_members({true, true, true, true, true, true, true});
    // From the last parameter: {6} reaches 400 >= 300 floats; {5, 4, 3} reaches 1050; {2, 1} 2300; {0}.
    EXPECT_EQ(reducer.buckets(), (std::vector<std::vector<size_t>>{{6}, {5, 4, 3}, {2, 1}, {0}}));
    reducer.set_members({true, false, true, true, false, true, true});
    EXPECT_EQ(reducer.buckets(), (std::vector<std::vector<size_t>>{{6}, {5, 3, 2, 0}}));
    // DDP's defaults.
    BucketReducer standard(params, group.rank(0), torch::kCPU);
    standard.set_members(std::vector<bool>(7, true));
    EXPECT_EQ(standard.buckets().size(), 1u);

    // Each route fills buckets of its own; both go out in the order their first
    // parameters come in the backward pass.
    struct Nothing : BucketExchange {
        void start(size_t, const std::vector<torch::Tensor>&) override {}
        void finish(size_t) override {}
    } nothing;
    BucketReducer mixed(params, group.rank(0), torch::kCPU, options, &nothing);
    const Route a = Route::allreduce, c = Route::compressed;
    mixed.set_routes({a, c, a, c, c, a, a});
    // Allreduce: {6} reaches 400 >= 300, {5, 2, 0}. Compressed: {4} reaches 700 >= 300, {3, 1}.
    EXPECT_EQ(mixed.buckets(), (std::vector<std::vector<size_t>>{{6}, {5, 2, 0}, {4}, {3, 1}}));
    EXPECT_EQ(mixed.bucket_routes(), (std::vector<Route>{a, a, c, c}));
    EXPECT_EQ(error_of([&] { reducer.set_routes({a, c, a, a, a, a, a}); }),
              "internal error: a compressed bucket without an exchange");
}

TEST(Buckets, AverageOverRanksLaunchedDuringBackward) {
    const int world = 3;
    std::vector<std::vector<torch::Tensor>> local(world), averaged(world);
    std::vector<BucketStats> stats(world);
    thread_ranks(world, [&](int rank, Collectives& comm) {
        Net net(5);
        BucketOptions options;
        options.first_bucket_bytes = 60;
        options.bucket_bytes = 200;
        BucketReducer reducer(net.parameters, comm, torch::kCPU, options);
        reducer.set_members(std::vector<bool>(net.parameters.size(), true));
        EXPECT_GT(reducer.buckets().size(), 2u);
        // Two micro-batches: the hooks fire on the second only, and add the first's gradient.
        net.zero_grad();
        (net.loss(rank, 0) * 0.5).backward();
        reducer.arm(true);
        (net.loss(rank, 1) * 0.5).backward();
        std::vector<torch::Tensor> grads = net.grads();
        local[rank] = clones(grads);
        reducer.launch_rest(grads);
        reducer.finish(grads);
        averaged[rank] = clones(grads);
        stats[rank] = reducer.stats();
    });
    for (size_t p = 0; p < local[0].size(); ++p) {
        torch::Tensor mean = (local[0][p] + local[1][p] + local[2][p]) / 3;
        for (int r = 0; r < world; ++r) {
            EXPECT_TRUE(torch::allclose(averaged[r][p], mean, 1e-6, 1e-7)) << "parameter " << p;
            EXPECT_TRUE(torch::equal(averaged[r][p], averaged[0][p]));
        }
    }
    // Every bucket started while autograd was still running.
    EXPECT_EQ(stats[0].early_launches, stats[0].collectives);
    EXPECT_EQ(stats[0].bytes, 4 * (6 * 16 + 16 + 16 * 12 + 12 + 12 * 3 + 3));
}

TEST(Buckets, UnarmedAndUnusedParametersStillAverage) {
    thread_ranks(2, [&](int rank, Collectives& comm) {
        Net net(5);
        torch::Tensor unused = torch::ones({4}, torch::requires_grad());
        std::vector<torch::Tensor> params = net.parameters;
        params.push_back(unused);
        BucketReducer reducer(params, comm, torch::kCPU);
        reducer.set_members(std::vector<bool>(params.size(), true));
        reducer.add_leftover(params.size() - 1, torch::full({4}, 2.0f * static_cast<float>(rank + 1)));
        net.zero_grad();
        reducer.arm(false);
        net.loss(rank, 0).backward();
        std::vector<torch::Tensor> grads = net.grads();
        grads.push_back(torch::zeros({4}));
        reducer.launch_rest(grads);
        reducer.finish(grads);
        // The unused parameter's leftover (2 and 4) went out with its zero gradient.
        EXPECT_TRUE(torch::equal(grads.back(), torch::full({4}, 3.0f)));
        EXPECT_FALSE(reducer.leftovers().back().defined());
        // Not armed (clipping): everything goes after the backward pass.
        net.zero_grad();
        reducer.reset_stats();
        net.loss(rank, 1).backward();
        grads = net.grads();
        grads.push_back(torch::zeros({4}));
        reducer.launch_rest(grads);
        reducer.finish(grads);
        EXPECT_EQ(reducer.stats().early_launches, 0);
        EXPECT_EQ(reducer.stats().collectives, 1);
    });
}

// The exchange gives every rank the same gradients, and the same as lib/compress's
// exchange over all tensors at the same levels, through level changes that move
// tensors in and out of compression (error memory kept, or sent once).
TEST(Exchange, MatchesTheCompressExchangeThroughLevelChanges) {
    const std::vector<std::vector<std::string>> epochs = {
        {"powersgd:2", "none", "topk:0.3", "none", "none", "none"},
        {"powersgd:2", "none", "none", "none", "powersgd:1", "none"},     // topk -> none: memory sent once
        {"topk:0.2", "none", "powersgd:2", "none", "powersgd:1", "none"},  // new levels and a new member
        {"none", "none", "none", "none", "none", "none"},                 // everything uncompressed
        {"dgc:0.5", "none", "efsignsgd", "none", "none", "fp16"},
    };
    const int world = 2;
    std::mutex mutex;
    std::vector<std::vector<std::vector<torch::Tensor>>> ours(world), reference(world);
    thread_ranks(world, [&](int rank, Collectives& comm) {
        Net a(9), b(9);
        ExchangeSetup setup;  // DDP's bucket sizes: one bucket per route, PowerSGD draws as one exchange does
        setup.compression.seed = 3;
        BucketSync exchange(a.parameters, a.description(), comm, torch::kCPU, setup, specs_of(epochs[0]));
        const std::vector<acc::io::Parameter> infos = b.description();
        std::vector<acc::compress::Spec> specs;
        for (const auto& l : epochs[0]) specs.push_back(acc::compress::parse_spec(l));
        acc::exchange::GradientExchange plain(infos, specs, comm, setup.compression);
        std::int64_t step = 0;
        for (size_t e = 0; e < epochs.size(); ++e) {
            exchange.set_levels(specs_of(epochs[e]));
            exchange.set_epoch(static_cast<std::int64_t>(e));
            specs.clear();
            for (const auto& l : epochs[e]) specs.push_back(acc::compress::parse_spec(l));
            plain.set_levels(specs);
            plain.set_epoch(static_cast<std::int64_t>(e));
            for (int s = 0; s < 2; ++s, ++step) {
                std::vector<torch::Tensor> ga = exchanged(a, exchange, rank, step);
                b.zero_grad();
                b.loss(rank, step).backward();
                std::vector<torch::Tensor> gb = b.grads();
                plain.step(gb);
                std::lock_guard<std::mutex> lock(mutex);
                ours[rank].push_back(clones(ga));
                reference[rank].push_back(clones(gb));
            }
        }
        const auto dgc = exchange.momentum_in_gradient();
        EXPECT_TRUE(dgc[0]);
        EXPECT_FALSE(dgc[2]);
    });
    for (size_t s = 0; s < ours[0].size(); ++s)
        for (size_t p = 0; p < ours[0][s].size(); ++p) {
            EXPECT_TRUE(torch::equal(ours[0][s][p], ours[1][s][p])) << "step " << s << ", parameter " << p;
            EXPECT_TRUE(torch::allclose(ours[0][s][p], reference[0][s][p], 1e-5, 1e-6))
                << "step " << s << ", parameter " << p << ": " << ours[0][s][p] << " vs " << reference[0][s][p];
        }
}

// Small buckets: every compressed bucket starts while autograd still runs, and each
// tensor draws the random numbers it draws in one exchange over the whole model
// (its streams are keyed by its place among all compressed parameters), so the
// averages equal that exchange's.
TEST(Exchange, CompressedBucketsStartDuringTheBackwardPass) {
    const std::vector<std::string> levels = {"randomk:0.5", "none", "topk:0.3", "none", "qsgd:16", "fp16"};
    const int world = 2;
    std::mutex mutex;
    std::vector<std::vector<std::vector<torch::Tensor>>> ours(world), reference(world), compared(world);
    std::vector<std::int64_t> early(world), buckets(world), compressed(world);
    thread_ranks(world, [&](int rank, Collectives& comm) {
        Net a(6), b(6);
        ExchangeSetup setup;
        setup.buckets.first_bucket_bytes = 40;
        setup.buckets.bucket_bytes = 100;
        setup.compression.seed = 5;
        BucketSync exchange(a.parameters, a.description(), comm, torch::kCPU, setup, specs_of(levels));
        // The reference: one exchange over the compressed parameters, in model order.
        const std::vector<size_t> compressed_parameters = {0, 2, 4, 5};
        std::vector<acc::io::Parameter> infos;
        std::vector<std::string> compressed_levels;
        for (size_t i : compressed_parameters) {
            infos.push_back(b.description()[i]);
            compressed_levels.push_back(levels[i]);
        }
        acc::exchange::GradientExchange plain(infos, specs_of(compressed_levels), comm, setup.compression);
        buckets[rank] = static_cast<std::int64_t>(exchange.reducer().buckets().size());
        compressed[rank] = std::count(exchange.reducer().bucket_routes().begin(),
                                      exchange.reducer().bucket_routes().end(), Route::compressed);
        for (std::int64_t step = 0; step < 3; ++step) {
            std::vector<torch::Tensor> ga = exchanged(a, exchange, rank, step);
            b.zero_grad();
            b.loss(rank, step).backward();
            std::vector<torch::Tensor> gb;
            for (size_t i : compressed_parameters) gb.push_back(b.parameters[i].grad());
            plain.step(gb);
            std::vector<torch::Tensor> gc;
            for (size_t i : compressed_parameters) gc.push_back(ga[i]);
            std::lock_guard<std::mutex> lock(mutex);
            ours[rank].push_back(clones(ga));
            reference[rank].push_back(clones(gb));
            compared[rank].push_back(clones(gc));
        }
        early[rank] = exchange.take_totals().early_launches;
    });
    // From the last parameter: {fp16 4.bias, qsgd 4.weight} reaches 156 >= 40 bytes, then topk, then randomk.
    EXPECT_EQ(compressed[0], 3);
    EXPECT_EQ(early[0], 3 * buckets[0]);
    for (size_t s = 0; s < ours[0].size(); ++s) {
        for (size_t p = 0; p < ours[0][s].size(); ++p)
            EXPECT_TRUE(torch::equal(ours[0][s][p], ours[1][s][p])) << "step " << s << ", parameter " << p;
        for (size_t j = 0; j < compared[0][s].size(); ++j)
            EXPECT_TRUE(torch::allclose(compared[0][s][j], reference[0][s][j], 1e-5, 1e-6))
                << "step " << s << ", compressed parameter " << j << ": " << compared[0][s][j] << " vs "
                << reference[0][s][j];
    }
}

// PowerSGD and DGC over several buckets: the buckets share one RandomState, and a
// resumed exchange (state through a checkpoint's bytes) continues bit for bit,
// through a change of the compressed set.
TEST(Exchange, BucketsResumeBitForBit) {
    const std::vector<std::string> first_levels = {"powersgd:2", "none", "dgc:0.3", "none", "powersgd:1", "none"};
    const std::vector<std::string> later_levels = {"powersgd:1", "none", "none", "none", "powersgd:2", "topk:0.5"};
    thread_ranks(2, [&](int rank, Collectives& comm) {
        ExchangeSetup setup;
        setup.buckets.first_bucket_bytes = 40;
        setup.buckets.bucket_bytes = 100;
        setup.compression.seed = 7;
        setup.compression.compressors.powersgd.warm_start = false;  // a new Q every step: the shared RandomState matters
        Net a(3), b(3);
        BucketSync first(a.parameters, a.description(), comm, torch::kCPU, setup, specs_of(first_levels));
        EXPECT_GT(std::count(first.reducer().bucket_routes().begin(), first.reducer().bucket_routes().end(),
                             Route::compressed),
                  2);
        for (std::int64_t step = 0; step < 2; ++step) exchanged(a, first, rank, step);
        acc::train::TensorMap state = unpack(pack(first.state()));
        EXPECT_TRUE(state.count("exchange/powersgd_rng"));
        EXPECT_TRUE(state.count("2.weight/dgc_momentum"));
        BucketSync second(b.parameters, b.description(), comm, torch::kCPU, setup, specs_of(first_levels));
        second.load_state(state);
        for (std::int64_t step = 2; step < 6; ++step) {
            if (step == 4) {
                first.set_levels(specs_of(later_levels));
                second.set_levels(specs_of(later_levels));
            }
            const auto ga = clones(exchanged(a, first, rank, step)), gb = clones(exchanged(b, second, rank, step));
            for (size_t p = 0; p < ga.size(); ++p) EXPECT_TRUE(torch::equal(ga[p], gb[p])) << "step " << step << ", " << p;
        }
    });
}

TEST(Exchange, StateRoundTripsAndCountsBytes) {
    const std::vector<std::string> levels = {"powersgd:1", "none", "topk:0.5", "none", "none", "none"};
    thread_ranks(2, [&](int rank, Collectives& comm) {
        Net a(4), b(4);
        BucketSync first(a.parameters, a.description(), comm, torch::kCPU, {}, specs_of(levels));
        for (std::int64_t step = 0; step < 2; ++step) {
            a.zero_grad();
            a.loss(rank, step).backward();
            auto g = a.grads();
            first.exchange(g, {});
        }
        ExchangeTotals totals = first.take_totals();
        // powersgd:1 on 16x6: (16 + 6) floats; topk:0.5 on 12x16: 96 values and indices; the rest whole.
        EXPECT_EQ(totals.bytes, 2 * (4 * 22 + 8 * 96 + 4 * (16 + 12 + 3 * 12 + 3)));
        EXPECT_EQ(totals.steps, 2);
        // Through bytes, as rank 0's checkpoint carries it.
        acc::train::TensorMap state = unpack(pack(first.state()));
        EXPECT_TRUE(state.count("0.weight/error"));
        EXPECT_TRUE(state.count("0.weight/powersgd_q"));
        EXPECT_TRUE(state.count("exchange/step"));
        BucketSync second(b.parameters, b.description(), comm, torch::kCPU, {}, specs_of(levels));
        second.load_state(state);
        a.zero_grad();
        a.loss(rank, 5).backward();
        auto ga = a.grads();
        first.exchange(ga, {});
        b.zero_grad();
        b.loss(rank, 5).backward();
        auto gb = b.grads();
        second.exchange(gb, {});
        for (size_t p = 0; p < ga.size(); ++p) EXPECT_TRUE(torch::equal(ga[p], gb[p])) << p;

        acc::train::TensorMap bad = state;
        bad["nope.weight/error"] = torch::zeros({2});
        EXPECT_EQ(error_of([&] { second.load_state(bad); }), "exchange state 'nope.weight/error' names no parameter of this model");
        bad = state;
        bad["2.bias/powersgd_q"] = torch::zeros({2});
        EXPECT_EQ(error_of([&] { second.load_state(bad); }),
                  "exchange state '2.bias/powersgd_q' belongs to a compressed level, but '2.bias' is at level none");
    });
}

TEST(State, PackGatherAndBroadcast) {
    acc::train::TensorMap map = {{"a/b", torch::arange(6, torch::kFloat32).view({2, 3})},
                                 {"c", torch::tensor(std::vector<std::int64_t>{1, -2}, torch::kLong)},
                                 {"empty", torch::zeros({0})}};
    acc::train::TensorMap back = unpack(pack(map));
    ASSERT_EQ(back.size(), 3u);
    EXPECT_TRUE(torch::equal(back["a/b"], map["a/b"]));
    EXPECT_TRUE(torch::equal(back["c"], map["c"]));
    EXPECT_EQ(back["empty"].numel(), 0);
    torch::Tensor truncated = pack(map).slice(0, 0, 20);
    EXPECT_CONTAINS(error_of([&] { unpack(truncated); }), "truncated");

    std::vector<std::vector<acc::train::TensorMap>> gathered(2);
    std::vector<std::vector<std::uint8_t>> received(2);
    thread_ranks(2, [&](int rank, Collectives& comm) {
        acc::train::TensorMap mine = {{"x", torch::full({rank + 1}, static_cast<float>(rank))}};
        gathered[rank] = gather_maps(comm, mine);
        received[rank] = broadcast_bytes(comm, rank == 0 ? std::vector<std::uint8_t>{1, 2, 3} : std::vector<std::uint8_t>(), 0);
    });
    for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(torch::equal(gathered[r][1].at("x"), torch::full({2}, 1.0f)));
        EXPECT_EQ(received[r], (std::vector<std::uint8_t>{1, 2, 3}));
    }
    Net a(1), b(1), c(2);
    EXPECT_EQ(acc::train::checksum(a.parameters), acc::train::checksum(b.parameters));
    EXPECT_NE(acc::train::checksum(a.parameters), acc::train::checksum(c.parameters));
}

// DGC's optimizer: the gradient already carries momentum; only weight decay gets it.
TEST(Sgd, MomentumOnWeightDecayOnlyForGradientsWithMomentum) {
    torch::Tensor p = torch::tensor({1.0f, -2.0f});
    acc::train::Sgd sgd({p}, {0.5, false, 0.1});
    sgd.set_momentum_in_gradient({true});
    torch::Tensor g = torch::tensor({0.2f, 0.4f});
    sgd.step({g}, 1.0);  // d = 0.1 p = (0.1, -0.2); buf = d; p -= g + buf
    EXPECT_TRUE(torch::allclose(p, torch::tensor({1.0f - 0.3f, -2.0f - 0.2f})));
    sgd.step({g}, 1.0);  // d = 0.1 p = (0.07, -0.22); buf = 0.5 buf + d = (0.12, -0.32)
    EXPECT_TRUE(torch::allclose(p, torch::tensor({0.7f - 0.32f, -2.2f - 0.08f})));
    acc::train::Sgd nesterov({p}, {0.5, true, 0.0});
    nesterov.set_momentum_in_gradient({true});
    torch::Tensor before = p.clone();
    nesterov.step({g}, 0.5);  // without weight decay the gradient is applied as it is
    EXPECT_TRUE(torch::allclose(p, before - 0.5 * g));
    EXPECT_THROW(nesterov.set_momentum_in_gradient({true, false}), acc::Error);
}

namespace {

// Records what the trainer tells it.
class Probe : public acc::train::GradientSync {
public:
    void before_backward(const acc::train::StepInfo& step, bool accumulated) override {
        calls.push_back("before " + std::to_string(step.step) + (accumulated ? " accumulated" : ""));
    }
    void exchange(std::vector<torch::Tensor>&, const acc::train::StepInfo& step) override {
        calls.push_back("exchange " + std::to_string(step.step));
    }
    std::vector<std::string> calls;
};

}  // namespace

TEST(Trainer, ArmsTheExchangeBeforeTheLastMicroBatch) {
    auto data = tiny_data(4, 3, 40, 30, 1);
    acc::train::TrainerOptions options = batches(20, 8);
    auto model = acc::train::make_model("mlp", data->info().shape, {8});
    acc::train::Trainer trainer(model, *data, options);
    Probe probe;
    trainer.set_exchange(&probe);
    trainer.train_epoch(0, 0.1);
    EXPECT_EQ(probe.calls, (std::vector<std::string>{"before 0 accumulated", "exchange 0", "before 1 accumulated",
                                                     "exchange 1"}));
    // Clipping needs every gradient first: no arming.
    options.micro_batch_size = 0;
    options.clip_norm = 1;
    acc::train::Trainer clipped(model, *data, options);
    clipped.set_exchange(&probe);
    probe.calls.clear();
    clipped.train_epoch(0, 0.1);
    EXPECT_EQ(probe.calls, (std::vector<std::string>{"exchange 0", "exchange 1"}));

    // A batch schedule changes the batch size; the evaluation splits over ranks.
    trainer.set_batch_size(10);
    EXPECT_EQ(trainer.steps_in_epoch(0), 4);
    EXPECT_THROW(trainer.set_batch_size(0), acc::UsageError);
    acc::train::EvalResult whole = trainer.evaluate();
    double loss = 0, correct = 0;
    std::int64_t samples = 0;
    for (int r = 0; r < 3; ++r) {
        acc::train::EvalResult part = trainer.evaluate({r, 3});
        loss += part.loss * static_cast<double>(part.samples);
        correct += part.accuracy * static_cast<double>(part.samples);
        samples += part.samples;
    }
    EXPECT_EQ(samples, whole.samples);
    EXPECT_NEAR(loss / static_cast<double>(samples), whole.loss, 1e-5);
    EXPECT_NEAR(correct / static_cast<double>(samples), whole.accuracy, 1e-9);
}

// With the exchange overlapping the backward pass, the recorder still sums each
// rank's own raw gradient: at learning rate 0 the weights stay put, so rank r's
// sums equal those of a run on rank r's shard without any exchange.
TEST(Trainer, RecorderSeesTheLocalGradientWhileBucketsOverlap) {
    auto data = tiny_data(6, 4, 96, 8, 2);
    acc::train::TrainerOptions options = batches(12, 5);
    const int world = 2;
    std::vector<std::shared_ptr<acc::train::Model>> models, alone;
    for (int r = 0; r < 2 * world; ++r) {
        torch::manual_seed(8);  // here, not in the rank threads: the global generator is shared
        (r < world ? models : alone).push_back(acc::train::make_model("mlp", data->info().shape, {16}));
    }
    std::vector<std::vector<torch::Tensor>> with_exchange(world), without(world);
    std::vector<std::int64_t> early(world);
    thread_ranks(world, [&](int rank, Collectives& comm) {
        acc::train::Trainer trainer(models[rank], *data, options, {rank, world});
        acc::train::GradientRecorder recorder(trainer.parameter_tensors(), false);
        trainer.set_recorder(&recorder);
        std::vector<acc::compress::Spec> levels(trainer.parameters().size(), acc::compress::parse_spec("none"));
        BucketSync exchange(trainer.parameter_tensors(), trainer.parameters(), comm, torch::kCPU, {}, levels);
        trainer.set_exchange(&exchange);
        trainer.train_epoch(0, 0.0);
        with_exchange[rank] = clones(recorder.sums());
        early[rank] = exchange.take_totals().early_launches;

        acc::train::Trainer plain(alone[rank], *data, options, {rank, world});
        acc::train::GradientRecorder reference(plain.parameter_tensors(), false);
        plain.set_recorder(&reference);
        plain.train_epoch(0, 0.0);
        without[rank] = clones(reference.sums());
    });
    for (int r = 0; r < world; ++r) {
        EXPECT_EQ(early[r], 4);  // 48 samples per rank in batches of 12: every step's bucket went out early
        for (size_t p = 0; p < without[r].size(); ++p)
            EXPECT_TRUE(torch::equal(with_exchange[r][p], without[r][p])) << "rank " << r << ", parameter " << p;
    }
    EXPECT_FALSE(torch::equal(with_exchange[0][0], with_exchange[1][0]));  // the ranks' data differ
}

// GravacSync hands the exchange the step's epoch, samples and start, and its record,
// throughput rows, state and totals are the bare exchange's, field for field.
TEST(GravacSync, IsTheExchangeWithTheTrainersStep) {
    thread_ranks(2, [&](int rank, Collectives& comm) {
        const std::vector<torch::Tensor> tensors = {torch::zeros({8, 16}), torch::zeros({8}), torch::zeros({4, 10})};
        std::vector<acc::io::Parameter> description;
        std::vector<acc::compress::TensorInfo> infos;
        for (size_t i = 0; i < tensors.size(); ++i) {
            description.push_back({"p" + std::to_string(i), tensors[i].sizes().vec()});
            infos.push_back({"p" + std::to_string(i), tensors[i].sizes().vec()});
        }
        auto options = [] {
            acc::exchange::GravacExchangeOptions o;
            o.settings = acc::regime::gravac_defaults(2);
            o.settings.window = 2;
            o.settings.epsilon = 0.6;
            o.settings.theta_min = 4;
            o.settings.theta_max = 64;
            o.clock = [] { return acc::SteadyClock::time_point{} + std::chrono::seconds(10); };
            return o;
        };
        GravacSync sync(tensors, description, comm, torch::kCPU, options());
        acc::exchange::GravacExchange bare(infos, comm, torch::kCPU, options());
        for (std::int64_t s = 0; s < 8; ++s) {
            auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(100 * s + rank));
            std::vector<torch::Tensor> g;
            for (const auto& t : tensors) g.push_back(at::randn(t.sizes(), generator).pow(3));
            std::vector<torch::Tensor> h;
            for (const auto& t : g) h.push_back(t.clone());
            acc::train::StepInfo step;
            step.epoch = s / 4;
            step.step = s % 4;
            step.global_step = s;
            step.samples = 16 + s;
            step.started = acc::SteadyClock::time_point{} + std::chrono::milliseconds(100 * s);
            sync.exchange(g, step);
            bare.exchange(h, acc::exchange::GravacStepInfo{step.epoch, step.samples, step.started});
            for (size_t p = 0; p < g.size(); ++p) EXPECT_TRUE(torch::equal(g[p], h[p])) << "step " << s;
        }
        const auto record = sync.take_record(3);
        const auto& records = record.steps;
        const auto expected = bare.take_steps();
        ASSERT_EQ(records.size(), expected.size());
        for (size_t i = 0; i < records.size(); ++i) {
            EXPECT_EQ(records[i].epoch, expected[i].epoch);
            EXPECT_EQ(records[i].factor, expected[i].factor);
            EXPECT_EQ(records[i].choice, expected[i].choice);
            EXPECT_EQ(records[i].theta_min, expected[i].theta_min);
            EXPECT_EQ(records[i].candidate, expected[i].candidate);
            EXPECT_TRUE(records[i].gain_min == expected[i].gain_min ||
                        (std::isnan(records[i].gain_min) && std::isnan(expected[i].gain_min)));
            EXPECT_TRUE(records[i].gain_candidate == expected[i].gain_candidate ||
                        (std::isnan(records[i].gain_candidate) && std::isnan(expected[i].gain_candidate)));
        }
        EXPECT_EQ(records.back().epoch, 1);
        const auto& rows = record.throughput;
        const auto expected_rows = bare.throughput(3);
        ASSERT_EQ(rows.size(), expected_rows.size());
        for (size_t i = 0; i < rows.size(); ++i) {
            EXPECT_EQ(rows[i].epoch, 3);
            EXPECT_EQ(rows[i].factor, expected_rows[i].factor);
            EXPECT_EQ(rows[i].throughput, expected_rows[i].throughput);
        }
        const auto state = sync.state(), expected_state = bare.state();
        ASSERT_EQ(state.size(), expected_state.size());
        for (const auto& [name, t] : expected_state) EXPECT_TRUE(torch::equal(state.at(name), t)) << name;
        EXPECT_EQ(sync.take_totals().bytes, bare.take_totals().bytes);
    });
}

// make_run_sync builds the one sync a run's settings call for, behind RunSync:
// BucketSync, following the levels each epoch sets, or GraVAC, which chooses its own.
TEST(RunSync, TheFactoryBuildsTheRunsOneSync) {
    thread_ranks(2, [&](int, Collectives& comm) {
        const std::vector<torch::Tensor> tensors = {torch::zeros({8, 16}, torch::requires_grad()),
                                                    torch::zeros({8}, torch::requires_grad())};
        const std::vector<acc::io::Parameter> description = {{"w", {8, 16}}, {"b", {8}}};
        const std::vector<acc::compress::Spec> none(2, acc::compress::no_compression());
        acc::exchange::SyncSettings levels;
        auto buckets = acc::exchange::make_run_sync(levels, tensors, description, comm, torch::kCPU, none);
        ASSERT_NE(dynamic_cast<BucketSync*>(buckets.get()), nullptr);
        EXPECT_GE(buckets->buckets(), 1);
        buckets->begin_epoch({1, {acc::compress::parse_spec("dgc:0.1"), acc::compress::no_compression()}, 32});
        EXPECT_EQ(dynamic_cast<BucketSync&>(*buckets).levels()[0].text(), "dgc:0.1");
        EXPECT_EQ(buckets->momentum_in_gradient(), (std::vector<bool>{true, false}));
        EXPECT_TRUE(buckets->take_record(1).steps.empty());

        acc::exchange::SyncSettings gravac;
        gravac.gravac.emplace();
        gravac.gravac->settings = acc::regime::gravac_defaults(2);
        auto chosen = acc::exchange::make_run_sync(gravac, tensors, description, comm, torch::kCPU, none);
        ASSERT_NE(dynamic_cast<GravacSync*>(chosen.get()), nullptr);
        EXPECT_EQ(chosen->buckets(), 0);
        chosen->begin_epoch({0, none, 64});
        EXPECT_TRUE(chosen->take_record(0).steps.empty());  // no step yet
    });
}
