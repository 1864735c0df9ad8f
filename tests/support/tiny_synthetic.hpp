// The dataset the tests of training share: synthetic 1x8x8 images in 4 classes,
// small enough that a model learns from it within a unit test.
#pragma once

#include "train/datasets.hpp"

#include <cstdint>
#include <memory>

namespace acc::test {

/// `train_samples` training and `test_samples` test images, 1x8x8 in 4 classes, seed 3.
inline std::unique_ptr<train::Dataset> tiny_synthetic(std::int64_t train_samples = 256,
                                                      std::int64_t test_samples = 128) {
    train::SyntheticOptions o;
    o.shape = {1, 8, 8};
    o.classes = 4;
    o.train = train_samples;
    o.test = test_samples;
    return train::make_synthetic(o, 3);
}

}  // namespace acc::test
