// powersgd:RANK: the low-rank approximation P Q^T of a tensor's matrix view, sent as P
// and Q in two allreduces shared by all tensors. The rounds run over all matrices at once
// (they are grouped by shape, as PyTorch's hook does), so the exchange drives them through
// the low_rank channel with the products in compress/kernels.hpp; a tensor PowerSGD would
// not compress goes whole through the fp32 allreduce.
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

#include <limits>

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

// Dot product with eight lanes combined in a fixed order (vectorizes without reassociation).
ACC_INLINE float dot_body(const float* a, const float* b, std::int64_t n) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; ++l) lane[l] += a[j + l] * b[j + l];
    for (; j < n; ++j) lane[j % 8] += a[j] * b[j];
    return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

ACC_INLINE bool project_rows_body(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt,
                                  int r, float* p) {
    bool finite = true;
    for (std::int64_t i = 0; i < rows; ++i) {
        float* row = t + i * cols;
        if (g) finite = add_into_body(row, g + i * cols, cols) && finite;
        for (int c = 0; c < r; ++c) p[i * r + c] = dot_body(row, qt + c * cols, cols);
    }
    return finite;
}

ACC_INLINE void project_columns_body(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r,
                                     float* qt) {
    std::fill(qt, qt + r * cols, 0.0f);
    for (std::int64_t i = 0; i < rows; ++i) {
        const float* row = t + i * cols;
        for (int c = 0; c < r; ++c) {
            const float w = p[i * r + c];
            float* q = qt + c * cols;
            for (std::int64_t j = 0; j < cols; ++j) q[j] += w * row[j];
        }
    }
}

ACC_INLINE void expand_low_rank_body(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r,
                                     float* out, float* memory) {
    for (std::int64_t i = 0; i < rows; ++i) {
        float* o = out + i * cols;
        const float w0 = p[i * r];
        for (std::int64_t j = 0; j < cols; ++j) o[j] = w0 * qt[j];
        for (int c = 1; c < r; ++c) {
            const float w = p[i * r + c];
            const float* q = qt + c * cols;
            for (std::int64_t j = 0; j < cols; ++j) o[j] += w * q[j];
        }
        if (memory) {
            float* m = memory + i * cols;
            for (std::int64_t j = 0; j < cols; ++j) m[j] -= o[j];
        }
    }
}

#if ACC_X86
ACC_SIMD bool project_rows_simd(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt, int r,
                                float* p) {
    return project_rows_body(t, g, rows, cols, qt, r, p);
}
ACC_SIMD void project_columns_simd(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r,
                                   float* qt) {
    project_columns_body(t, rows, cols, p, r, qt);
}
ACC_SIMD void expand_low_rank_simd(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r,
                                   float* out, float* memory) {
    expand_low_rank_body(p, qt, rows, cols, r, out, memory);
}

#endif

}  // namespace

// ---------------------------------------------------------------- PowerSGD's products

bool project_rows(float* t, const float* g, std::int64_t rows, std::int64_t cols, const float* qt, int r, float* p) {
#if ACC_X86
    if (simd()) return project_rows_simd(t, g, rows, cols, qt, r, p);
#endif
    return project_rows_body(t, g, rows, cols, qt, r, p);
}

void project_columns(const float* t, std::int64_t rows, std::int64_t cols, const float* p, int r, float* qt) {
#if ACC_X86
    if (simd()) return project_columns_simd(t, rows, cols, p, r, qt);
#endif
    project_columns_body(t, rows, cols, p, r, qt);
}

void expand_low_rank(const float* p, const float* qt, std::int64_t rows, std::int64_t cols, int r, float* out,
                     float* memory) {
#if ACC_X86
    if (simd()) return expand_low_rank_simd(p, qt, rows, cols, r, out, memory);
#endif
    expand_low_rank_body(p, qt, rows, cols, r, out, memory);
}

void gram_schmidt(float* m, std::int64_t n, int r, float epsilon) {
    for (int i = 0; i < r; ++i) {
        double squares = 0;
        for (std::int64_t row = 0; row < n; ++row) squares += static_cast<double>(m[row * r + i]) * m[row * r + i];
        const float norm = static_cast<float>(std::sqrt(squares));
        // A divisor that is not positive (a zero column, or a NaN in it) divides by
        // infinity: a zero column stays zero and a NaN stays NaN, on every path.
        const float divisor = epsilon > 0 ? norm + epsilon : norm;
        const float d = divisor > 0 ? divisor : std::numeric_limits<float>::infinity();
        for (std::int64_t row = 0; row < n; ++row) m[row * r + i] /= d;
        for (int j = i + 1; j < r; ++j) {
            double dot = 0;
            for (std::int64_t row = 0; row < n; ++row) dot += static_cast<double>(m[row * r + i]) * m[row * r + j];
            const auto d = static_cast<float>(dot);
            for (std::int64_t row = 0; row < n; ++row) m[row * r + j] -= d * m[row * r + i];
        }
    }
}

}  // namespace kernels

namespace {

class LowRankCodec : public TensorCodec {
public:
    LowRankCodec(const Spec& spec, std::int64_t n, LowRank shape) : TensorCodec(spec, n), shape_(shape) {}
    Channel channel() const override { return Channel::low_rank; }
    std::int64_t payload_bytes() const override { return 4 * (shape_.rows + shape_.cols) * shape_.rank; }
    std::int64_t buffer_bytes() const override { return 0; }  // P and Q have buffers of their own
    LowRank low_rank() const override { return shape_; }
    bool error_feedback() const override { return true; }
    // The memory takes the gradient while P is projected, and both rounds encode.
    bool compensate(const float*, float*, bool) override { return true; }
    bool encode(float*, bool, std::uint64_t, std::uint8_t*) override { return true; }

private:
    LowRank shape_;
};

std::int64_t wire(double parameter, const std::vector<std::int64_t>& shape) {
    auto rank = static_cast<std::int64_t>(parameter);
    if (!powersgd_compresses(shape, rank)) return 4 * shape_numel(shape);
    MatrixView m = matrix_view(shape);
    return 4 * (m.rows + m.cols) * std::min({rank, m.rows, m.cols});
}

std::unique_ptr<TensorCodec> make(const Spec& spec, const std::vector<std::int64_t>& shape, const CodecOptions& o) {
    const auto rank = static_cast<std::int64_t>(spec.parameter);
    if (!powersgd_compresses(shape, rank))
        return codec_util::make_dense_codec(spec, shape_numel(shape), o.uncompressed_error_feedback);
    MatrixView m = matrix_view(shape);
    LowRank low{m.rows, m.cols, static_cast<int>(std::min({rank, m.rows, m.cols}))};
    return std::make_unique<LowRankCodec>(spec, shape_numel(shape), low);
}

}  // namespace

const CompressorInfo& powersgd_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "powersgd";
        c.parameter_info = {"RANK", "RANK", true, 1e9, "2", {1, 2, 4}};
        c.summary = "low-rank PowerSGD with error feedback and warm start (RANK >= 1)";
        c.collective = Collective::allreduce;
        c.error_feedback = true;
        c.wire_bytes = wire;
        c.low_rank = true;
        // Gram-Schmidt treats columns in order: a lower rank's factors are the first columns.
        c.gravac_family = true;
        c.make_codec = make;
        c.residual_model = ResidualModel::singular_values;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec, and
// the rounds by the toolkit's CUDA kernels.

#include "base/error.hpp"
#include "compress/low_rank_kernels.hpp"

#if ACC_CUDA_KERNELS
#include "compress/cuda/encoders.hpp"

#include <c10/core/DeviceGuard.h>
#endif

#include <cstring>

namespace acc::compress {

namespace device {

#if !ACC_CUDA_KERNELS
namespace {
[[noreturn]] void not_built() { throw Error("internal error: PowerSGD's CUDA kernels are not in this build"); }
}  // namespace
#endif

bool LowRankKernels::available() {
#if ACC_CUDA_KERNELS
    return true;
#else
    return false;
#endif
}

LowRankKernels::LowRankKernels(cuda::powersgd::Layout layout, const at::Device& device) : layout_(std::move(layout)) {
#if !ACC_CUDA_KERNELS
    (void)device;
    not_built();
#else
    static_assert(sizeof(cuda::powersgd::Matrix) == 8 * sizeof(std::int64_t), "a table entry is eight int64");
    for (const auto& a : layout_.matrices)
        if (a.rank < 1 || a.rank > max_rank)
            throw Error("internal error: PowerSGD's CUDA kernels take ranks 1 to " + std::to_string(max_rank));
    const auto count = static_cast<std::int64_t>(layout_.matrices.size());
    at::Tensor host = at::empty({8 * count}, at::kLong);
    std::memcpy(host.data_ptr<std::int64_t>(), layout_.matrices.data(),
                sizeof(cuda::powersgd::Matrix) * layout_.matrices.size());
    table_ = host.to(device);
#endif
}

#if ACC_CUDA_KERNELS
// Each round makes its buffers' device the current one: kernels launch on the current device.
namespace {
const cuda::powersgd::Matrix* table_of(const at::Tensor& table) {
    return reinterpret_cast<const cuda::powersgd::Matrix*>(table.data_ptr<std::int64_t>());
}
}  // namespace

void LowRankKernels::project_rows(const at::Tensor& m, const at::Tensor& q, at::Tensor& p) const {
    const c10::DeviceGuard guard(m.device());
    cuda::powersgd_project_rows(layout_, table_of(table_), m.data_ptr<float>(), q.data_ptr<float>(),
                                p.data_ptr<float>(), cuda_stream_of(m));
}

void LowRankKernels::orthogonalize(at::Tensor& buffer, bool columns, float epsilon) const {
    const c10::DeviceGuard guard(buffer.device());
    cuda::powersgd_orthogonalize(layout_, table_of(table_), buffer.data_ptr<float>(), columns, epsilon,
                                 cuda_stream_of(buffer));
}

void LowRankKernels::project_columns(const at::Tensor& m, const at::Tensor& p, at::Tensor& q) const {
    const c10::DeviceGuard guard(m.device());
    cuda::powersgd_project_columns(layout_, table_of(table_), m.data_ptr<float>(), p.data_ptr<float>(),
                                   q.data_ptr<float>(), cuda_stream_of(m));
}

void LowRankKernels::expand(const at::Tensor& p, const at::Tensor& q, at::Tensor* memory, at::Tensor& approx) const {
    const c10::DeviceGuard guard(p.device());
    cuda::powersgd_expand(layout_, table_of(table_), p.data_ptr<float>(), q.data_ptr<float>(),
                          memory != nullptr ? memory->data_ptr<float>() : nullptr, approx.data_ptr<float>(),
                          cuda_stream_of(p));
}
#else
// Unreachable: without the kernels the constructor throws.
void LowRankKernels::project_rows(const at::Tensor&, const at::Tensor&, at::Tensor&) const { not_built(); }
void LowRankKernels::orthogonalize(at::Tensor&, bool, float) const { not_built(); }
void LowRankKernels::project_columns(const at::Tensor&, const at::Tensor&, at::Tensor&) const { not_built(); }
void LowRankKernels::expand(const at::Tensor&, const at::Tensor&, at::Tensor*, at::Tensor&) const { not_built(); }
#endif

}  // namespace device

namespace {

// Both rounds run in the exchange over all matrices of one shape together (batched
// products, exchange/gradient_exchange_device.cpp); per tensor there is nothing to do.
class LowRankDeviceCodec : public DeviceCodec {
public:
    explicit LowRankDeviceCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}
    at::Tensor compensate(const at::Tensor&, at::Tensor& memory, bool) override {
        return device::flag(true, memory.device());
    }
    at::Tensor encode(at::Tensor& t, bool, std::uint64_t, at::Tensor&) override { return device::flag(true, t.device()); }
};

}  // namespace

std::unique_ptr<DeviceCodec> make_powersgd_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                        const CodecOptions&) {
    if (host->channel() != Channel::low_rank) return codec_util::make_dense_device_codec(std::move(host));
    return std::make_unique<LowRankDeviceCodec>(std::move(host));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
