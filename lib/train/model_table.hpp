// The models the toolkit trains, in one table without LibTorch: their names, the
// data they take and the options that apply to them. --model's choices, the
// checks of a training config, comm-profile's --model and the timed input all
// read it; lib/train/models.cpp holds each model's module and factory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc::train {

/// The data a model is timed on: the shape of the dataset it is meant for.
struct ComputeInput {
    std::vector<std::int64_t> shape;  ///< per sample, {channels, height, width}; the language model: {bptt}
    std::int64_t classes = 0;         ///< classes, or the vocabulary size
    std::string source;               ///< the dataset whose shape this is, e.g. "CIFAR-10"
};

struct ModelInfo {
    std::string name;             ///< as --model spells it
    bool text = false;            ///< a language model: trains on token streams (wikitext2), one state per stream
    bool hidden_size = false;     ///< --hidden-size applies
    std::string default_dataset;  ///< the dataset it is meant for, as --dataset spells it
    ComputeInput input;           ///< that dataset's shape, for timing the model without its data
};

/// Every model, in --help order.
const std::vector<ModelInfo>& model_table();

/// The model named `name`; acc::UsageError naming --model and the known models otherwise.
const ModelInfo& model_info(const std::string& name);

/// Names accepted by --model, from model_table().
const std::vector<std::string>& model_names();

}  // namespace acc::train
