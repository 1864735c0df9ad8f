// What the toolkit's kernel headers (elementwise.cuh, powersgd.cuh) share.
#pragma once

#include <cstdint>

namespace acc::compress::cuda {

constexpr unsigned kAllLanes = 0xffffffffu;  // a warp intrinsic's mask: every lane takes part

/// Blocks enough for `items` at `per_block` a block.
inline unsigned blocks_for(std::int64_t items, std::int64_t per_block) {
    return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace acc::compress::cuda
