// PowerSGD's state per tensor in the gradient exchange, declared with PowerSGD's own:
// the warm-start Q that the next step's first round multiplies by. Its rounds, and the
// loading of a saved Q, are gradient_exchange_powersgd.cpp (and the device path's
// batched rounds gradient_exchange_device.cpp); its options are
// compress/compressors/powersgd_options.hpp.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace acc::exchange {

struct PowerSgdState {
    std::vector<float> q;  ///< host path: Q, cols x rank, row-major
    at::Tensor device_q;   ///< device path: Q, cols x rank (a view of its group's batch)
    bool fresh = true;     ///< no Q to warm-start from: the next step draws one
    /// LevelChange::within_family: Q's columns beyond the current rank (CPU, cols x k),
    /// kept for a higher rank later.
    at::Tensor spare;

    /// Forgets Q: the next step draws one.
    void clear() {
        q.clear();
        device_q = at::Tensor();
        fresh = true;
        spare = at::Tensor();
    }
};

}  // namespace acc::exchange
