#include "app/build_info.hpp"

#include "base/error.hpp"
#include "comm/torch_compat.hpp"
#include "compress/device_codec.hpp"

#include <torch/cuda.h>

namespace acc::app {

std::string build_details() {
    std::string line = "LibTorch " + comm::compat::torch_version();
    std::string backends = comm::compat::kHaveGloo ? "gloo" : "";
#ifdef ACC_HAVE_CUDA
    line += " with CUDA";
    backends += std::string(backends.empty() ? "" : ", ") + "nccl " + ACC_NCCL_VERSION_TEXT;
#else
    line += " without CUDA";
#endif
    const std::string kernels = compress::device::cuda_kernels_built();
    return line + "; backends: " + backends + "; CUDA kernels: " + (kernels.empty() ? "none" : kernels);
}

void check_device_available(Device device) {
    if (device == Device::cuda && !torch::cuda::is_available())
        throw UsageError("--device cuda: no CUDA device is available (this LibTorch was built without CUDA, or no "
                         "GPU is visible); use --device cpu");
}

}  // namespace acc::app
