// The process-group backends, without LibTorch: programs pick one while parsing
// options, before anything joins a group.
#pragma once

#include "base/choice.hpp"
#include "base/device.hpp"
#include "base/error.hpp"

#include <optional>
#include <string>
#include <vector>

namespace acc::comm {

enum class Backend { gloo, nccl };

/// The backends' names (--backend), in the enum's order.
inline const std::vector<std::string>& backend_names() {
    static const std::vector<std::string> names{"gloo", "nccl"};
    return names;
}

/// "gloo" or "nccl".
inline const char* backend_name(Backend backend) { return choice_name(backend_names(), backend).c_str(); }

/// `text` as a backend; UsageError "--backend: must be gloo or nccl, not 'x'".
inline Backend parse_backend(const std::string& text) { return parse_choice<Backend>(backend_names(), text, "--backend"); }

/// The backend of tensors on `device`: Gloo for host memory, NCCL for GPUs.
inline Backend default_backend(Device device) { return device == Device::cuda ? Backend::nccl : Backend::gloo; }

/// The backend of a run on `device`: `chosen` (a program's --backend) where
/// given, else default_backend(device). Throws UsageError for NCCL without GPUs.
inline Backend run_backend(std::optional<Backend> chosen, Device device) {
    if (chosen == Backend::nccl && device != Device::cuda)
        throw UsageError("--backend nccl: needs --device cuda (NCCL reduces tensors on GPUs)");
    return chosen.value_or(default_backend(device));
}

}  // namespace acc::comm
