// The models, as LibTorch modules whose parameters carry PyTorch's dotted names
// in PyTorch's order ("layer1.0.conv1.weight"), so that files line up with what
// PyTorch users see.
#pragma once

#include "io/parameters.hpp"
#include "train/config.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace acc::train {

/// What a model needs to know about its data.
struct DataShape {
    std::vector<std::int64_t> input;  ///< per sample: {channels, height, width}; empty for text (token ids)
    std::int64_t classes = 0;         ///< classes, or the vocabulary size for text
};

/// A model: maps a batch to logits of shape (samples, classes). For the
/// language model a batch is (sequence, streams) token ids and a "sample" is
/// one predicted token.
class Model : public torch::nn::Module {
public:
    virtual torch::Tensor forward(const torch::Tensor& input) = 0;
    /// Forgets what carries over from one batch to the next (the language
    /// model's hidden state); called at the start of every epoch and evaluation.
    virtual void reset_state() {}
};

/// Builds model `name` (see model_names()) for data of `shape`. Throws
/// UsageError when the model cannot take that data.
std::shared_ptr<Model> make_model(const std::string& name, const DataShape& shape, const ModelOptions& options);

/// The trainable parameters in model order, with their names and shapes.
std::vector<io::Parameter> describe_parameters(const torch::nn::Module& model);

}  // namespace acc::train
