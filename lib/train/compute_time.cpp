#include "train/compute_time.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

namespace acc::train {

ComputeInput default_compute_input(const std::string& model) { return model_info(model).input; }

ComputeTimes time_compute(const ComputeTimingConfig& c, const std::function<void()>& before_step) {
    if (c.batch_size < 1) throw UsageError("--batch-size: must be at least 1");
    if (c.warmup < 0 || c.steps < 1) throw UsageError("compute timing: needs at least one timed step");
    ComputeInput in = default_compute_input(c.model);
    const bool text = model_info(c.model).text;
    if (!text && c.classes > 0) {
        in.shape = c.input_shape;
        in.classes = c.classes;
    }
    const torch::Device device =
        c.device == Device::cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(c.device_index)) : torch::kCPU;
    seed_generators(c.seed, device);
    auto model = make_model(c.model, DataShape{text ? std::vector<std::int64_t>{} : in.shape, in.classes}, c.model_options);
    model->to(device);
    model->train();

    // Random data of the dataset's shape: the time of a step does not depend on the values.
    const auto on = torch::TensorOptions().device(device);
    torch::Tensor input, target;
    if (text) {
        input = torch::randint(in.classes, {in.shape[0], c.batch_size}, on.dtype(torch::kInt64));
        target = torch::randint(in.classes, {in.shape[0] * c.batch_size}, on.dtype(torch::kInt64));
    } else {
        std::vector<std::int64_t> dims = {c.batch_size};
        dims.insert(dims.end(), in.shape.begin(), in.shape.end());
        input = torch::randn(dims, on);
        target = torch::randint(in.classes, {c.batch_size}, on.dtype(torch::kInt64));
    }
    // A GPU runs asynchronously: wait for it before reading the clock.
    auto sync = [&] {
        if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };

    ComputeTimes times;
    for (int step = 0; step < c.warmup + c.steps; ++step) {
        model->zero_grad();
        if (before_step) before_step();
        sync();
        const auto start = SteadyClock::now();
        torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(input), target);
        sync();
        const double forward = seconds_since(start);
        const auto backward_start = SteadyClock::now();
        loss.backward();
        sync();
        const double backward = seconds_since(backward_start);
        if (step < c.warmup) continue;
        times.forward.push_back(forward);
        times.backward.push_back(backward);
    }
    return times;
}

}  // namespace acc::train
