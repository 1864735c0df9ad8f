// Top-k's options (the `topk` level, and DGC's selection). No LibTorch here.
#pragma once

namespace acc::compress {

/// How topk chooses its entries.
enum class TopkSelection {
    exact,    ///< the k largest magnitudes (a sampled threshold only speeds up the search)
    sampled,  ///< DGC's sampled threshold: between 0.8 k and k entries, the rest padded
};

struct TopkOptions {
    TopkSelection selection = TopkSelection::exact;
};

}  // namespace acc::compress
