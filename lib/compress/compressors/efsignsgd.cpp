// efsignsgd: a scale ||t||_1 / n and the signs through the allgather; error feedback
// keeps t - scale sign(t).
#include "compress/compressors/common.hpp"

#include <cmath>

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
