// qsgd:LEVELS: stochastic quantization of each bucket of 128 entries to LEVELS levels of
// its norm, through the allgather.
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

double sum_squares_portable(const float* x, std::int64_t n) {
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (std::int64_t i = 0; i < n; ++i) {
        double v = x[i];
        lane[i % 8] += v * v;
    }
    return combine_lanes(lane);
}

// One bucket through the portable loop, its codes into the payload at any byte (through
// an aligned scratch bucket).
void qsgd_bucket_bytes(const float* x, std::int64_t len, std::int64_t begin, float norm, int levels,
                       std::uint32_t key32, bool wide, std::uint8_t* out) {
    alignas(32) std::int16_t scratch[kQsgdBucket];
    if (wide)
        qsgd_bucket_portable(x, len, begin, norm, levels, key32, scratch);
    else
        qsgd_bucket_portable(x, len, begin, norm, levels, key32, reinterpret_cast<std::int8_t*>(scratch));
    std::memcpy(out, scratch, static_cast<size_t>((wide ? 2 : 1) * len));
}

// QSGD's per-bucket norms (stored into the payload) and scales levels / norm (0 for a
// zero bucket) from the buckets' sums of squares. False on NaN or infinity.
ACC_INLINE bool qsgd_scales(const double* squares, std::int64_t count, int levels, std::uint8_t* norms, float* scales) {
    for (std::int64_t c = 0; c < count; ++c) {
        if (!std::isfinite(squares[c])) return false;
        const auto norm = static_cast<float>(std::sqrt(squares[c]));
        store_f32(norms + 4 * c, norm);
        scales[c] = norm == 0.0f ? 0.0f : static_cast<float>(levels) / norm;
    }
    return true;
}

#if ACC_X86
// Sum of squares of 128 values, in double lanes combined as combine_lanes() does.
ACC_SIMD inline __attribute__((always_inline)) double bucket_squares_simd(const float* x) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int i = 0; i < 128; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        lo = _mm256_add_pd(lo, _mm256_mul_pd(a, a));
        hi = _mm256_add_pd(hi, _mm256_mul_pd(b, b));
    }
    __m256d s = _mm256_add_pd(lo, hi);  // lanes (0+4, 1+5, 2+6, 3+7)
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

// QSGD over the first `buckets` whole buckets; returns false on NaN or infinity.
ACC_SIMD bool qsgd_encode_simd(const float* x, std::int64_t buckets, int levels, std::uint32_t key32,
                               std::uint8_t* norms, std::uint8_t* codes, bool wide) {
    const __m256i top = _mm256_set1_epi32(levels);
    const __m256i golden = _mm256_set1_epi32(static_cast<int>(kGolden));
    // key + golden * index for elements 0..7; advanced eight indices per call.
    __m256i counter = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(key32)),
                                       _mm256_mullo_epi32(golden, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    // Norms a block of buckets ahead, so that the square roots and divisions of one
    // block overlap instead of stalling each bucket (the block stays in L1).
    constexpr std::int64_t kBlock = 8;
    float block_scale[kBlock] = {};
    for (std::int64_t b = 0; b < buckets; ++b) {
        if (b % kBlock == 0) {
            const std::int64_t end = std::min(buckets, b + kBlock);
            double squares[kBlock];
            for (std::int64_t c = b; c < end; ++c) squares[c - b] = bucket_squares_simd(x + c * 128);
            if (!qsgd_scales(squares, end - b, levels, norms + 4 * b, block_scale)) return false;
        }
        const float* xb = x + b * 128;
        const float scale = block_scale[b % kBlock];
        std::uint8_t* cb = codes + (wide ? 2 : 1) * b * 128;
        if (scale == 0.0f || !std::isfinite(scale)) {  // a zero bucket, or levels / norm overflowed
            qsgd_bucket_bytes(xb, 128, b * 128, load_f32(norms + 4 * b), levels, key32, wide, cb);
            counter = _mm256_add_epi32(counter, _mm256_set1_epi32(static_cast<int>(kGolden * 128u)));
            continue;
        }
        const __m256 s = _mm256_set1_ps(scale);
        if (wide) {
            for (int g = 0; g < 128; g += 16) {
                __m256i a = qsgd_codes8(xb + g, s, top, counter);
                __m256i c = qsgd_codes8(xb + g + 8, s, top, counter);
                __m256i ac = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, c), 0xd8);
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb + 2 * g), ac);
            }
        } else {
            codes128_int8(xb, s, top, counter, cb);
        }
    }
    return true;
}

ACC_SIMD void qsgd_add_simd8(const std::int8_t* codes, float factor, bool first, float* out) {
    const __m256 f = _mm256_set1_ps(factor);
    for (int g = 0; g < 128; g += 8) {
        __m128i c8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + g));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c8)), f);
        _mm256_storeu_ps(out + g, first ? v : _mm256_add_ps(_mm256_loadu_ps(out + g), v));
    }
}
#endif

#if ACC_X86
// AVX-512
// GCC 12 warns about the undefined upper halves some AVX-512 intrinsics start from.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

ACC_AVX512 inline __attribute__((always_inline)) double bucket_squares_avx512(const float* x) {
    // Eight double lanes: lane j gets elements j, j + 8, j + 16, ... in order, as in the portable loop.
    __m512d acc = _mm512_setzero_pd();
    for (int i = 0; i < 128; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d b = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(a, a));
        acc = _mm512_add_pd(acc, _mm512_mul_pd(b, b));
    }
    __m256d s = _mm256_add_pd(_mm512_castpd512_pd256(acc), _mm512_extractf64x4_pd(acc, 1));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(h) + _mm_cvtsd_f64(_mm_unpackhi_pd(h, h));
}

ACC_AVX512 inline __attribute__((always_inline)) __m512i qsgd_codes16(const float* x, __m512 scale, __m512i top,
                                                                      __m512i& counter) {
    __m512 v = _mm512_loadu_ps(x);
    __m512 l = _mm512_mul_ps(_mm512_abs_ps(v), scale);
    __m512 f = _mm512_roundscale_ps(l, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512i h = counter;
    counter = _mm512_add_epi32(counter, _mm512_set1_epi32(static_cast<int>(kGolden * 16u)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(0x7feb352d));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 15));
    h = _mm512_mullo_epi32(h, _mm512_set1_epi32(static_cast<int>(0x846ca68bu)));
    h = _mm512_xor_si512(h, _mm512_srli_epi32(h, 16));
    __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)), _mm512_set1_ps(kTwoPowMinus24));
    __mmask16 fire = _mm512_cmp_ps_mask(u, _mm512_sub_ps(l, f), _CMP_LT_OQ);
    __m512i q = _mm512_cvttps_epi32(f);
    q = _mm512_min_epi32(top, _mm512_mask_add_epi32(q, fire, q, _mm512_set1_epi32(1)));
    __m512i sign = _mm512_srai_epi32(_mm512_castps_si512(v), 31);
    return _mm512_sub_epi32(_mm512_xor_si512(q, sign), sign);
}

ACC_AVX512 bool qsgd_encode_avx512(const float* x, std::int64_t buckets, int levels, std::uint32_t key32,
                                   std::uint8_t* norms, std::uint8_t* codes, bool wide) {
    const __m512i top = _mm512_set1_epi32(levels);
    __m512i counter = _mm512_add_epi32(
        _mm512_set1_epi32(static_cast<int>(key32)),
        _mm512_mullo_epi32(_mm512_set1_epi32(static_cast<int>(kGolden)),
                           _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
    // Norms a block of buckets ahead, so that the square roots and divisions overlap
    // instead of stalling every bucket (the block stays in L1).
    constexpr std::int64_t kBlock = 8;
    float block_scale[kBlock] = {};
    for (std::int64_t b = 0; b < buckets; ++b) {
        if (b % kBlock == 0) {
            const std::int64_t end = std::min(buckets, b + kBlock);
            double squares[kBlock];
            for (std::int64_t c = b; c < end; ++c) squares[c - b] = bucket_squares_avx512(x + c * 128);
            if (!qsgd_scales(squares, end - b, levels, norms + 4 * b, block_scale)) return false;
        }
        const float* xb = x + b * 128;
        std::uint8_t* cb = codes + (wide ? 2 : 1) * b * 128;
        const float scale = block_scale[b % kBlock];
        if (scale == 0.0f || !std::isfinite(scale)) {  // a zero bucket, or levels / norm overflowed
            qsgd_bucket_bytes(xb, 128, b * 128, load_f32(norms + 4 * b), levels, key32, wide, cb);
            counter = _mm512_add_epi32(counter, _mm512_set1_epi32(static_cast<int>(kGolden * 128u)));
            continue;
        }
        const __m512 s = _mm512_set1_ps(scale);
        for (int g = 0; g < 128; g += 16) {
            __m512i c = qsgd_codes16(xb + g, s, top, counter);
            if (wide)
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb + 2 * g), _mm512_cvtsepi32_epi16(c));
            else
                _mm_storeu_si128(reinterpret_cast<__m128i*>(cb + g), _mm512_cvtsepi32_epi8(c));
        }
    }
    return true;
}
#pragma GCC diagnostic pop
#endif
template <class Code>
void qsgd_add_portable(const Code* codes, std::int64_t len, float factor, bool first, float* out) {
    for (std::int64_t i = 0; i < len; ++i) {
        float v = static_cast<float>(codes[i]) * factor;
        out[i] = first ? v : out[i] + v;
    }
}

}  // namespace

// ---------------------------------------------------------------- QSGD

std::int64_t qsgd_bytes(std::int64_t n, int levels) {
    return 4 * ((n + kQsgdBucket - 1) / kQsgdBucket) + (levels < 128 ? 1 : 2) * n;
}

bool qsgd_encode(const float* x, std::int64_t n, int levels, std::uint64_t key, std::uint8_t* out) {
    const std::int64_t buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    const bool wide = levels >= 128;
    std::uint8_t* codes = out + 4 * buckets;
    const auto key32 = static_cast<std::uint32_t>(key);
    std::int64_t b = 0;
#if ACC_X86
    if (simd()) {
        b = n / kQsgdBucket;  // the whole buckets; a partial last one below
        bool finite = avx512() ? qsgd_encode_avx512(x, b, levels, key32, out, codes, wide)
                               : qsgd_encode_simd(x, b, levels, key32, out, codes, wide);
        if (!finite) return false;
    }
#endif
    for (; b < buckets; ++b) {
        const std::int64_t begin = b * kQsgdBucket;
        const std::int64_t len = std::min(kQsgdBucket, n - begin);
        const float* xb = x + begin;
        const double squares = sum_squares_portable(xb, len);
        if (!std::isfinite(squares)) return false;
        const auto norm = static_cast<float>(std::sqrt(squares));
        store_f32(out + 4 * b, norm);
        qsgd_bucket_bytes(xb, len, begin, norm, levels, key32, wide, codes + (wide ? 2 : 1) * begin);
    }
    return true;
}

void qsgd_add(const std::uint8_t* payload, std::int64_t n, int levels, float weight, bool first, float* out) {
    const std::int64_t buckets = (n + kQsgdBucket - 1) / kQsgdBucket;
    qsgd_add_range(payload, payload + 4 * buckets, n, levels, weight, first, out);
}

void qsgd_add_range(const std::uint8_t* norms, const std::uint8_t* codes, std::int64_t count, int levels, float weight,
                    bool first, float* out) {
    const std::int64_t buckets = (count + kQsgdBucket - 1) / kQsgdBucket;
    const bool wide = levels >= 128;
    const bool vector = simd();
    alignas(32) std::int16_t scratch[kQsgdBucket];
    for (std::int64_t b = 0; b < buckets; ++b) {
        const std::int64_t begin = b * kQsgdBucket;
        const std::int64_t len = std::min(kQsgdBucket, count - begin);
        const float factor = load_f32(norms + 4 * b) / static_cast<float>(levels) * weight;
        std::memcpy(scratch, codes + (wide ? 2 : 1) * begin, static_cast<size_t>((wide ? 2 : 1) * len));
#if ACC_X86
        if (vector && !wide && len == kQsgdBucket) {
            qsgd_add_simd8(reinterpret_cast<const std::int8_t*>(scratch), factor, first, out + begin);
            continue;
        }
#endif
        if (wide)
            qsgd_add_portable(scratch, len, factor, first, out + begin);
        else
            qsgd_add_portable(reinterpret_cast<const std::int8_t*>(scratch), len, factor, first, out + begin);
    }
}

}  // namespace kernels

namespace {
namespace k = kernels;

class QsgdCodec : public TensorCodec {
public:
    QsgdCodec(const Spec& spec, std::int64_t n) : TensorCodec(spec, n), levels_(static_cast<int>(spec.parameter)) {}
    std::int64_t payload_bytes() const override { return k::qsgd_bytes(numel_, levels_); }
    bool encode(float* t, bool, std::uint64_t key, std::uint8_t* payload) override {
        return k::qsgd_encode(t, numel_, levels_, key, payload);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        const float weight = codec_util::inverse_world(payloads.size());
        const std::int64_t norms = 4 * ((numel_ + k::kQsgdBucket - 1) / k::kQsgdBucket);
        const std::int64_t code_bytes = levels_ < 128 ? 1 : 2;
        codec_util::by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::qsgd_add_range(payloads[w] + 4 * (begin / k::kQsgdBucket), payloads[w] + norms + code_bytes * begin,
                                  count, levels_, weight, w == 0, out + begin);
        });
        return true;
    }

private:
    int levels_;
};

// One code per entry (int8 below 128 levels, else int16) and one fp32 norm per bucket.
std::int64_t wire(double levels, const std::vector<std::int64_t>& shape) {
    const std::int64_t n = shape_numel(shape);
    const std::int64_t code = levels < 128 ? 1 : 2;
    return code * n + 4 * codec_util::ceil_div(n, k::kQsgdBucket);
}

}  // namespace

const CompressorInfo& qsgd_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "qsgd";
        c.parameter_info = {"LEVELS", "LEVELS", true, 32767, "2", {127}};
        c.summary = "stochastic quantization to LEVELS levels, bucketed norms (1..32767)";
        c.collective = Collective::allgather;
        c.wire_bytes = wire;
        c.make_codec = codec_util::make<QsgdCodec>;
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
namespace k = kernels;

class QsgdDeviceCodec : public DeviceCodec {
public:
    QsgdDeviceCodec(std::unique_ptr<TensorCodec> host, int levels)
        : DeviceCodec(std::move(host)), levels_(levels), code_type_(levels < 128 ? at::kChar : at::kShort) {}

    at::Tensor encode(at::Tensor& t, bool, std::uint64_t key, at::Tensor& payload) override {
        const std::int64_t n = numel(), buckets = codec_util::ceil_div(n, k::kQsgdBucket);
        if (n == 0) return device::flag(true, t.device());
#if ACC_CUDA_KERNELS
        if (device::cuda_kernels_for(t))
            return device::kernel_flag(t, [&](bool* ok, void* stream) {
                cuda::qsgd_codes(t.data_ptr<float>(), n, levels_, static_cast<std::uint32_t>(key),
                                 payload.data_ptr<std::uint8_t>(), ok, stream);
            });
#endif
        at::Tensor x = at::constant_pad_nd(t, {0, buckets * k::kQsgdBucket - n}, 0).view({buckets, k::kQsgdBucket});
        // Norms in double as the host sums them, rounded to float32.
        at::Tensor norms = x.to(at::kDouble).square().sum(1).sqrt().to(at::kFloat);
        at::Tensor codes = device::stochastic_codes(x, norms.unsqueeze(1), levels_, key, 0);
        payload.narrow(0, 0, 4 * buckets).copy_(device::bytes_of(norms));
        at::Tensor typed = codes.view({-1}).narrow(0, 0, n).to(code_type_);
        payload.narrow(0, 4 * buckets, payload.numel() - 4 * buckets).copy_(device::bytes_of(typed));
        return device::all_finite(t);
    }

    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override {
        const std::int64_t n = numel(), buckets = codec_util::ceil_div(n, k::kQsgdBucket);
        if (n == 0) return device::flag(true, out.device());
        const float weight = codec_util::inverse_world(payloads.size());
        // A divisor on the device: CUDA turns division by a host scalar into multiplication
        // by its reciprocal, which can differ from the host's quotient in the last bit.
        at::Tensor levels = at::scalar_tensor(static_cast<float>(levels_), out.options());
        const std::int64_t whole = n / k::kQsgdBucket, tail = n - whole * k::kQsgdBucket;
        device::sum_over_workers(payloads, out, [&](const at::Tensor& rows) {
            // The host's factor: norm / levels * weight, in that order; then code * factor.
            at::Tensor factor = (device::columns_as(rows, 0, buckets, at::kFloat) / levels).mul_(weight);
            at::Tensor terms = device::columns_as(rows, 4 * buckets, n, code_type_).to(at::kFloat);
            const std::int64_t r = rows.size(0);
            if (whole > 0)
                terms.narrow(1, 0, whole * k::kQsgdBucket)
                    .view({r, whole, k::kQsgdBucket})
                    .mul_(factor.narrow(1, 0, whole).unsqueeze(2));
            if (tail > 0) terms.narrow(1, whole * k::kQsgdBucket, tail).mul_(factor.narrow(1, whole, 1));
            return terms;
        });
        return device::flag(true, out.device());
    }

private:
    int levels_;
    at::ScalarType code_type_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_qsgd_device_codec(std::unique_ptr<TensorCodec> host, const Spec& spec,
                                                    const CodecOptions&) {
    return std::make_unique<QsgdDeviceCodec>(std::move(host), static_cast<int>(spec.parameter));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
