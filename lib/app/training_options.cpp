#include "app/training_options.hpp"

#include "base/text.hpp"
#include "cli/tool.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>

namespace acc::app {
namespace {

// Bounds of the training options: far beyond any real run, but small enough
// that a typo cannot ask for petabytes of weights or a run that never ends.
constexpr long long kMaxSamples = 1'000'000'000'000;
constexpr long long kMaxWidth = 16384;
constexpr long long kMaxEpochs = 1'000'000;
constexpr long long kMaxBatch = 1 << 20;
// Learning rates and norms go to LibTorch as floats; 1e30 keeps them finite.
constexpr double kMaxRate = 1e30;

}  // namespace

void add_training_settings(Settings& s, const train::TrainConfig& c, bool batch_size_resumes) {
    std::vector<std::string> decay;
    for (auto e : c.schedule.decay_epochs) decay.push_back(std::to_string(e));
    s.add("--model", c.model, true, true);
    s.add("--dataset", c.data.name, true, true);
    s.add("--data-dir", c.data.dir, true, false);
    s.add("--train-samples", std::to_string(c.data.train_samples), true, true);
    s.add("--test-samples", std::to_string(c.data.test_samples), true, true);
    s.add("--bptt", std::to_string(c.data.bptt), true, true);
    s.add("--hidden-size", std::to_string(c.model_options.hidden_size), true, true);
    s.add("--embedding-size", std::to_string(c.model_options.embedding_size), true, true);
    s.add("--tied", setting_flag(c.model_options.tied), true, true);
    s.add("--dropout", setting_number(c.model_options.dropout), true, true);
    s.add("--epochs", std::to_string(c.epochs), true, false);
    s.add("--batch-size", std::to_string(c.batch_size), true, batch_size_resumes);
    s.add("--micro-batch-size", std::to_string(c.micro_batch_size), true, true);
    s.add("--lr", setting_number(c.schedule.lr), true, true);
    s.add("--warmup-epochs", std::to_string(c.schedule.warmup_epochs), true, true);
    s.add("--warmup-lr", setting_number(c.schedule.warmup_lr), true, true);
    s.add("--lr-decay-epochs", decay.empty() ? "none" : join(decay, ","), true, true);
    s.add("--lr-decay-factor", setting_number(c.schedule.decay_factor), true, true);
    s.add("--momentum", setting_number(c.optimizer.momentum), true, true);
    s.add("--nesterov", setting_flag(c.optimizer.nesterov), true, true);
    s.add("--weight-decay", setting_number(c.optimizer.weight_decay), true, true);
    s.add("--clip-norm", setting_number(c.clip_norm), true, true);
    s.add("--eval-every", std::to_string(c.eval_every), true, false);
    s.add("--seed", std::to_string(c.seed), true, true);
    s.add("--device", device_name(c.device), true, true);
}

std::string checkpoint_beside(const std::string& output) {
    const std::string suffix = ".h5";
    if (output.size() > suffix.size() && output.compare(output.size() - suffix.size(), suffix.size(), suffix) == 0)
        return output.substr(0, output.size() - suffix.size()) + ".ckpt.h5";
    return output + ".ckpt.h5";
}

CLI::Option* add_device_option(CLI::App& app, Device& device, const std::string& help) {
    return app
        .add_option_function<std::string>(
            "--device", [&device](const std::string& name) { device = parse_device(name); }, help)
        ->check(CLI::IsMember(device_names()))
        ->default_str(device_name(device));
}

namespace {

// --model, --dataset and the sizes of both.
void add_model_and_data_options(CLI::App& app, train::TrainConfig& c) {
    const std::string model_group = "Model and data";
    app.add_option("--model", c.model, "Model to train")
        ->required()
        ->check(CLI::IsMember(train::model_names()))
        ->group(model_group);
    app.add_option("--dataset", c.data.name, "Dataset to train on")
        ->check(CLI::IsMember(train::dataset_names()))
        ->group(model_group);
    app.add_option("--data-dir", c.data.dir,
                   "Directory of the dataset's files [fashion-mnist: /usr/share/datasets/fashion-mnist]")
        ->group(model_group);
    app.add_option("--train-samples", c.data.train_samples,
                   "Use only the first N training samples (tokens for text); 0: all")
        ->check(cli::whole_number(0, kMaxSamples))
        ->group(model_group);
    app.add_option("--test-samples", c.data.test_samples, "Use only the first N test samples (tokens for text); 0: all")
        ->check(cli::whole_number(0, kMaxSamples))
        ->group(model_group);
    app.add_option("--bptt", c.data.bptt, "Text: tokens per training sequence")
        ->check(cli::whole_number(1, 100000))
        ->group(model_group);
    app.add_option("--hidden-size", c.model_options.hidden_size,
                   "mlp: width of the hidden layers [256]; lstm: hidden units [650]; 0: default")
        ->check(cli::whole_number(0, kMaxWidth))
        ->group(model_group);
    app.add_option("--embedding-size", c.model_options.embedding_size, "lstm: word embedding size [650]; 0: default")
        ->check(cli::whole_number(0, kMaxWidth))
        ->group(model_group);
    app.add_flag("--tied", c.model_options.tied, "lstm: the decoder shares the embedding's weights")
        ->group(model_group);
    app.add_option("--dropout", c.model_options.dropout, "lstm: dropout probability")
        ->check(cli::number(0, 0.99))
        ->group(model_group);
}

// The run: epochs, batches, the optimizer and its schedule, seed and device.
void add_run_options(CLI::App& app, train::TrainConfig& c) {
    const std::string train_group = "Training";
    app.add_option("--epochs", c.epochs, "Epochs to train")
        ->default_str("")
        ->required()
        ->check(cli::whole_number(1, kMaxEpochs))
        ->group(train_group);
    app.add_option("--batch-size", c.batch_size, "Samples per step (text: parallel streams)")
        ->check(cli::whole_number(1, kMaxBatch))
        ->group(train_group);
    app.add_option("--micro-batch-size", c.micro_batch_size,
                   "Process each batch this many samples at a time, accumulating gradients; 0: whole batch")
        ->check(cli::whole_number(0, kMaxBatch))
        ->group(train_group);
    app.add_option("--lr", c.schedule.lr, "Learning rate after warm-up")
        ->check(cli::number(0, kMaxRate))
        ->group(train_group);
    app.add_option("--warmup-epochs", c.schedule.warmup_epochs,
                   "Ramp the learning rate linearly over the first N epochs")
        ->check(cli::whole_number(0, kMaxEpochs))
        ->group(train_group);
    app.add_option("--warmup-lr", c.schedule.warmup_lr, "Learning rate of epoch 0 when warming up [LR/10]")
        ->check(cli::number(0, kMaxRate))
        ->default_str("")
        ->group(train_group);
    cli::add_whole_number_list(app, "--lr-decay-epochs", c.schedule.decay_epochs, 1, kMaxEpochs,
                               "Divide the learning rate by the decay factor from each of these epochs on (e.g. 150,250)")
        ->type_name("LIST")
        ->group(train_group);
    app.add_option("--lr-decay-factor", c.schedule.decay_factor, "Divisor of each learning-rate decay")
        ->check(cli::number(1, 1e12))
        ->group(train_group);
    app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")
        ->check(cli::number(0, 0.999999))
        ->group(train_group);
    app.add_flag("--nesterov", c.optimizer.nesterov, "Nesterov momentum")->group(train_group);
    app.add_option("--weight-decay", c.optimizer.weight_decay, "L2 penalty")
        ->check(cli::number(0, 1e6))
        ->group(train_group);
    app.add_option("--clip-norm", c.clip_norm, "Clip the gradient to this total L2 norm; 0: no clipping")
        ->check(cli::number(0, kMaxRate))
        ->group(train_group);
    app.add_option("--eval-every", c.eval_every,
                   "Evaluate on the test split every N epochs and after the last; 0: never")
        ->check(cli::whole_number(0, kMaxEpochs))
        ->group(train_group);
    app.add_option("--seed", c.seed, "Random seed: the same seed gives the same run")
        ->check(cli::whole_number(0, std::numeric_limits<std::int64_t>::max()))
        ->group(train_group);
    app.add_option("--threads", c.threads, "CPU threads; 0: LibTorch's default")
        ->check(cli::whole_number(0, cli::kMaxThreads))
        ->group(train_group);
    add_device_option(app, c.device, "Where to train: cpu, or cuda with a CUDA build of LibTorch")->group(train_group);
    app.add_option("--trace", c.trace,
                   "Trace steps 10 to 19 of the first epoch trained (rank 0; Chrome trace JSON, for "
                   "chrome://tracing or ui.perfetto.dev): the host's ATen operations and, on a GPU, each kernel, "
                   "copy and memset with its device time. That epoch's time includes the profiler's")
        ->type_name("TRACE.json")
        ->group(train_group);
}

}  // namespace

void add_train_options(CLI::App& app, train::TrainConfig& c) {
    add_model_and_data_options(app, c);
    add_run_options(app, c);
}

}  // namespace acc::app
