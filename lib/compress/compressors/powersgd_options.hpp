// PowerSGD's options (the `powersgd` level): which PowerSGD it runs, its
// orthogonalization and its random state. No LibTorch here.
#pragma once

#include <cstdint>
#include <memory>

namespace acc::compress {

namespace kernels {
class NumpyRandomState;
}

/// Which PowerSGD the `powersgd` level runs.
enum class PowerSgdVariant {
    /// PyTorch's powerSGD_hook: Q drawn from N(0, 1) and orthogonalized, the warm-started Q
    /// orthogonalized again every step, Gram-Schmidt for rank <= 2 and QR above, error
    /// feedback on tensors sent uncompressed too (their error is local minus mean).
    pytorch_hook,
    /// The Accordion reference (epfml's RankKReducer): Q neither orthogonalized when drawn
    /// nor when reused, Gram-Schmidt at every rank, uncompressed tensors without error memory.
    accordion,
};

struct PowerSgdOptions {
    PowerSgdVariant variant = PowerSgdVariant::pytorch_hook;
    /// Added to column norms in the orthogonalization (the hook's orthogonalization_epsilon).
    float orthogonalization_epsilon = 0;
    /// Reuse the last step's Q (warm start); otherwise Q is drawn anew every step.
    bool warm_start = true;
    /// The RandomState Q is drawn from, shared by every exchange made with these options
    /// (one per bucket draws from it in turn, as the hook's one RandomState serves every
    /// bucket); empty: each exchange has its own, seeded with the exchange's seed.
    std::shared_ptr<kernels::NumpyRandomState> rng;
};

}  // namespace acc::compress
