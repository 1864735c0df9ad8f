// The process-group backends, without LibTorch: programs pick one while parsing
// options, before anything joins a group.
#pragma once

#include "base/device.hpp"

namespace acc::comm {

enum class Backend { gloo, nccl };

/// "gloo" or "nccl".
inline const char* backend_name(Backend backend) { return backend == Backend::nccl ? "nccl" : "gloo"; }

/// The backend of tensors on `device`: Gloo for host memory, NCCL for GPUs.
inline Backend default_backend(Device device) { return device == Device::cuda ? Backend::nccl : Backend::gloo; }

}  // namespace acc::comm
