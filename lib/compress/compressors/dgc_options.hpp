// DGC's options (the `dgc` level): its momentum correction and sparsity warm-up.
// No LibTorch here.
#pragma once

#include <cstdint>

namespace acc::compress {

struct DgcOptions {
    double momentum = 0.9;  ///< the momentum correction factor m
    /// The sparsity warm-up: in epoch e < warmup_epochs a dgc:F level keeps
    /// max(F, F^((e + 1) / (warmup_epochs + 1))) of the entries. 0: no warm-up.
    std::int64_t warmup_epochs = 0;
};

}  // namespace acc::compress
