// What a program was built with, for --version: the LibTorch, the communication
// backends and the toolkit's CUDA kernels (what a bug report, or a GPU user asking
// whether the kernels are in, needs to know); and whether --device cuda can run.
#pragma once

#include "base/device.hpp"

#include <string>

namespace acc::app {

/// One line, e.g. "LibTorch 2.11.0 with CUDA; backends: gloo, nccl 2.28.9; CUDA kernels:
/// 75-real,80-real,86-real,90" ("CUDA kernels: none" in a build without them).
std::string build_details();

/// Throws acc::UsageError for --device cuda where LibTorch sees no CUDA device (a
/// build without CUDA, or a machine without a visible GPU).
void check_device_available(Device device);

}  // namespace acc::app
