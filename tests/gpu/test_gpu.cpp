// The training library's CUDA paths against its CPU paths. Without a CUDA device
// the program says so and exits 77, which CTest reports as skipped.
#include "base/error.hpp"
#include "comm/torch_compat.hpp"
#include "compress/codecs.hpp"
#include "compress/device_codec.hpp"
#include "comm/device_timer.hpp"
#include "comm/loopback.hpp"
#include "compress/low_rank_kernels.hpp"
#include "compress/shapes.hpp"
#include "compress/spec.hpp"
#include "exchange/gradient_exchange.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include "support/tiny_synthetic.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

using namespace acc::train;
using acc::test::tiny_synthetic;

namespace {

const torch::Device kGpu(torch::kCUDA);

TrainerOptions sgd_on(torch::Device device) {
    TrainerOptions o;
    o.batch_size = 32;
    o.device = device;
    return o;
}

// Trains one epoch from the same initial weights; returns the result and the weights on the host.
std::pair<EpochResult, std::vector<torch::Tensor>> one_epoch(const Dataset& data, torch::Device device) {
    torch::manual_seed(5);
    auto model = make_model("mlp", data.info().shape, {});
    Trainer t(model, data, sgd_on(device));
    EpochResult r = t.train_epoch(0, 0.05);
    std::vector<torch::Tensor> weights;
    for (const auto& p : t.parameter_tensors()) weights.push_back(p.detach().cpu());
    return {r, weights};
}

}  // namespace

TEST(TrainerOnCuda, MatchesTheCpuWithinRounding) {
    auto data = tiny_synthetic(512);
    auto [cpu, cpu_weights] = one_epoch(*data, torch::kCPU);
    auto [gpu, gpu_weights] = one_epoch(*data, kGpu);
    EXPECT_EQ(gpu.samples, cpu.samples);
    EXPECT_EQ(gpu.steps, cpu.steps);
    EXPECT_NEAR(gpu.loss, cpu.loss, 1e-4 * cpu.loss);
    EXPECT_NEAR(gpu.accuracy, cpu.accuracy, 2.0 / static_cast<double>(cpu.samples));
    ASSERT_EQ(gpu_weights.size(), cpu_weights.size());
    for (size_t i = 0; i < cpu_weights.size(); ++i)
        EXPECT_TRUE(torch::allclose(gpu_weights[i], cpu_weights[i], 1e-4, 1e-5)) << "parameter " << i;
}

TEST(TrainerOnCuda, StepCallbacksSeeEveryStepInOrderWithItsLoss) {
    auto data = tiny_synthetic(512);
    torch::manual_seed(5);
    Trainer t(make_model("mlp", data->info().shape, {}), *data, sgd_on(kGpu));
    std::vector<std::int64_t> steps;
    double loss_sum = 0;
    std::int64_t samples = 0;
    EpochResult r = t.train_epoch(0, 0.05, [&](const StepInfo& s, double loss, std::int64_t n) {
        steps.push_back(s.step);
        EXPECT_TRUE(std::isfinite(loss));
        loss_sum += loss * static_cast<double>(n);
        samples += n;
    });
    ASSERT_EQ(static_cast<std::int64_t>(steps.size()), r.steps);
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<std::int64_t>(i));
    EXPECT_EQ(samples, r.samples);
    EXPECT_DOUBLE_EQ(r.loss, loss_sum / static_cast<double>(samples));
}

TEST(TrainerOnCuda, DivergenceNamesTheSameStepWithOrWithoutACallback) {
    auto data = tiny_synthetic(512);
    auto message = [&](bool callback) {
        torch::manual_seed(1);
        Trainer t(make_model("mlp", data->info().shape, {}), *data, sgd_on(kGpu));
        try {
            if (callback)
                t.train_epoch(0, 1e30, [](const StepInfo&, double, std::int64_t) {});
            else
                t.train_epoch(0, 1e30);
        } catch (const acc::Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string unread = message(false);
    EXPECT_NE(unread.find("training diverged: the loss is"), std::string::npos) << unread;
    EXPECT_EQ(message(true), unread);
}

TEST(DatasetOnCuda, BatchesOnTheDeviceEqualTheHostsBatches) {
    // Byte images (normalized per batch) and float images (used as they are).
    acc::train::ImageSet train, test;
    for (auto* set : {&train, &test}) {
        set->count = 40;
        set->channels = 1;
        set->height = set->width = 4;
        for (std::int64_t i = 0; i < set->count * 16; ++i) set->pixels.push_back(static_cast<std::uint8_t>(i * 7));
        for (std::int64_t i = 0; i < set->count; ++i) set->labels.push_back(static_cast<std::int64_t>(i % 3));
    }
    auto bytes = make_image_dataset("bytes", "memory", train, test, 3, {{0.5f}, {0.25f}}, false);
    auto floats = tiny_synthetic(40, 8);
    for (const Dataset* data : {bytes.get(), floats.get()}) {
        auto host = data->train(1, {}, 16, 9);
        std::vector<Batch> expected;
        for (std::int64_t i = 0; i < host->size(); ++i) expected.push_back(host->get(i));
        data->use_device(kGpu);
        auto device = data->train(1, {}, 16, 9);
        ASSERT_EQ(device->size(), host->size());
        for (std::int64_t i = 0; i < device->size(); ++i) {
            Batch b = device->get(i);
            EXPECT_TRUE(b.input.is_cuda()) << data->info().name;
            EXPECT_TRUE(torch::allclose(b.input.cpu(), expected[static_cast<size_t>(i)].input, 1e-6, 1e-6));
            EXPECT_TRUE(torch::equal(b.target.cpu(), expected[static_cast<size_t>(i)].target));
            EXPECT_EQ(b.samples, expected[static_cast<size_t>(i)].samples);
        }
    }
}

TEST(SgdOnCuda, MatchesTheCpu) {
    torch::manual_seed(3);
    std::vector<torch::Tensor> cpu = {torch::randn({64, 32}), torch::randn({32})};
    std::vector<torch::Tensor> grads = {torch::randn({64, 32}), torch::randn({32})};
    std::vector<torch::Tensor> gpu = {cpu[0].to(kGpu), cpu[1].to(kGpu)};
    std::vector<torch::Tensor> gpu_grads = {grads[0].to(kGpu), grads[1].to(kGpu)};
    OptimizerConfig config;
    config.momentum = 0.9;
    config.nesterov = true;
    config.weight_decay = 1e-4;
    Sgd on_cpu(cpu, config), on_gpu(gpu, config);
    for (int step = 0; step < 3; ++step) {
        on_cpu.step(grads, 0.1);
        on_gpu.step(gpu_grads, 0.1);
    }
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(torch::allclose(gpu[i].cpu(), cpu[i], 1e-5, 1e-6));
}

// compress-bench's GPU clock: CUDA events where LibTorch can time them, read at the
// step's end; each part's seconds lie within the host's wall time around the step.
TEST(DeviceTimerOnCuda, PartsHoldTheDevicesWork) {
    using acc::comm::DeviceTimer;
    torch::Tensor a = torch::randn({2048, 2048}, torch::TensorOptions().device(kGpu));
    DeviceTimer timer;
    timer.begin_step(kGpu, true);
    EXPECT_EQ(timer.method(),
              acc::comm::compat::kTimedEvents ? DeviceTimer::Method::events : DeviceTimer::Method::synchronize);
    double encode = 0, decode = 0;
    torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    auto mark = timer.start();
    for (int i = 0; i < 20; ++i) a = torch::mm(a, a).div_(2048.0);
    timer.stop(mark, encode);
    mark = timer.start();
    a.add_(1.0);
    timer.stop(mark, decode);
    timer.finish_step();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_GT(encode, 0);
    EXPECT_GT(decode, 0);
    EXPECT_GT(encode, decode);  // twenty 2048^2 products against one addition
    EXPECT_LE(encode + decode, wall);
    timer.begin_step(kGpu, false);  // training: the host's clock, no waits
    EXPECT_EQ(timer.method(), DeviceTimer::Method::host_clock);
}

// comm-profile's hold: with the stream held before the start event, a part queued
// after a host delay is timed without it (the device had not reached the start when
// the host queued the part); without the hold the delay is counted.
TEST(DeviceTimerOnCuda, AHeldPartLeavesOutTheHostsTimeToQueueIt) {
    using acc::comm::DeviceTimer;
    if (!acc::comm::compat::kTimedEvents) GTEST_SKIP() << "this LibTorch cannot time CUDA events";
    torch::Tensor a = torch::ones({1024}, torch::TensorOptions().device(kGpu));
    DeviceTimer timer;
    for (bool held : {true, false}) {
        torch::cuda::synchronize();
        timer.begin_step(kGpu, true);
        if (held) timer.hold(200'000'000);  // about 0.1 s at 1.5 to 2 GHz
        const auto mark = timer.start();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the host's time to queue
        a.add_(1.0);
        EXPECT_EQ(timer.reached(mark), !held);
        double seconds = 0;
        timer.stop(mark, seconds);
        timer.finish_step();
        if (held)
            EXPECT_LT(seconds, 0.005);
        else
            EXPECT_GE(seconds, 0.019);
    }
    EXPECT_EQ(a[0].item<float>(), 3.0f);
}

// A build with the CUDA kernels runs them on the GPU of the tests: its architecture is
// among ACC_CUDA_ARCHITECTURES (otherwise the tests below would skip, and the compressors
// take the ATen operations).
TEST(CudaKernels, RunOnThisGpu) {
    namespace c = acc::compress;
    if (!c::device::LowRankKernels::available()) GTEST_SKIP() << "built without ACC_CUDA_KERNELS";
    if (c::device::cuda_kernels() == c::device::CudaKernels::none)
        GTEST_SKIP() << "ACC_CUDA_KERNELS=0 in the environment";
    EXPECT_TRUE(c::device::cuda_kernels_for(torch::zeros({1}, torch::TensorOptions().device(kGpu))))
        << "this GPU's architecture is not among the build's (ACC_CUDA_ARCHITECTURES)";
}

// The CUDA kernels (ACC_CUDA_KERNELS) encode as the host codecs do, byte for byte, into
// payloads that start at any byte (fp16: any half), and refuse NaN, and fp16's overflow,
// as they do.
TEST(CudaKernels, PayloadsEqualTheHostCodecs) {
    namespace c = acc::compress;
    if (!c::device::cuda_kernels_for(torch::zeros({1}, torch::TensorOptions().device(kGpu))))
        GTEST_SKIP() << "built without ACC_CUDA_KERNELS or for another GPU, or ACC_CUDA_KERNELS=0";
    const std::uint64_t key = 0x1234567890abcdefull;
    for (const std::string level : {"signsgd", "qsgd:2", "qsgd:127", "qsgd:32767", "fp16"})
        for (std::int64_t n : {1, 31, 33, 4099, 1000003}) {
            const std::string what = level + " on " + std::to_string(n) + " values";
            c::CodecOptions o;
            o.world = 2;
            const c::Spec spec = c::parse_spec(level);
            auto host = c::make_codec(spec, {n}, o);
            auto dev = c::make_device_codec(spec, {n}, o);
            torch::Tensor x = torch::randn({n}, torch::TensorOptions().dtype(torch::kFloat)) * 3.0;
            x[n / 2] = 0.0;
            if (n > 2) x[1] = 1e-6f;  // fp16: a subnormal half after dividing
            // fp16's payload lies in its channel's half-precision buffer.
            const bool half = dev->channel() == c::Channel::fp16_sum;
            const auto type = half ? torch::kHalf : torch::kUInt8;
            const std::int64_t elements = host->buffer_bytes() / (half ? 2 : 1);
            // The last value: as drawn, NaN, then beyond fp16's range (finite for the others).
            for (const float last : {x[n - 1].item<float>(), std::numeric_limits<float>::quiet_NaN(), 2e5f}) {
                x[n - 1] = last;
                const std::string case_ = what + ", last value " + std::to_string(last);
                std::vector<std::uint8_t> expected(static_cast<size_t>(host->buffer_bytes()));
                std::vector<float> values(x.data_ptr<float>(), x.data_ptr<float>() + n);
                const bool host_ok = host->encode(values.data(), false, key, expected.data());
                // The input where a buffer starts (16-byte loads) and one value in (one by one);
                // the payload where its buffer starts (wide stores) and one element in, at any
                // alignment of its type (one by one).
                for (const std::int64_t x_at : {0, 1})
                    for (const std::int64_t payload_at : {0, 1}) {
                        const std::string placed = case_ + ", input at " + std::to_string(x_at) + ", payload at " +
                                                   std::to_string(payload_at);
                        torch::Tensor t = torch::cat({torch::zeros({x_at}), x}).to(kGpu).narrow(0, x_at, n);
                        torch::Tensor buffer =
                            torch::zeros({elements + 2}, torch::TensorOptions().dtype(type).device(kGpu));
                        torch::Tensor payload = buffer.narrow(0, payload_at, elements);
                        const bool dev_ok = dev->encode(t, false, key, payload).item<bool>();
                        EXPECT_EQ(host_ok, dev_ok) << placed;
                        if (!host_ok) continue;
                        torch::Tensor got = c::device::bytes_of(payload.cpu());
                        const std::uint8_t* bytes = got.data_ptr<std::uint8_t>();
                        EXPECT_EQ(expected, std::vector<std::uint8_t>(bytes, bytes + got.numel())) << placed;
                        torch::Tensor around = torch::cat({buffer.narrow(0, 0, payload_at),
                                                           buffer.narrow(0, payload_at + elements, 2 - payload_at)});
                        EXPECT_EQ(torch::count_nonzero(around).item<std::int64_t>(), 0)
                            << placed << ": an element outside the payload was written";
                    }
            }
        }
}

// The kernels' choice set for a scope, as it was afterwards: through the library, not the
// environment, which CUDA's, NCCL's and the profiler's threads may read meanwhile.
class KernelsWanted {
public:
    explicit KernelsWanted(const char* value) : was_(acc::compress::device::cuda_kernels()) {
        acc::compress::device::set_cuda_kernels(acc::compress::device::cuda_kernels_from(value));
    }
    ~KernelsWanted() { acc::compress::device::set_cuda_kernels(was_); }
    KernelsWanted(const KernelsWanted&) = delete;
    KernelsWanted& operator=(const KernelsWanted&) = delete;

private:
    acc::compress::device::CudaKernels was_;
};

// The finite check's kernel (a buffer's parts, or all of a tensor) flags what the ATen
// operations flag (ACC_CUDA_KERNELS=0), for NaN and infinity of either sign anywhere,
// with the buffer where its memory starts and one value in.
TEST(CudaKernels, FiniteChecksEqualTheATenOperations) {
    namespace d = acc::compress::device;
    if (!d::cuda_kernels_for(torch::zeros({1}, torch::TensorOptions().device(kGpu))))
        GTEST_SKIP() << "built without ACC_CUDA_KERNELS or for another GPU, or ACC_CUDA_KERNELS=0";
    const auto to_vector = [](const torch::Tensor& flags) {
        torch::Tensor f = flags.cpu().view({-1});
        return std::vector<bool>(f.data_ptr<bool>(), f.data_ptr<bool>() + f.numel());
    };
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    torch::Tensor sizes = torch::randint(1, 5000, {300}, torch::kLong);
    torch::Tensor ends = sizes.cumsum(0) - 1;
    const std::int64_t n = ends[-1].item<std::int64_t>() + 1;
    for (const std::int64_t at : {0, 1})
        for (const int bad : {0, 1, 7}) {
            torch::Tensor x = torch::randn({n + at});
            for (int b = 0; b < bad; ++b) {
                const float value = b % 4 == 0 ? nan : b % 4 == 1 ? -nan : b % 4 == 2 ? inf : -inf;
                x[at + (b == 0 ? 0 : b == 1 ? n - 1 : torch::randint(0, n, {1}).item<std::int64_t>())] = value;
            }
            const torch::Tensor values = x.to(kGpu).narrow(0, at, n);
            const torch::Tensor ends_gpu = ends.to(kGpu);
            std::vector<bool> parts_aten, parts_kernel, all_aten, all_kernel;
            {
                KernelsWanted none("0");
                parts_aten = to_vector(d::finite_parts(values, ends_gpu));
                all_aten = to_vector(d::all_finite(values));
            }
            parts_kernel = to_vector(d::finite_parts(values, ends_gpu));
            all_kernel = to_vector(d::all_finite(values));
            const std::string what = std::to_string(bad) + " bad values, input at " + std::to_string(at);
            EXPECT_EQ(parts_aten, parts_kernel) << what;
            EXPECT_EQ(all_aten, all_kernel) << what;
            EXPECT_EQ(all_kernel[0], bad == 0) << what;
        }
}

// PowerSGD's rounds by the toolkit's CUDA kernels (ACC_CUDA_KERNELS=all) against the
// batched ATen operations, over ResNet-18's shapes with 1 and 4 workers (loopback), in
// both variants, three steps: the same gradients within rounding. The kernels sum in
// another order than cuBLAS, so some bits differ where they ran.
TEST(CudaKernels, PowerSgdStepsEqualTheATenOperations) {
    namespace x = acc::exchange;
    if (!acc::compress::device::LowRankKernels::available()) GTEST_SKIP() << "built without ACC_CUDA_KERNELS";
    const auto tensors = acc::compress::preset_shapes("resnet18");
    for (const std::string level : {"powersgd:1", "powersgd:2", "powersgd:4"})
        for (const auto variant : {x::PowerSgdVariant::pytorch_hook, x::PowerSgdVariant::accordion})
            for (const int world : {1, 4}) {
                const bool hook = variant == x::PowerSgdVariant::pytorch_hook;
                const std::string what = level + (hook ? ", the hook's variant" : ", Accordion's variant") + ", " +
                                         std::to_string(world) + " workers";
                std::array<std::vector<torch::Tensor>, 2> out;
                for (int kernels = 0; kernels < 2; ++kernels) {
                    KernelsWanted wanted(kernels == 1 ? "all" : "1");
                    acc::comm::LoopbackCollectives comm(world);
                    x::ExchangeOptions o;
                    o.compressors.powersgd.variant = variant;
                    x::GradientExchange ex(tensors, std::vector<acc::compress::Spec>(tensors.size(),
                                                                                     acc::compress::parse_spec(level)),
                                           comm, o);
                    for (int step = 0; step < 3; ++step) {
                        std::vector<torch::Tensor> g;
                        for (size_t i = 0; i < tensors.size(); ++i) {
                            torch::manual_seed(static_cast<std::uint64_t>(1000 * step + i));
                            g.push_back(torch::randn(tensors[i].shape).to(kGpu));
                        }
                        ex.step(g);
                        for (auto& t : g) out[static_cast<size_t>(kernels)].push_back(t.cpu());
                    }
                }
                bool some_bits_differ = false;
                for (size_t i = 0; i < out[0].size(); ++i) {
                    const double scale = out[0][i].abs().max().item<double>();
                    EXPECT_TRUE(torch::allclose(out[1][i], out[0][i], 1e-3, 1e-4 * scale))
                        << what << ", step " << i / tensors.size() << ", " << tensors[i % tensors.size()].name
                        << ": differs by " << (out[1][i] - out[0][i]).abs().max().item<double>();
                    some_bits_differ = some_bits_differ || !torch::equal(out[1][i], out[0][i]);
                }
                // The hook's variant orthogonalizes rank 4 by QR, which the kernels leave to ATen.
                if (!(hook && level == "powersgd:4")) {
                    EXPECT_TRUE(some_bits_differ) << what << ": the kernels did not run";
                }
            }
}

// Top-k's CUDA kernels (radix selection, ACC_CUDA_KERNELS=all) send what the host codec
// sends, byte for byte (among equal magnitudes the first by position, as the host takes
// them), and leave the residual it leaves.
TEST(CudaKernels, TopkSelectionEqualsTheHostCodec) {
    namespace c = acc::compress;
    KernelsWanted all("all");
    if (!c::device::cuda_unmeasured_kernels_for(kGpu))
        GTEST_SKIP() << "built without ACC_CUDA_KERNELS";
    for (const std::string level : {"topk:0.001", "topk:0.01", "topk:0.3", "topk:1"})
        for (std::int64_t n : {1, 33, 4097, 1000003, 11173962})
            for (const bool ties : {false, true}) {
                const std::string what = level + " on " + std::to_string(n) + (ties ? " values in 0.1 steps" : " values");
                auto host = c::make_codec(c::parse_spec(level), {n}, c::CodecOptions());
                auto dev = c::make_device_codec(c::parse_spec(level), {n}, c::CodecOptions());
                torch::Tensor x = torch::randn({n}) * 3.0;
                if (ties) x = torch::round(x * 10.0) / 10.0;
                x[n / 2] = 0.0;
                std::vector<float> residual(x.data_ptr<float>(), x.data_ptr<float>() + n);
                std::vector<std::uint8_t> expected(static_cast<size_t>(host->buffer_bytes()));
                ASSERT_TRUE(host->encode(residual.data(), true, 3, expected.data())) << what;
                torch::Tensor t = x.to(kGpu);
                // One byte in: payloads lie at any byte of the channel's buffer.
                torch::Tensor buffer = torch::zeros({host->buffer_bytes() + 1},
                                                    torch::TensorOptions().dtype(torch::kUInt8).device(kGpu));
                torch::Tensor payload = buffer.narrow(0, 1, host->buffer_bytes());
                EXPECT_TRUE(dev->encode(t, true, 3, payload).item<bool>()) << what;
                torch::Tensor got = payload.cpu();
                EXPECT_EQ(expected, std::vector<std::uint8_t>(got.data_ptr<std::uint8_t>(),
                                                              got.data_ptr<std::uint8_t>() + got.numel()))
                    << what;
                EXPECT_TRUE(torch::equal(t.cpu(), torch::from_blob(residual.data(), {n}))) << what;
            }
}

// Top-k and DGC check only the magnitudes they choose for NaN and infinity: CUDA's
// top-k (torch.topk, and the toolkit's kernels with ACC_CUDA_KERNELS=all) must choose a
// NaN (of either sign bit) or an infinity wherever it lies.
TEST(TopkOnCuda, ChoosesNaNAndInfinityWhereverTheyLie) {
    namespace c = acc::compress;
    const std::int64_t n = 1000003;
    const float negative_nan = -std::numeric_limits<float>::quiet_NaN();
    for (const char* kernels : {"1", "all"}) {
        KernelsWanted wanted(kernels);
        for (const std::string level : {"topk:0.01", "dgc:0.01"})
            for (const float bad : {std::numeric_limits<float>::quiet_NaN(), negative_nan,
                                    std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()})
                for (const std::int64_t at : {std::int64_t{0}, n / 3, n - 1}) {
                    c::CodecOptions o;
                    auto dev = c::make_device_codec(c::parse_spec(level), {n}, o);
                    torch::Tensor t = torch::randn({n}, torch::TensorOptions().device(kGpu)) * 100.0;
                    torch::Tensor payload = torch::empty({dev->host().buffer_bytes()},
                                                         torch::TensorOptions().dtype(torch::kUInt8).device(kGpu));
                    torch::Tensor clean = t.clone();
                    EXPECT_TRUE(dev->encode(clean, true, 1, payload).item<bool>()) << level;
                    t[at] = bad;
                    EXPECT_FALSE(dev->encode(t, true, 1, payload).item<bool>())
                        << level << ", " << bad << " at " << at << ", ACC_CUDA_KERNELS=" << kernels;
                }
    }
}

// DGC through top-k's kernels: the same payloads, residuals and momenta, step after step,
// as through torch.topk. Each step k entries stand far above the rest, so that which
// ones are chosen is never a matter of equal magnitudes.
TEST(CudaKernels, DgcStepsEqualTheATenOperations) {
    namespace c = acc::compress;
    if (!c::device::cuda_kernels_for(torch::zeros({1}, torch::TensorOptions().device(kGpu))))
        GTEST_SKIP() << "built without ACC_CUDA_KERNELS or for another GPU, or ACC_CUDA_KERNELS=0";
    const std::int64_t n = 1000003;
    const c::Spec spec = c::parse_spec("dgc:0.01");
    auto aten = c::make_device_codec(spec, {n}, c::CodecOptions());
    auto kernels = c::make_device_codec(spec, {n}, c::CodecOptions());
    const std::int64_t k = aten->host().buffer_bytes() / 8;
    const auto on_gpu = torch::TensorOptions().device(kGpu);
    torch::Tensor memory_aten = torch::zeros({n}, on_gpu), memory_kernels = memory_aten.clone();
    for (int step = 0; step < 3; ++step) {
        const std::string what = "step " + std::to_string(step);
        torch::Tensor g = torch::randn({n}) * 0.1;
        torch::Tensor large = torch::randperm(n).narrow(0, 0, k);
        g.index_put_({large}, (torch::rand({k}) + 1000.0) * (torch::randint(0, 2, {k}) * 2 - 1));
        g = g.to(kGpu);
        torch::Tensor payload_aten = torch::empty({2 * 4 * k}, on_gpu.dtype(torch::kUInt8));
        torch::Tensor payload_kernels = torch::empty_like(payload_aten);
        {
            KernelsWanted wanted("1");
            aten->compensate(g, memory_aten, step == 0);
            ASSERT_TRUE(aten->encode(memory_aten, true, 1, payload_aten).item<bool>()) << what;
        }
        {
            KernelsWanted wanted("all");
            kernels->compensate(g, memory_kernels, step == 0);
            ASSERT_TRUE(kernels->encode(memory_kernels, true, 1, payload_kernels).item<bool>()) << what;
        }
        EXPECT_TRUE(torch::equal(payload_aten.cpu(), payload_kernels.cpu())) << what;
        EXPECT_TRUE(torch::equal(memory_aten.cpu(), memory_kernels.cpu())) << what;
        EXPECT_TRUE(torch::equal(aten->state().at(0).second->cpu(), kernels->state().at(0).second->cpu())) << what;
    }
}

int main(int argc, char** argv) {
    if (!torch::cuda::is_available()) {
        std::cout << "SKIPPED: no CUDA device available to this build of LibTorch; these tests run on a GPU machine\n";
        return 77;
    }
    testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
