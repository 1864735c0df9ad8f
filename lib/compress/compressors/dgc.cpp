// dgc:FRACTION: deep gradient compression. Momentum correction u = m u + g, accumulation
// v += u, v sparsified by the sampled threshold, and u and v cleared where entries were
// sent (momentum factor masking). v is the error memory.
#include "compress/compressors/topk.hpp"

#include <cmath>

namespace acc::compress {
namespace {

class DgcCodec : public SparseCodec {
public:
    DgcCodec(const Spec& spec, std::int64_t n, double momentum)
        : SparseCodec(spec, n, true), momentum_(static_cast<float>(momentum)) {}

    bool compensate(const float* g, float* memory, bool memory_zero) override {
        if (momentum_u_.empty()) momentum_u_.assign(static_cast<size_t>(numel_), 0.0f);
        float* u = momentum_u_.data();
        std::uint32_t finite = 1;
        for (std::int64_t i = 0; i < numel_; ++i) {
            u[i] = momentum_ * u[i] + g[i];
            float v = memory_zero ? u[i] : memory[i] + u[i];
            memory[i] = v;
            finite &= std::isfinite(v) ? 1u : 0u;
        }
        return finite != 0;
    }

    bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) override {
        SparseCodec::encode(t, update_error, key, payload);
        if (!momentum_u_.empty())
            for (std::int64_t j = 0; j < last_chosen(); ++j)
                momentum_u_[static_cast<size_t>(last_indices()[static_cast<size_t>(j)])] = 0.0f;
        return true;
    }

    std::vector<std::pair<std::string, std::vector<float>*>> state() override {
        if (momentum_u_.empty()) momentum_u_.assign(static_cast<size_t>(numel_), 0.0f);
        return {{"dgc_momentum", &momentum_u_}};
    }

private:
    float momentum_;
    std::vector<float> momentum_u_;
};

std::unique_ptr<TensorCodec> make(const Spec& spec, const std::vector<std::int64_t>& shape, const CodecOptions& o) {
    const std::int64_t n = shape_numel(shape);
    codec_util::check_int32_indices(spec, n);
    return std::make_unique<DgcCodec>(spec, n, o.dgc_momentum);
}

}  // namespace

const CompressorInfo& dgc_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "dgc";
        c.parameter_info = {"FRACTION", "F", false, 1, "0.01", {0.01}};
        c.summary = "deep gradient compression: sampled threshold, momentum correction";
        c.collective = Collective::allgather;
        c.error_feedback = true;
        c.wire_bytes = sparse_wire_bytes;
        c.make_codec = make;
        return c;
    }();
    return info;
}

}  // namespace acc::compress
