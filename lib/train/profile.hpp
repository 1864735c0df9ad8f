// The compressibility profile of one parameter's summed gradient (grad-dump
// --profile's /profile, train-dist --auto's error model): its norm, its spectrum
// in PowerSGD's matrix view and its Top-k tails.
#pragma once

#include "io/parameters.hpp"
#include "plan/auto_plan.hpp"

#include <torch/torch.h>

namespace acc::train {

/// From `sum` (any device and float type), taken as float32 first so that a stored
/// float32 snapshot reproduces it: the L2 norm, the singular values (in double
/// precision, matrices only) and regime::topk_tail_fractions. Throws acc::Error,
/// naming the entry, for NaN or infinity.
plan::LayerProfile layer_profile(const torch::Tensor& sum, const io::Parameter& parameter);

}  // namespace acc::train
