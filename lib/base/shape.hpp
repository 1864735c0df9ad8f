// Tensor shapes as plain dimension lists (no LibTorch), as files and shape tables hold them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc {

/// Number of elements of a tensor of this shape (1 for a scalar, whose shape is empty).
inline std::int64_t shape_numel(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

/// A model's parameter tensor as files, shape tables and the gradient exchange describe
/// it. One type for all of them (io::Parameter and compress::TensorInfo name it), so
/// that a tensor list read from a file goes to the exchange without conversion.
struct Parameter {
    std::string name;                 ///< PyTorch's dotted name, e.g. "layer1.0.conv1.weight"
    std::vector<std::int64_t> shape;  ///< empty for a scalar
    std::int64_t numel() const { return shape_numel(shape); }
    /// PowerSGD and the Accordion reference compress only tensors with two or more dimensions.
    bool is_matrix() const { return shape.size() > 1; }
};

}  // namespace acc
