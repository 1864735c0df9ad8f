// Forward and backward time of one training step of a model, for the
// performance model (comm-profile --model). No LibTorch in this header.
#pragma once

#include "base/device.hpp"
#include "train/config.hpp"
#include "train/model_table.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace acc::train {

/// The model table's input of `model` (e.g. cnn: Fashion-MNIST, 1x28x28, 10 classes;
/// lstm: WikiText-2, 33,278 words, sequences of 35 tokens). Throws UsageError for an
/// unknown model.
ComputeInput default_compute_input(const std::string& model);

struct ComputeTimingConfig {
    std::string model;
    std::int64_t batch_size = 128;  ///< samples per step (streams for the language model)
    int warmup = 5;                 ///< untimed steps first
    int steps = 20;                 ///< timed steps
    Device device = Device::cpu;
    int device_index = 0;           ///< the GPU, with Device::cuda
    std::uint64_t seed = 42;        ///< initial weights and random data
    ModelOptions model_options;     ///< the model's sizes (--hidden-size, ...); default: the model's own
    /// An image model's input per sample ({channels, height, width}) and classes, as the
    /// run's dataset has them; classes 0: default_compute_input()'s.
    std::vector<std::int64_t> input_shape;
    std::int64_t classes = 0;
};

/// Seconds per timed step.
struct ComputeTimes {
    std::vector<double> forward;   ///< forward pass and loss
    std::vector<double> backward;  ///< backward pass (gradients of every parameter)
};

/// Builds the model with its default sizes for default_compute_input(), and
/// times training steps on random data of that shape: `warmup` untimed, then
/// `steps` timed, each split into forward (and the cross-entropy loss) and
/// backward. `before_step`, if given, runs before each step outside the timing
/// (e.g. a barrier, so that ranks time their steps together). Uses the threads
/// LibTorch is set to.
ComputeTimes time_compute(const ComputeTimingConfig& config, const std::function<void()>& before_step = {});

}  // namespace acc::train
