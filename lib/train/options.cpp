// The training options every training program shares, and their checks.
#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/tool.hpp"
#include "train/config.hpp"

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>

namespace acc::train {
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

const std::vector<std::string>& model_names() {
    static const std::vector<std::string> names = {"mlp", "cnn", "resnet18", "vgg19_bn", "lstm"};
    return names;
}

const std::vector<std::string>& dataset_names() {
    static const std::vector<std::string> names = {"fashion-mnist", "mnist",     "cifar10",
                                                   "cifar100",      "wikitext2", "synthetic"};
    return names;
}

void add_train_options(CLI::App& app, TrainConfig& c) {
    const std::string model_group = "Model and data";
    app.add_option("--model", c.model, "Model to train")
        ->required()
        ->check(CLI::IsMember(model_names()))
        ->group(model_group);
    app.add_option("--dataset", c.data.name, "Dataset to train on")
        ->check(CLI::IsMember(dataset_names()))
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
    app.add_option("--lr-decay-epochs", c.schedule.decay_epochs,
                   "Divide the learning rate by the decay factor from each of these epochs on (e.g. 150,250)")
        ->delimiter(',')
        ->check(cli::whole_number(1, kMaxEpochs))
        ->default_str("")
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
    app.add_option("--device", c.device, "Where to train: cpu, or cuda with a CUDA build of LibTorch")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->group(train_group);
}

bool evaluates_after(const TrainConfig& c, std::int64_t epoch) {
    return c.eval_every > 0 && ((epoch + 1) % c.eval_every == 0 || epoch + 1 == c.epochs);
}

void validate(const TrainConfig& c) {
    auto names_contain = [](const std::vector<std::string>& names, const std::string& name) {
        return std::find(names.begin(), names.end(), name) != names.end();
    };
    if (!names_contain(model_names(), c.model))
        throw UsageError("--model: unknown model '" + c.model + "' (known: " + join(model_names(), ", ") + ")");
    if (!names_contain(dataset_names(), c.data.name))
        throw UsageError("--dataset: unknown dataset '" + c.data.name + "' (known: " + join(dataset_names(), ", ") +
                         ")");
    if (c.epochs < 1) throw UsageError("--epochs: must be at least 1");
    if (c.batch_size < 1) throw UsageError("--batch-size: must be at least 1");
    if (c.micro_batch_size < 0 || c.micro_batch_size > c.batch_size)
        throw UsageError("--micro-batch-size: must be between 0 and --batch-size (" + std::to_string(c.batch_size) +
                         ")");
    if (c.micro_batch_size > 0 && c.micro_batch_size < c.batch_size && c.model == "lstm")
        throw UsageError(
            "--micro-batch-size: the language model keeps one hidden state per stream and cannot split "
            "its batch; use a smaller --batch-size");
    if (c.data.train_samples < 0 || c.data.test_samples < 0)
        throw UsageError("--train-samples, --test-samples: must be >= 0");
    if (c.data.bptt < 1) throw UsageError("--bptt: must be at least 1");
    c.schedule.validate();
    if (!(c.optimizer.momentum >= 0 && c.optimizer.momentum < 1)) throw UsageError("--momentum: must be in [0, 1)");
    if (c.optimizer.nesterov && c.optimizer.momentum == 0)
        throw UsageError("--nesterov: needs a --momentum greater than 0");
    if (!(c.optimizer.weight_decay >= 0) || !std::isfinite(c.optimizer.weight_decay))
        throw UsageError("--weight-decay: must be a finite number >= 0");
    if (!(c.clip_norm >= 0) || !std::isfinite(c.clip_norm))
        throw UsageError("--clip-norm: must be a finite number >= 0");
    if (c.eval_every < 0) throw UsageError("--eval-every: must be >= 0");
    if (c.threads < 0) throw UsageError("--threads: must be >= 0");
    if (c.device != "cpu" && c.device != "cuda")
        throw UsageError("--device: must be cpu or cuda, not '" + c.device + "'");
    const bool text_model = c.model == "lstm", text_data = c.data.name == "wikitext2";
    if (text_model != text_data)
        throw UsageError("--model " + c.model + " cannot train on --dataset " + c.data.name + ": " +
                         (text_model ? "the language model needs a text dataset (wikitext2)"
                                     : "this model needs an image dataset, not text"));
    const auto& m = c.model_options;
    if (m.tied && c.model != "lstm") throw UsageError("--tied: applies only to --model lstm");
    if (m.embedding_size > 0 && c.model != "lstm") throw UsageError("--embedding-size: applies only to --model lstm");
    if (m.hidden_size > 0 && c.model != "lstm" && c.model != "mlp")
        throw UsageError("--hidden-size: applies only to --model mlp and lstm");
    if (m.dropout > 0 && c.model != "lstm") throw UsageError("--dropout: applies only to --model lstm");
    if (!(m.dropout >= 0 && m.dropout < 1)) throw UsageError("--dropout: must be in [0, 1)");
}

namespace {

std::string number_text(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.12g", value);
    return text;
}

}  // namespace

std::string resume_settings(const TrainConfig& c) {
    std::vector<std::string> decay;
    for (auto e : c.schedule.decay_epochs) decay.push_back(std::to_string(e));
    const std::vector<std::pair<std::string, std::string>> settings = {
        {"--model", c.model},
        {"--dataset", c.data.name},
        {"--train-samples", std::to_string(c.data.train_samples)},
        {"--test-samples", std::to_string(c.data.test_samples)},
        {"--bptt", std::to_string(c.data.bptt)},
        {"--hidden-size", std::to_string(c.model_options.hidden_size)},
        {"--embedding-size", std::to_string(c.model_options.embedding_size)},
        {"--tied", c.model_options.tied ? "on" : "off"},
        {"--dropout", number_text(c.model_options.dropout)},
        {"--batch-size", std::to_string(c.batch_size)},
        {"--micro-batch-size", std::to_string(c.micro_batch_size)},
        {"--lr", number_text(c.schedule.lr)},
        {"--warmup-epochs", std::to_string(c.schedule.warmup_epochs)},
        {"--warmup-lr", number_text(c.schedule.warmup_lr)},
        {"--lr-decay-epochs", decay.empty() ? "none" : join(decay, ",")},
        {"--lr-decay-factor", number_text(c.schedule.decay_factor)},
        {"--momentum", number_text(c.optimizer.momentum)},
        {"--nesterov", c.optimizer.nesterov ? "on" : "off"},
        {"--weight-decay", number_text(c.optimizer.weight_decay)},
        {"--clip-norm", number_text(c.clip_norm)},
        {"--seed", std::to_string(c.seed)},
        {"--device", c.device},
    };
    std::string text;
    for (const auto& [option, value] : settings) text += option + " " + value + "\n";
    return text;
}

std::vector<std::string> changed_settings(const std::string& then, const std::string& now) {
    auto lines = [](const std::string& text) {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& line : split(text, '\n')) {
            const auto space = line.find(' ');
            if (space != std::string::npos) out.emplace_back(line.substr(0, space), line.substr(space + 1));
        }
        return out;
    };
    const auto recorded = lines(then);
    std::vector<std::string> changed;
    for (const auto& [option, value] : lines(now))
        for (const auto& [old_option, old_value] : recorded)
            if (old_option == option && old_value != value) changed.push_back(option + " " + old_value + ", not " + value);
    return changed;
}

}  // namespace acc::train
