// signsgd: one bit per entry through the allgather; the aggregate is the majority vote,
// sign(sum of signs).
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

bool pack_signs_portable(float* t, std::int64_t n, float scale, bool update, std::uint8_t* out) {
    std::uint32_t worst = 0;
    for (std::int64_t w = 0; w * 32 < n; ++w) {
        std::uint32_t word = 0;
        std::int64_t end = std::min<std::int64_t>(n, w * 32 + 32);
        for (std::int64_t i = w * 32; i < end; ++i) {
            float v = t[i];
            worst = std::max(worst, magnitude_key(v));
            bool negative = v < 0;
            word |= static_cast<std::uint32_t>(negative) << (i - w * 32);
            if (update) t[i] = v - (negative ? -scale : scale);
        }
        std::memcpy(out + 4 * w, &word, 4);
    }
    return worst < kInfKey;
}

#if ACC_X86
ACC_SIMD bool pack_signs_simd(float* t, std::int64_t n, float scale, bool update, std::uint8_t* out) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 plus = _mm256_set1_ps(scale);
    const __m256 minus = _mm256_set1_ps(-scale);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i worst = _mm256_setzero_si256();
    std::int64_t w = 0;
    for (; (w + 1) * 32 <= n; ++w) {
        std::uint32_t word = 0;
        for (int part = 0; part < 4; ++part) {
            float* p = t + w * 32 + part * 8;
            __m256 v = _mm256_loadu_ps(p);
            worst = _mm256_max_epu32(worst, _mm256_and_si256(_mm256_castps_si256(v), abs_mask));
            __m256 negative = _mm256_cmp_ps(v, zero, _CMP_LT_OQ);
            word |= static_cast<std::uint32_t>(_mm256_movemask_ps(negative)) << (part * 8);
            if (update) _mm256_storeu_ps(p, _mm256_sub_ps(v, _mm256_blendv_ps(plus, minus, negative)));
        }
        std::memcpy(out + 4 * w, &word, 4);
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), worst);
    bool ok = *std::max_element(lanes, lanes + 8) < kInfKey;
    if (w * 32 < n) ok = pack_signs_portable(t + w * 32, n - w * 32, scale, update, out + 4 * w) && ok;
    return ok;
}

ACC_SIMD void add_signs_simd(const std::uint8_t* packed, std::int64_t n, float weight, bool first, float* out) {
    const __m256 plus = _mm256_set1_ps(weight);
    const __m256 minus = _mm256_set1_ps(-weight);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    std::int64_t w = 0;
    for (; (w + 1) * 32 <= n; ++w) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * w, 4);
        for (int part = 0; part < 4; ++part) {
            __m256i byte = _mm256_set1_epi32(static_cast<int>((word >> (part * 8)) & 0xffu));
            __m256 set = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(byte, bit), bit));
            __m256 v = _mm256_blendv_ps(plus, minus, set);
            float* p = out + w * 32 + part * 8;
            _mm256_storeu_ps(p, first ? v : _mm256_add_ps(_mm256_loadu_ps(p), v));
        }
    }
    for (std::int64_t i = w * 32; i < n; ++i) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * (i / 32), 4);
        float v = (word >> (i % 32)) & 1u ? -weight : weight;
        out[i] = first ? v : out[i] + v;
    }
}

#endif

}  // namespace

// ---------------------------------------------------------------- signs

bool pack_signs(const float* x, std::int64_t n, std::uint8_t* out) {
    // update = false: x is only read.
    float* t = const_cast<float*>(x);
#if ACC_X86
    if (simd()) return pack_signs_simd(t, n, 0.0f, false, out);
#endif
    return pack_signs_portable(t, n, 0.0f, false, out);
}

bool pack_signs_update(float* t, std::int64_t n, float scale, std::uint8_t* out) {
#if ACC_X86
    if (simd()) return pack_signs_simd(t, n, scale, true, out);
#endif
    return pack_signs_portable(t, n, scale, true, out);
}

void add_signs(const std::uint8_t* packed, std::int64_t n, float weight, bool first, float* out) {
#if ACC_X86
    if (simd()) return add_signs_simd(packed, n, weight, first, out);
#endif
    for (std::int64_t i = 0; i < n; ++i) {
        std::uint32_t word;
        std::memcpy(&word, packed + 4 * (i / 32), 4);
        float v = (word >> (i % 32)) & 1u ? -weight : weight;
        out[i] = first ? v : out[i] + v;
    }
}

void sign_in_place(float* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? 1.0f : (x[i] < 0 ? -1.0f : 0.0f);
}

}  // namespace kernels

namespace {
namespace k = kernels;
using codec_util::by_blocks;

class SignCodec : public TensorCodec {
public:
    SignCodec(const Spec& spec, std::int64_t n) : TensorCodec(spec, n) {}
    std::int64_t payload_bytes() const override { return k::sign_bytes(numel_); }
    bool encode(float* t, bool, std::uint64_t, std::uint8_t* payload) override {
        return k::pack_signs(t, numel_, payload);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::add_signs(payloads[w] + begin / 8, count, 1.0f, w == 0, out + begin);
            k::sign_in_place(out + begin, count);  // ties (an even split) give 0
        });
        return true;
    }
};

// Signs packed into 32-bit words.
std::int64_t wire(double, const std::vector<std::int64_t>& shape) {
    return 4 * codec_util::ceil_div(shape_numel(shape), 32);
}

}  // namespace

const CompressorInfo& signsgd_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "signsgd";
        c.summary = "signs with majority vote (1 bit per entry)";
        c.collective = Collective::allgather;
        c.wire_bytes = wire;
        c.make_codec = codec_util::make<SignCodec>;
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

class SignDeviceCodec : public DeviceCodec {
public:
    explicit SignDeviceCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}
    at::Tensor encode(at::Tensor& t, bool, std::uint64_t, at::Tensor& payload) override {
#if ACC_CUDA_KERNELS
        if (device::cuda_kernels_for(t) && numel() > 0)
            return device::kernel_flag(t, [&](bool* ok, void* stream) {
                cuda::sign_bits(t.data_ptr<float>(), numel(), payload.data_ptr<std::uint8_t>(), ok, stream);
            });
#endif
        payload.copy_(device::pack_bits(t.lt(0)));
        return device::all_finite(t);
    }
    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override {
        // Majority vote: more positive than negative signs gives +1, a tie 0. out counts
        // the negative signs (whole numbers, exact in float32 in any order) a block of
        // workers at a time, so that no [W, n] tensor is made.
        out.zero_();
        device::for_worker_blocks(payloads, numel(), [&](const at::Tensor& rows) {
            at::Tensor negative = device::unpack_bits(rows, numel());
            out.add_(negative.size(0) == 1 ? negative[0] : negative.sum(0, false, at::kFloat));
        });
        const auto workers = static_cast<double>(payloads.size());
        out.mul_(-2.0).add_(workers).sign_();
        return device::flag(true, out.device());
    }
};

}  // namespace

std::unique_ptr<DeviceCodec> make_signsgd_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                       const CodecOptions&) {
    return std::make_unique<SignDeviceCodec>(std::move(host));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
