// Parameter shapes of well-known models (so that compress-bench needs no model
// code), and a small text format for any other model. No LibTorch.
#pragma once

#include "base/shape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::compress {

/// A parameter tensor: acc::Parameter (base/shape.hpp), the type io reads and writes.
using TensorInfo = acc::Parameter;

/// The models with built-in shape tables, as --shapes accepts them.
const std::vector<std::string>& model_presets();

/// The parameters of a preset, in PyTorch's named_parameters() order:
///   resnet18   ResNet-18 for CIFAR-10 (3x3 stem, no max-pool; names as examples/synth_grads.py)
///   resnet50   torchvision's ResNet-50 for ImageNet
///   vgg19      torchvision's VGG-19 (without batch norm) for ImageNet
///   bert-base  Hugging Face's BertModel, bert-base-uncased (with the pooler)
///   lstm       the 3-layer LSTM language model on WikiText-2 of the Accordion paper
///              (650 units, tied embedding and decoder weights)
///   gpt2-medium  Hugging Face's GPT2Model, gpt2-medium: a 355M-parameter transformer
///              (24 blocks of width 1024, tied embedding and head weights)
/// Throws UsageError for an unknown name.
std::vector<TensorInfo> preset_shapes(const std::string& name);

/// Reads a shapes file: one tensor per line, "NAME SHAPE", SHAPE as dimensions joined
/// by 'x' (64x3x3x3) or the word "scalar"; blank lines and lines starting with '#'
/// are skipped. Throws FileError naming the file and line.
std::vector<TensorInfo> read_shapes_file(const std::string& path);

}  // namespace acc::compress
