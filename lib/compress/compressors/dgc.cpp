// dgc:FRACTION: deep gradient compression. Momentum correction u = m u + g, accumulation
// v += u, v sparsified by the sampled threshold, and u and v cleared where entries were
// sent (momentum factor masking). v is the error memory.
#include "compress/compressors/topk.hpp"

#include <cmath>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

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
    return std::make_unique<DgcCodec>(spec, n, o.dgc.momentum);
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
        c.momentum_in_gradient = true;
        c.sparsity_warmup = true;
        c.gravac_family = true;
        c.make_codec = make;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

namespace acc::compress {

namespace {

// Momentum correction and masking around topk's device codec. The selection is the
// exact top k: the sampled threshold saves a CPU's sort, while torch.topk is fast on a GPU.
class DgcDeviceCodec : public SparseDeviceCodec {
public:
    DgcDeviceCodec(std::unique_ptr<TensorCodec> host, std::int64_t k, double momentum)
        : SparseDeviceCodec(std::move(host), k), momentum_(momentum) {}

    at::Tensor* momentum(float* factor) override {
        *factor = static_cast<float>(momentum_);
        return &momentum_u_;
    }

    at::Tensor compensate(const at::Tensor& g, at::Tensor& memory, bool memory_zero) override {
        if (!momentum_u_.defined() || momentum_u_.device() != g.device())
            momentum_u_ = momentum_u_.defined() ? momentum_u_.to(g.device()) : at::zeros_like(g);
        // u = m u + g as the host rounds it: the product, then the sum.
        momentum_u_.mul_(static_cast<float>(momentum_)).add_(g);
        return SparseDeviceCodec::compensate(momentum_u_, memory, memory_zero);
    }

    at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t key, at::Tensor& payload) override {
        at::Tensor ok = SparseDeviceCodec::encode(t, update_error, key, payload);
        if (momentum_u_.defined() && last_indices().defined()) momentum_u_.index_fill_(0, last_indices(), 0.0);
        return ok;
    }

    std::vector<std::pair<std::string, at::Tensor*>> state() override {
        if (!momentum_u_.defined()) momentum_u_ = at::zeros({numel()}, at::kFloat);
        return {{"dgc_momentum", &momentum_u_}};
    }

private:
    double momentum_;
    at::Tensor momentum_u_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_dgc_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                   const CodecOptions& options) {
    const std::int64_t k = host->payload_bytes() / 8;
    return std::make_unique<DgcDeviceCodec>(std::move(host), k, options.dgc.momentum);
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
