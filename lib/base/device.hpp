// Where tensors live, as --device names it. An enum from the command line on,
// so that a misspelt device cannot reach the code that moves tensors.
#pragma once

#include "base/error.hpp"

#include <string>
#include <vector>

namespace acc {

enum class Device { cpu, cuda };

/// "cpu" or "cuda": --device's spelling, and what files and reports record.
inline const char* device_name(Device device) { return device == Device::cuda ? "cuda" : "cpu"; }

/// --device's choices, in help order.
inline const std::vector<std::string>& device_names() {
    static const std::vector<std::string> names = {"cpu", "cuda"};
    return names;
}

/// The inverse of device_name; acc::UsageError naming --device for any other text.
inline Device parse_device(const std::string& name) {
    if (name == "cpu") return Device::cpu;
    if (name == "cuda") return Device::cuda;
    throw UsageError("--device: must be cpu or cuda, not '" + name + "'");
}

}  // namespace acc
