// PowerSGD's rounds over all matrices of a step by the toolkit's CUDA kernels
// (compress/cuda/powersgd.cuh): one launch per round, where the batched ATen path takes
// a product per shape and a dozen operations per orthogonalization. The exchange's
// device path uses it where device::cuda_unmeasured_kernels_for says so (ACC_CUDA_KERNELS=all
// until they are measured on a GPU).
#pragma once

#include "compress/cuda/powersgd_layout.hpp"

#include <ATen/ATen.h>

namespace acc::compress::device {

class LowRankKernels {
public:
    /// The highest rank the kernels take; matrices of higher rank take the ATen path.
    static constexpr int max_rank = cuda::powersgd::kMaxRank;

    /// Whether this build has the kernels (ACC_CUDA_KERNELS at build time).
    static bool available();

    /// The layout's table, copied to `device` once. Needs a build with the kernels.
    LowRankKernels(cuda::powersgd::Layout layout, const at::Device& device);

    // The buffers are flat float32 tensors on the device, laid out as the table says; M
    // holds every matrix back to back, as `approx` does.
    /// P = M Q.
    void project_rows(const at::Tensor& m, const at::Tensor& q, at::Tensor& p) const;
    /// Gram-Schmidt on every matrix of P (columns false) or of Q (columns true), in place.
    void orthogonalize(at::Tensor& buffer, bool columns, float epsilon) const;
    /// Q = M^T P.
    void project_columns(const at::Tensor& m, const at::Tensor& p, at::Tensor& q) const;
    /// approx = P Q^T, and memory -= approx where memory is given.
    void expand(const at::Tensor& p, const at::Tensor& q, at::Tensor* memory, at::Tensor& approx) const;

private:
    cuda::powersgd::Layout layout_;
    at::Tensor table_;  // layout_.matrices in device memory
};

}  // namespace acc::compress::device
