// Measures what recording gradients costs a training step: steps with and
// without the gradient recorder, interleaved in one run (ABBA order, so that
// drift in machine speed hits both sides alike), and the recorder's add alone.
//   bench_grad_record [MODEL] [BATCH] [STEPS] [THREADS]     (resnet18 16 40 1)
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / static_cast<double>(v.size());
}

}  // namespace

int main(int argc, char** argv) {
    using namespace acc::train;
    const std::string model_name = argc > 1 ? argv[1] : "resnet18";
    const std::int64_t batch = argc > 2 ? std::atoll(argv[2]) : 16;
    const std::int64_t steps = argc > 3 ? std::atoll(argv[3]) : 40;
    const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
    const std::int64_t warmup = 2;
    torch::set_num_threads(threads);

    SyntheticOptions data_options;
    data_options.train = batch * (warmup + steps);
    data_options.test = 2;
    auto data = make_synthetic(data_options, 1);
    torch::manual_seed(1);
    auto model = make_model(model_name, data->info().shape, {});
    TrainerOptions options;
    options.batch_size = batch;
    Trainer trainer(model, *data, options);
    GradientRecorder recorder(trainer.parameter_tensors(), false);

    // The step after step k records when (k + 1 - warmup) % 4 is 1 or 2: order A B B A A B B A ...
    auto records = [&](std::int64_t step) { return step >= warmup && (step - warmup) % 4 % 3 != 0; };
    std::vector<double> with, without;
    double last = now();
    trainer.set_recorder(records(0) ? &recorder : nullptr);
    trainer.train_epoch(0, 0.01, [&](const StepInfo& info, double, std::int64_t) {
        const double t = now();
        if (info.step >= warmup) (records(info.step) ? with : without).push_back(t - last);
        trainer.set_recorder(records(info.step + 1) ? &recorder : nullptr);
        last = now();
    });

    // The recorder's add alone, on gradients of the model's shapes.
    std::vector<torch::Tensor> gradients;
    for (const auto& p : trainer.parameter_tensors()) gradients.push_back(torch::randn_like(p));
    std::vector<double> adds;
    for (int i = 0; i < 20; ++i) {
        const double t = now();
        recorder.add(gradients);
        adds.push_back(now() - t);
    }
    std::int64_t values = 0;
    for (const auto& p : trainer.parameter_tensors()) values += p.numel();

    const double a = median(without), b = median(with);
    std::printf("%s, %lld values, batch %lld, %d thread(s), %zu + %zu steps (interleaved ABBA)\n", model_name.c_str(),
                static_cast<long long>(values), static_cast<long long>(batch), threads, without.size(), with.size());
    std::printf("  step without recording: median %.1f ms, mean %.1f ms\n", 1e3 * a, 1e3 * mean(without));
    std::printf("  step with recording:    median %.1f ms, mean %.1f ms\n", 1e3 * b, 1e3 * mean(with));
    std::printf("  ratio with/without: median %.4f, mean %.4f\n", b / a, mean(with) / mean(without));
    std::printf("  recorder add alone: median %.2f ms = %.2f%% of a step without recording\n", 1e3 * median(adds),
                100 * median(adds) / a);
    return 0;
}
