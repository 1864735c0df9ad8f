// The launches of compress/cuda/encoders.hpp: the kernels themselves are in
// elementwise.cuh, powersgd.cuh and topk_select.cuh, which the CPU tests also run.
#include "compress/cuda/encoders.hpp"

#include "base/error.hpp"
#include "compress/cuda/elementwise.cuh"
#include "compress/cuda/powersgd.cuh"
#include "compress/cuda/topk_select.cuh"

#include <cuda_runtime.h>

#include <string>

namespace acc::compress::cuda {
namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw acc::Error(std::string(what) + ": " + cudaGetErrorString(status));
}

// The launchers the kernel headers take, on one stream, naming the kernel in errors.
auto launcher(cudaStream_t s, const char* what) {
    return [s, what](unsigned blocks, int threads, auto kernel, auto... arguments) {
        kernel<<<blocks, threads, 0, s>>>(arguments...);
        check(cudaGetLastError(), what);
    };
}

auto setter(cudaStream_t s, const char* what) {
    return [s, what](bool* flags, std::int64_t count) {
        check(cudaMemsetAsync(flags, 1, static_cast<size_t>(count), s), what);
    };
}

}  // namespace

bool kernels_run_on(int device, int& major, int& minor) {
    constexpr const char* what = "the CUDA kernels' device check";
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), what);
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), what);
    int current = 0;
    check(cudaGetDevice(&current), what);
    if (current != device) check(cudaSetDevice(device), what);
    // Every kernel is in this file's one fat binary: one kernel tells for all. Without an
    // image for the device (or PTX its driver can compile) the query fails, and the error
    // it leaves is not sticky: clear it, so that the next ATen call does not report it.
    cudaFuncAttributes attributes{};
    const cudaError_t status = cudaFuncGetAttributes(&attributes, elementwise::finite_parts_kernel<true>);
    if (status != cudaSuccess) (void)cudaGetLastError();
    if (current != device) check(cudaSetDevice(current), what);
    return status == cudaSuccess;
}

const char* built_architectures() { return ACC_CUDA_ARCHITECTURES_BUILT; }

void sign_bits(const float* x, std::int64_t n, std::uint8_t* packed, bool* ok, void* stream) {
    constexpr const char* what = "signSGD's CUDA kernel";
    auto s = static_cast<cudaStream_t>(stream);
    elementwise::sign_bits(launcher(s, what), setter(s, what), x, n, packed, ok);
}

void half_quotients(const float* x, std::int64_t n, float divisor, std::uint16_t* out, bool* ok, void* stream) {
    constexpr const char* what = "fp16's CUDA kernel";
    auto s = static_cast<cudaStream_t>(stream);
    elementwise::half_quotients(launcher(s, what), setter(s, what), x, n, divisor, out, ok);
}

void qsgd_codes(const float* x, std::int64_t n, int levels, std::uint32_t key32, std::uint8_t* payload, bool* ok,
                void* stream) {
    constexpr const char* what = "QSGD's CUDA kernel";
    auto s = static_cast<cudaStream_t>(stream);
    elementwise::qsgd_codes(launcher(s, what), setter(s, what), x, n, levels, key32, payload, ok);
}

void finite_parts(const float* x, std::int64_t n, const std::int64_t* ends, std::int64_t parts, bool* flags,
                  void* stream) {
    constexpr const char* what = "the finite check's CUDA kernel";
    auto s = static_cast<cudaStream_t>(stream);
    elementwise::finite_parts(launcher(s, what), setter(s, what), x, n, ends, parts, flags);
}

std::int64_t top_k_scratch_bytes(std::int64_t n) { return topk::scratch_bytes(n); }

void top_k(float* x, std::int64_t n, std::int64_t k, bool clear, float* values, std::int32_t* indices, void* scratch,
           bool* ok, void* stream) {
    if (k < 1 || k > n || n > 0x7fffffff)
        throw acc::Error("top-k's CUDA kernels: " + std::to_string(k) + " of " + std::to_string(n) + " values");
    constexpr const char* what = "top-k's CUDA kernels";
    auto s = static_cast<cudaStream_t>(stream);
    topk::select_top_k(
        launcher(s, what),
        [&](void* p, std::int64_t bytes) { check(cudaMemsetAsync(p, 0, static_cast<size_t>(bytes), s), what); },
        [&](bool* flag) { setter(s, what)(flag, 1); }, x, n, k, clear, values, indices, scratch, ok);
}

namespace {
constexpr const char* kPowerSgd = "PowerSGD's CUDA kernels";
}

void powersgd_project_rows(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* m,
                           const float* q, float* p, void* stream) {
    powersgd::project_rows(launcher(static_cast<cudaStream_t>(stream), kPowerSgd), layout, matrices, m, q, p);
}

void powersgd_orthogonalize(const powersgd::Layout& layout, const powersgd::Matrix* matrices, float* buffer,
                            bool columns, float epsilon, void* stream) {
    powersgd::orthogonalize(launcher(static_cast<cudaStream_t>(stream), kPowerSgd), layout, matrices, buffer, columns,
                            epsilon);
}

void powersgd_project_columns(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* m,
                              const float* p, float* q, void* stream) {
    powersgd::project_columns(launcher(static_cast<cudaStream_t>(stream), kPowerSgd), layout, matrices, m, p, q);
}

void powersgd_expand(const powersgd::Layout& layout, const powersgd::Matrix* matrices, const float* p, const float* q,
                     float* memory, float* approx, void* stream) {
    powersgd::expand(launcher(static_cast<cudaStream_t>(stream), kPowerSgd), layout, matrices, p, q, memory, approx);
}

}  // namespace acc::compress::cuda
