#include "app/build_info.hpp"

#include "comm/torch_compat.hpp"
#include "compress/device_codec.hpp"

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

}  // namespace acc::app
