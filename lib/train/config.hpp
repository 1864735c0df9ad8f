// The settings of a training run, shared by grad-dump and train-dist, and their
// checks. No LibTorch and no command line here (lib/app/training_options.hpp
// adds the options that fill them).
#pragma once

#include "base/device.hpp"
#include "train/lr_schedule.hpp"
#include "train/model_table.hpp"
#include "train/sampling.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::train {

/// Sizes of the models that have any; 0 picks the model's default.
struct ModelOptions {
    std::int64_t hidden_size = 0;     ///< mlp: width of both hidden layers [256]; lstm: hidden units [650]
    std::int64_t embedding_size = 0;  ///< lstm: word embedding size [650]
    bool tied = false;                ///< lstm: the decoder shares the embedding's weights
    double dropout = 0;               ///< lstm: dropout probability after the embedding and the LSTM
};

struct DataConfig {
    std::string name = "fashion-mnist";
    std::string dir;                 ///< empty: the dataset's default directory, if it has one
    std::int64_t train_samples = 0;  ///< > 0: use only the first N training samples (tokens for text)
    std::int64_t test_samples = 0;   ///< > 0: likewise for the test split
    std::int64_t bptt = 35;          ///< text: tokens per sequence (truncated backpropagation through time)
};

struct OptimizerConfig {
    double momentum = 0.9;
    bool nesterov = false;
    double weight_decay = 1e-4;  ///< L2 penalty added to the gradient after the exchange
};

struct TrainConfig {
    std::string model;
    ModelOptions model_options;
    DataConfig data;
    std::int64_t epochs = 0;
    std::int64_t batch_size = 128;      ///< samples per step and rank (text: streams per rank)
    std::int64_t micro_batch_size = 0;  ///< > 0: each step's batch is processed this many samples at a time
    LrSchedule schedule;
    OptimizerConfig optimizer;
    double clip_norm = 0;         ///< > 0: scale the local gradient down to this total L2 norm
    std::int64_t eval_every = 1;  ///< evaluate on the test split every N epochs (and after the last); 0: never
    std::uint64_t seed = 42;
    int threads = 0;             ///< CPU threads for LibTorch; 0: its default
    Device device = Device::cpu;
    /// A trace of a window of steps to write (rank 0; Chrome trace JSON, profile/trace.hpp); empty: none
    std::string trace;
};

/// Names accepted by --dataset (--model's: model_names()).
const std::vector<std::string>& dataset_names();

/// Whether the run evaluates on the test split after `epoch` (counted from 0).
bool evaluates_after(const TrainConfig& config, std::int64_t epoch);

/// Checks ranges and combinations; throws UsageError naming the option.
void validate(const TrainConfig& config);

/// "--lr 0.1, not 0.5" for every option of `now` whose value in `then` differs
/// (both "--option value" per line, as a checkpoint's run/options records them);
/// options missing from `then` are not compared.
std::vector<std::string> changed_settings(const std::string& then, const std::string& now);

}  // namespace acc::train
