// fp16: half-precision values in their own flat allreduce, each divided by the world
// size first so that the sum stays in range.
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#include <limits>
#include <string>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

bool to_half_portable(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
    std::uint32_t worst = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        float v = x[i] / divisor;
        worst = std::max(worst, magnitude_key(v));
        out[i] = float_to_half(v);
    }
    return worst < 0x477ff000u;  // 65520: rounds to infinity in half precision
}

#if ACC_X86
ACC_SIMD bool to_half_simd(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
    const __m256 d = _mm256_set1_ps(divisor);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i worst = _mm256_setzero_si256();
    std::int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_div_ps(_mm256_loadu_ps(x + i), d);
        __m256 b = _mm256_div_ps(_mm256_loadu_ps(x + i + 8), d);
        worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(a), abs_mask));
        worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(b), abs_mask));
        __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT);
        __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_set_m128i(hb, ha));
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), worst);
    bool ok = *std::max_element(lanes, lanes + 8) < 0x477ff000u;
    return to_half_portable(x + i, n - i, divisor, out + i) && ok;
}

ACC_SIMD void from_half_simd(const std::uint16_t* h, std::int64_t n, float* out) {
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) out[i] = half_to_float(h[i]);
}

#endif

}  // namespace

// ---------------------------------------------------------------- fp16

std::uint16_t float_to_half(float value) {
    std::uint32_t x = bits_of(value);
    const std::uint32_t sign = x & 0x80000000u;
    x ^= sign;
    std::uint32_t out;
    if (x >= 0x47800000u) {  // 65536 and above, infinity and NaN
        out = x > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (x < 0x38800000u) {  // below 2^-14: a subnormal half or zero
        // Adding 0.5 aligns the value's bits so that the float adder rounds to nearest even.
        float shifted = float_of(x) + 0.5f;
        out = bits_of(shifted) - bits_of(0.5f);
    } else {
        std::uint32_t odd = (x >> 13) & 1u;
        x += 0xc8000fffu;  // rebias the exponent (15 - 127) << 23, plus rounding
        x += odd;
        out = x >> 13;
    }
    return static_cast<std::uint16_t>(out | (sign >> 16));
}

float half_to_float(std::uint16_t value) {
    std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
    std::uint32_t exponent = (value >> 10) & 0x1fu;
    std::uint32_t mantissa = value & 0x3ffu;
    if (exponent == 0) {
        float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);  // mantissa * 2^-24
        return float_of(bits_of(magnitude) | sign);
    }
    if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));
    return float_of(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

bool to_half(const float* x, std::int64_t n, float divisor, std::uint16_t* out) {
#if ACC_X86
    if (simd()) return to_half_simd(x, n, divisor, out);
#endif
    return to_half_portable(x, n, divisor, out);
}

void from_half(const std::uint16_t* h, std::int64_t n, float* out) {
#if ACC_X86
    if (simd()) return from_half_simd(h, n, out);
#endif
    for (std::int64_t i = 0; i < n; ++i) out[i] = half_to_float(h[i]);
}

}  // namespace kernels

namespace {
namespace k = kernels;

class Fp16Codec : public TensorCodec {
public:
    Fp16Codec(const Spec& spec, std::int64_t n, int world) : TensorCodec(spec, n), world_(world) {}
    Channel channel() const override { return Channel::fp16_sum; }
    std::int64_t payload_bytes() const override { return 2 * numel_; }
    bool encode_failure_fatal() const override { return true; }
    std::string encode_failure_detail() const override {
        return ", or a value too large for fp16 once divided by the " + std::to_string(world_) + " workers";
    }
    bool encode(float* t, bool, std::uint64_t, std::uint8_t* payload) override {
        return k::to_half(t, numel_, static_cast<float>(world_), reinterpret_cast<std::uint16_t*>(payload));
    }
    void decode_sum(const std::uint8_t* sum, int, float* out, float*) const override {
        k::from_half(reinterpret_cast<const std::uint16_t*>(sum), numel_, out);
    }

private:
    int world_;
};

std::int64_t wire(double, const std::vector<std::int64_t>& shape) { return 2 * shape_numel(shape); }

std::unique_ptr<TensorCodec> make(const Spec& spec, const std::vector<std::int64_t>& shape, const CodecOptions& o) {
    return std::make_unique<Fp16Codec>(spec, shape_numel(shape), o.world);
}

}  // namespace

const CompressorInfo& fp16_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "fp16";
        c.summary = "half-precision allreduce";
        c.collective = Collective::allreduce;
        c.wire_bytes = wire;
        c.make_codec = make;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

#if ACC_CUDA_KERNELS
#include "compress/cuda/encoders.hpp"
#endif

namespace acc::compress {

namespace {

class Fp16DeviceCodec : public DeviceCodec {
public:
    Fp16DeviceCodec(std::unique_ptr<TensorCodec> host, int world) : DeviceCodec(std::move(host)), world_(world) {}
    at::Tensor encode(at::Tensor& t, bool, std::uint64_t, at::Tensor& payload) override {
#if ACC_CUDA_KERNELS
        if (device::cuda_kernels_for(t) && numel() > 0)
            return device::kernel_flag(t, [&](bool* ok, void* stream) {
                cuda::half_quotients(t.data_ptr<float>(), numel(), static_cast<float>(world_),
                                     reinterpret_cast<std::uint16_t*>(payload.data_ptr<at::Half>()), ok, stream);
            });
#endif
        // The divisor on t's device: CUDA would multiply by the reciprocal of a host scalar.
        if (!divisor_.defined() || divisor_.device() != t.device())
            divisor_ = at::scalar_tensor(static_cast<float>(world_), t.options());
        // The float32 quotient, rounded to nearest even as the host's float_to_half, written
        // straight into the payload (on a GPU one pass, without a float32 copy of t).
        at::div_out(payload, t, divisor_);
        // Quotients of 65520 and above became infinity; NaN stays NaN.
        return device::all_finite(payload);
    }
    void decode_sum(const at::Tensor& sum, int, at::Tensor& out, at::Tensor*) override { out.copy_(sum); }

private:
    int world_;
    at::Tensor divisor_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_fp16_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                    const CodecOptions& options) {
    return std::make_unique<Fp16DeviceCodec>(std::move(host), options.world);
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
