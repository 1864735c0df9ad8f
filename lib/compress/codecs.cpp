#include "compress/codecs.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace acc::compress {
namespace k = kernels;

bool GatherCodec::compensate(const float* g, float* memory, bool memory_zero) {
    return memory_zero ? k::copy_checked(memory, g, numel_) : k::add_into(memory, g, numel_);
}

namespace {

float inverse_world(size_t workers) { return 1.0f / static_cast<float>(workers); }

// Decoding W payloads runs over blocks of entries, all payloads per block, so that the
// output block stays in cache instead of being read and written once per worker.
// A block is a whole number of QSGD buckets, sign words and TernGrad bytes.
constexpr std::int64_t kDecodeBlock = 8192;

template <class F>
void by_blocks(std::int64_t n, F add_block) {
    for (std::int64_t begin = 0; begin < n; begin += kDecodeBlock) add_block(begin, std::min(kDecodeBlock, n - begin));
}

// topk and dgc: k float32 values, then k int32 indices.
class SparseCodec : public GatherCodec {
public:
    SparseCodec(const Spec& spec, std::int64_t n, bool sampled)
        : GatherCodec(spec, n), k_(kept_entries(spec.parameter, n)), sampled_(sampled),
          indices_(static_cast<size_t>(k_)) {}
    std::int64_t payload_bytes() const override { return 8 * k_; }
    bool error_feedback() const override { return true; }
    bool checks_finite() const override { return false; }

    bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) override {
        std::int64_t chosen = k_;
        if (sampled_)
            chosen = k::top_k_sampled(t, numel_, k_, key, indices_.data(), scratch_);
        else
            k::top_k_exact(t, numel_, k_, key, indices_.data(), scratch_);
        // A sampled threshold may choose fewer than k: the rest is padding that adds 0 to entry 0.
        std::fill(indices_.begin() + chosen, indices_.end(), 0);
        std::uint8_t* values = payload;
        std::uint8_t* indices = payload + 4 * k_;
        for (std::int64_t j = 0; j < k_; ++j) {
            std::int32_t i = indices_[static_cast<size_t>(j)];
            k::store_f32(values + 4 * j, j < chosen ? t[i] : 0.0f);
            k::store_i32(indices + 4 * j, i);
        }
        if (update_error)
            for (std::int64_t j = 0; j < chosen; ++j) t[indices_[static_cast<size_t>(j)]] = 0.0f;
        chosen_ = chosen;
        return true;
    }

    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        std::fill(out, out + numel_, 0.0f);
        const float weight = inverse_world(payloads.size());
        for (const std::uint8_t* p : payloads)
            if (!k::scatter_add(p, p + 4 * k_, k_, numel_, weight, out)) return false;
        return true;
    }

protected:
    const std::vector<std::int32_t>& last_indices() const { return indices_; }
    std::int64_t last_chosen() const { return chosen_; }

private:
    std::int64_t k_;
    bool sampled_;
    std::vector<std::int32_t> indices_;
    std::int64_t chosen_ = 0;
    k::SelectScratch scratch_;
};

// Deep gradient compression: momentum correction u = m u + g, accumulation v += u,
// v sparsified by the sampled threshold, and u and v cleared where entries were sent
// (momentum factor masking). v is the error memory.
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
            for (std::int64_t j = 0; j < last_chosen(); ++j) momentum_u_[static_cast<size_t>(last_indices()[static_cast<size_t>(j)])] = 0.0f;
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

// signSGD with majority vote: one bit per entry; the aggregate is sign(sum of signs).
class SignCodec : public GatherCodec {
public:
    SignCodec(const Spec& spec, std::int64_t n) : GatherCodec(spec, n) {}
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

// EF-signSGD: a scale ||t||_1 / n and the signs; error feedback keeps t - scale sign(t).
class EfSignCodec : public GatherCodec {
public:
    EfSignCodec(const Spec& spec, std::int64_t n) : GatherCodec(spec, n) {}
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
        const float weight = inverse_world(payloads.size());
        by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::add_signs(payloads[w] + 4 + begin / 8, count, k::load_f32(payloads[w]) * weight, w == 0, out + begin);
        });
        if (payloads.empty()) std::fill(out, out + numel_, 0.0f);
        return true;
    }
};

class QsgdCodec : public GatherCodec {
public:
    QsgdCodec(const Spec& spec, std::int64_t n) : GatherCodec(spec, n), levels_(static_cast<int>(spec.parameter)) {}
    std::int64_t payload_bytes() const override { return k::qsgd_bytes(numel_, levels_); }
    bool encode(float* t, bool, std::uint64_t key, std::uint8_t* payload) override {
        return k::qsgd_encode(t, numel_, levels_, key, payload);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        const float weight = inverse_world(payloads.size());
        const std::int64_t norms = 4 * ((numel_ + k::kQsgdBucket - 1) / k::kQsgdBucket);
        const std::int64_t code_bytes = levels_ < 128 ? 1 : 2;
        by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::qsgd_add_range(payloads[w] + 4 * (begin / k::kQsgdBucket), payloads[w] + norms + code_bytes * begin,
                                  count, levels_, weight, w == 0, out + begin);
        });
        return true;
    }

private:
    int levels_;
};

class TernGradCodec : public GatherCodec {
public:
    TernGradCodec(const Spec& spec, std::int64_t n) : GatherCodec(spec, n) {}
    std::int64_t payload_bytes() const override { return k::terngrad_bytes(numel_); }
    bool encode(float* t, bool, std::uint64_t key, std::uint8_t* payload) override {
        return k::terngrad_encode(t, numel_, key, payload);
    }
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override {
        const float weight = inverse_world(payloads.size());
        by_blocks(numel_, [&](std::int64_t begin, std::int64_t count) {
            for (size_t w = 0; w < payloads.size(); ++w)
                k::terngrad_add_codes(payloads[w] + 4 + begin / 4, count, k::load_f32(payloads[w]) * weight, w == 0,
                                      out + begin);
        });
        return true;
    }
};

}  // namespace

bool uses_gather(const Spec& spec) { return spec.info().collective == Collective::allgather; }

std::unique_ptr<GatherCodec> make_gather_codec(const Spec& spec, std::int64_t numel, const CodecOptions& options) {
    const std::string& name = spec.name;
    if ((name == "topk" || name == "dgc") && numel > std::numeric_limits<std::int32_t>::max())
        throw UsageError(spec.text() + ": a tensor of " + std::to_string(numel) +
                         " values is too large for 32-bit indices");
    if (name == "topk") return std::make_unique<SparseCodec>(spec, numel, options.topk_selection == TopkSelection::sampled);
    if (name == "dgc") return std::make_unique<DgcCodec>(spec, numel, options.dgc_momentum);
    if (name == "signsgd") return std::make_unique<SignCodec>(spec, numel);
    if (name == "efsignsgd") return std::make_unique<EfSignCodec>(spec, numel);
    if (name == "qsgd") return std::make_unique<QsgdCodec>(spec, numel);
    if (name == "terngrad") return std::make_unique<TernGradCodec>(spec, numel);
    throw UsageError("'" + spec.text() + "' does not send its payload through an allgather");
}

}  // namespace acc::compress
