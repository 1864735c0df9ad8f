// efsignsgd: a scale ||t||_1 / n and the signs through the allgather; error feedback
// keeps t - scale sign(t).
#include "compress/compressors/common.hpp"

#include <cmath>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {
namespace {
namespace k = kernels;
using codec_util::by_blocks;

class EfSignCodec : public TensorCodec {
public:
    EfSignCodec(const Spec& spec, std::int64_t n) : TensorCodec(spec, n) {}
    std::int64_t payload_bytes() const override { return 4 + k::sign_bytes(numel_); }
    bool error_feedback() const override { return true; }
    bool encode(float* t, bool update_error, std::uint64_t, std::uint8_t* payload) override {
        const double l1 = k::abs_sum(t, numel_);
        if (!std::isfinite(l1)) return false;
        const auto scale = numel_ > 0 ? static_cast<float>(l1 / static_cast<double>(numel_)) : 0.0f;
        k::store_f32(payload, scale);
        return update_error ? k::pack_signs_update(t, numel_, scale, payload + 4) : k::pack_signs(t, numel_, payload + 4);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        const float weight = codec_util::inverse_world(payloads.size());
        by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::add_signs(payloads[w] + 4 + begin / 8, count, k::load_f32(payloads[w]) * weight, w == 0, out + begin);
        });
        if (payloads.empty()) std::fill(out, out + numel_, 0.0f);
        return true;
    }
};

// Signs packed into 32-bit words, plus one fp32 scale.
std::int64_t wire(double, const std::vector<std::int64_t>& shape) {
    return 4 * codec_util::ceil_div(shape_numel(shape), 32) + 4;
}

}  // namespace

const CompressorInfo& efsignsgd_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "efsignsgd";
        c.summary = "scaled signs with error feedback";
        c.collective = Collective::allgather;
        c.error_feedback = true;
        c.wire_bytes = wire;
        c.make_codec = codec_util::make<EfSignCodec>;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

namespace acc::compress {

namespace {

class EfSignDeviceCodec : public DeviceCodec {
public:
    explicit EfSignDeviceCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}
    at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t, at::Tensor& payload) override {
        const std::int64_t n = numel();
        // ||t||_1 in double as the host sums it; NaN or infinity makes it non-finite.
        at::Tensor l1 = t.abs().sum(at::kDouble);
        at::Tensor scale = n > 0 ? (l1 / static_cast<double>(n)).to(at::kFloat) : at::zeros({}, t.options());
        payload.narrow(0, 0, 4).copy_(device::bytes_of(scale));
        at::Tensor negative = t.lt(0);
        payload.narrow(0, 4, payload.numel() - 4).copy_(device::pack_bits(negative));
        if (update_error) t.sub_(at::where(negative, -scale, scale));
        return at::isfinite(l1);
    }
    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override {
        // The host's terms: each worker's scale times 1 / W, signed by its bits.
        const float weight = codec_util::inverse_world(payloads.size());
        device::sum_over_workers(payloads, out, [&](const at::Tensor& rows) {
            at::Tensor factor = device::columns_as(rows, 0, 1, at::kFloat) * weight;  // [rows, 1]
            at::Tensor negative = device::unpack_bits(rows.narrow(1, 4, rows.size(1) - 4), numel());
            return at::where(negative, -factor, factor);
        });
        return device::flag(true, out.device());
    }
};

}  // namespace

std::unique_ptr<DeviceCodec> make_efsignsgd_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                         const CodecOptions&) {
    return std::make_unique<EfSignDeviceCodec>(std::move(host));
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
