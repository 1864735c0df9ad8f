// The checks of a training config, and what a checkpoint records of it.
#include "train/config.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>

namespace acc::train {

const std::vector<std::string>& dataset_names() {
    static const std::vector<std::string> names = {"fashion-mnist", "mnist",     "cifar10",
                                                   "cifar100",      "wikitext2", "synthetic"};
    return names;
}

bool evaluates_after(const TrainConfig& c, std::int64_t epoch) {
    return c.eval_every > 0 && ((epoch + 1) % c.eval_every == 0 || epoch + 1 == c.epochs);
}

namespace {

// "mlp and lstm": the models of the table that `applies` picks, for messages.
std::string models_where(bool (*applies)(const ModelInfo&)) {
    std::vector<std::string> names;
    for (const ModelInfo& m : model_table())
        if (applies(m)) names.push_back(m.name);
    return join(names, " and ");
}

// The options that only some models take.
void validate_model_options(const TrainConfig& c, const ModelInfo& model) {
    const auto text = [](const ModelInfo& m) { return m.text; };
    const auto hidden = [](const ModelInfo& m) { return m.hidden_size; };
    const auto& m = c.model_options;
    if (m.tied && !model.text) throw UsageError("--tied: applies only to --model " + models_where(text));
    if (m.embedding_size > 0 && !model.text)
        throw UsageError("--embedding-size: applies only to --model " + models_where(text));
    if (m.hidden_size > 0 && !model.hidden_size)
        throw UsageError("--hidden-size: applies only to --model " + models_where(hidden));
    if (m.dropout > 0 && !model.text) throw UsageError("--dropout: applies only to --model " + models_where(text));
    if (!(m.dropout >= 0 && m.dropout < 1)) throw UsageError("--dropout: must be in [0, 1)");
}

}  // namespace

void validate(const TrainConfig& c) {
    const ModelInfo& model = model_info(c.model);
    const auto& datasets = dataset_names();
    if (std::find(datasets.begin(), datasets.end(), c.data.name) == datasets.end())
        throw UsageError("--dataset: unknown dataset '" + c.data.name + "' (known: " + join(datasets, ", ") + ")");
    if (c.epochs < 1) throw UsageError("--epochs: must be at least 1");
    if (c.batch_size < 1) throw UsageError("--batch-size: must be at least 1");
    if (c.micro_batch_size < 0 || c.micro_batch_size > c.batch_size)
        throw UsageError("--micro-batch-size: must be between 0 and --batch-size (" + std::to_string(c.batch_size) +
                         ")");
    if (c.micro_batch_size > 0 && c.micro_batch_size < c.batch_size && model.text)
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
    const bool text_data = c.data.name == "wikitext2";
    if (model.text != text_data)
        throw UsageError("--model " + c.model + " cannot train on --dataset " + c.data.name + ": " +
                         (model.text ? "the language model needs a text dataset (wikitext2)"
                                     : "this model needs an image dataset, not text"));
    validate_model_options(c, model);
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
