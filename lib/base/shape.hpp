// Tensor shapes as plain dimension lists (no LibTorch), as files and shape tables hold them.
#pragma once

#include <cstdint>
#include <vector>

namespace acc {

/// Number of elements of a tensor of this shape (1 for a scalar, whose shape is empty).
inline std::int64_t shape_numel(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

}  // namespace acc
