// Collectives for host tensors on a process group whose backend needs device
// tensors (NCCL): each call copies its host tensors to the device and the
// results back. The compressors encode in host memory; this lets their
// exchange run over NCCL too. Tensors already on the device pass through.
#pragma once

#include "comm/collectives.hpp"

#include <memory>

namespace acc::exchange {

/// Wraps `inner`, whose collectives take tensors on `device`.
std::unique_ptr<comm::Collectives> staged_collectives(comm::Collectives& inner, at::Device device);

}  // namespace acc::exchange
