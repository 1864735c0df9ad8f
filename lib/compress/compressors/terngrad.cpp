// terngrad: stochastic ternary levels {-s, 0, s}, 2-bit codes and one fp32 scale,
// through the allgather.
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#include <array>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

#if ACC_X86
// 128 ternary codes: QSGD's rounding with one level and scale 1 / s.
ACC_SIMD void ternary_block_simd(const float* x, std::uint32_t base, float inverse, std::uint32_t key32,
                                 std::int8_t* codes) {
    const __m256 s = _mm256_set1_ps(inverse);
    const __m256i top = _mm256_set1_epi32(1);
    __m256i counter = _mm256_add_epi32(
        _mm256_set1_epi32(static_cast<int>(key32 + kGolden * base)),
        _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int>(kGolden)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    codes128_int8(x, s, top, counter, codes);
}

#endif

}  // namespace

// ---------------------------------------------------------------- TernGrad

bool terngrad_encode(const float* x, std::int64_t n, std::uint64_t key, std::uint8_t* out) {
    Moments m;
#if ACC_X86
    if (simd())
        moments_simd(x, n, true, m);
    else
#endif
        moments_body(x, n, true, m);
    if (m.worst >= kInfKey) return false;
    const double count = static_cast<double>(std::max<std::int64_t>(1, n));
    const double mean = combine_lanes(m.sum) / count;
    const double sigma = std::sqrt(std::max(0.0, combine_lanes(m.squares) / count - mean * mean));
    const float scale = std::min(float_of(m.worst), static_cast<float>(2.5 * sigma));
    store_f32(out, scale);
    std::uint8_t* codes = out + 4;
    const auto key32 = static_cast<std::uint32_t>(key);
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    // The codes are QSGD's stochastic rounding with one level and scale 1 / s: a clipped
    // value rounds to +-1, a smaller one to +-1 with probability |x| / s. Where 1 / s
    // overflows (a subnormal s) the portable loop divides by s instead.
    alignas(32) std::int8_t block[kQsgdBucket];
    const bool vector = simd() && std::isfinite(inverse);
    for (std::int64_t begin = 0; begin < n; begin += kQsgdBucket) {
        const std::int64_t len = std::min(kQsgdBucket, n - begin);
#if ACC_X86
        if (vector && len == kQsgdBucket)
            ternary_block_simd(x + begin, static_cast<std::uint32_t>(begin), inverse, key32, block);
        else
#endif
            qsgd_bucket_portable(x + begin, len, begin, scale, 1, key32, block);
        // code + 1 in two bits: 0 for -1, 1 for 0, 2 for +1.
        for (std::int64_t j = 0; j < len; j += 4) {
            unsigned byte = 0;
            for (std::int64_t i = j; i < std::min(len, j + 4); ++i)
                byte |= static_cast<unsigned>(block[i] + 1) << (2 * (i - j));
            codes[(begin + j) / 4] = static_cast<std::uint8_t>(byte);
        }
    }
    return true;
}

void terngrad_add(const std::uint8_t* payload, std::int64_t n, float weight, bool first, float* out) {
    terngrad_add_codes(payload + 4, n, load_f32(payload) * weight, first, out);
}

void terngrad_add_codes(const std::uint8_t* codes, std::int64_t count, float scale, bool first, float* out) {
    // Each byte holds four codes: look its four values up instead of unpacking bits.
    // (A corrupt code 3 decodes as +2, never out of range.)
    static const auto table = [] {
        std::array<std::array<float, 4>, 256> t{};
        for (int byte = 0; byte < 256; ++byte)
            for (int j = 0; j < 4; ++j) t[byte][j] = static_cast<float>(((byte >> (2 * j)) & 3) - 1);
        return t;
    }();
    std::int64_t i = 0;
    for (; i + 4 <= count; i += 4) {
        const auto& v = table[codes[i / 4]];
        for (int j = 0; j < 4; ++j) out[i + j] = first ? scale * v[j] : out[i + j] + scale * v[j];
    }
    for (; i < count; ++i) {
        float v = scale * table[codes[i / 4]][i % 4];
        out[i] = first ? v : out[i] + v;
    }
}

}  // namespace kernels

namespace {
namespace k = kernels;

class TernGradCodec : public TensorCodec {
public:
    TernGradCodec(const Spec& spec, std::int64_t n) : TensorCodec(spec, n) {}
    std::int64_t payload_bytes() const override { return k::terngrad_bytes(numel_); }
    bool encode(float* t, bool, std::uint64_t key, std::uint8_t* payload) override {
        return k::terngrad_encode(t, numel_, key, payload);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        const float weight = codec_util::inverse_world(payloads.size());
        codec_util::by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::terngrad_add_codes(payloads[w] + 4 + begin / 4, count, k::load_f32(payloads[w]) * weight, w == 0,
                                      out + begin);
        });
        return true;
    }
};

// 2-bit codes, four per byte, and one fp32 scale.
std::int64_t wire(double, const std::vector<std::int64_t>& shape) {
    return codec_util::ceil_div(shape_numel(shape), 4) + 4;
}

}  // namespace

const CompressorInfo& terngrad_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "terngrad";
        c.summary = "stochastic ternary levels {-s, 0, s} (2 bits per entry)";
        c.collective = Collective::allgather;
        c.wire_bytes = wire;
        c.make_codec = codec_util::make<TernGradCodec>;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

namespace acc::compress {

namespace {

class TernGradDeviceCodec : public DeviceCodec {
public:
    explicit TernGradDeviceCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}

    at::Tensor encode(at::Tensor& t, bool, std::uint64_t key, at::Tensor& payload) override {
        const std::int64_t n = numel();
        if (n == 0) {
            payload.zero_();
            return device::flag(true, t.device());
        }
        // The host's moments in double: mean, standard deviation, largest magnitude.
        at::Tensor x = t.to(at::kDouble);
        const auto count = static_cast<double>(n);
        at::Tensor mean = x.sum() / count;
        at::Tensor sigma = at::clamp_min(x.square().sum() / count - mean * mean, 0.0).sqrt();
        at::Tensor scale = at::minimum(t.abs().max(), (sigma * 2.5).to(at::kFloat));
        at::Tensor codes = device::stochastic_codes(t, scale, 1, key, 0);
        // code + 1 in two bits, four codes per byte, the first in the lowest bits.
        const std::int64_t padded = 4 * ((n + 3) / 4);
        at::Tensor two_bits = at::constant_pad_nd((codes + 1).to(at::kByte), {0, padded - n}, 0).view({-1, 4});
        at::Tensor shifts = at::arange(0, 8, 2, at::TensorOptions().dtype(at::kByte).device(t.device()));
        payload.narrow(0, 0, 4).copy_(device::bytes_of(scale));
        payload.narrow(0, 4, padded / 4).copy_(two_bits.__lshift__(shifts).sum(1, false, at::kByte));
        return device::all_finite(t);
    }

    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override {
        // The host's terms: each worker's scale times 1 / W, times its code - 1.
        const float weight = codec_util::inverse_world(payloads.size());
        at::Tensor shifts = at::arange(0, 8, 2, at::TensorOptions().dtype(at::kByte).device(out.device()));
        device::sum_over_workers(payloads, out, [&](const at::Tensor& rows) {
            at::Tensor factor = device::columns_as(rows, 0, 1, at::kFloat) * weight;  // [rows, 1]
            at::Tensor codes = rows.narrow(1, 4, rows.size(1) - 4).unsqueeze(-1).__rshift__(shifts).bitwise_and(3);
            at::Tensor terms = codes.reshape({rows.size(0), -1}).narrow(1, 0, numel()).to(at::kFloat);
            return terms.sub_(1.0).mul_(factor);
        });
        return device::flag(true, out.device());
    }
};

}  // namespace

std::unique_ptr<DeviceCodec> make_terngrad_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                        const CodecOptions&) {
    return std::make_unique<TernGradDeviceCodec>(std::move(host));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
