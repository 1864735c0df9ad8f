// randomk:FRACTION: the values at indices drawn from a stream all workers share, so that
// only the values travel, summed by an allreduce; error feedback keeps the rest.
#include "compress/compressors/common.hpp"
#include "compress/kernel_support.hpp"

#include <algorithm>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

}  // namespace

void random_indices(std::uint64_t key, std::int64_t n, std::int64_t k, std::int32_t* indices,
                    std::vector<std::uint64_t>& bitmap) {
    const std::int64_t words = (n + 63) / 64;
    // Draw the smaller of the chosen set and its complement.
    const bool complement = 2 * k > n;
    const std::int64_t draws = complement ? n - k : k;
    bitmap.assign(static_cast<size_t>(words), 0);
    Rng rng(key);
    for (std::int64_t d = 0; d < draws;) {
        auto i = rng.below(static_cast<std::uint64_t>(n));
        std::uint64_t& word = bitmap[i / 64];
        std::uint64_t bit = 1ull << (i % 64);
        if (!(word & bit)) {
            word |= bit;
            ++d;
        }
    }
    std::int64_t out = 0;
    for (std::int64_t w = 0; w < words; ++w) {
        std::uint64_t word = complement ? ~bitmap[static_cast<size_t>(w)] : bitmap[static_cast<size_t>(w)];
        if (w == words - 1 && n % 64) word &= (1ull << (n % 64)) - 1;
        while (word) {
            indices[out++] = static_cast<std::int32_t>(w * 64 + __builtin_ctzll(word));
            word &= word - 1;
        }
    }
}

}  // namespace kernels

namespace {
namespace k = kernels;

class RandomkCodec : public TensorCodec {
public:
    RandomkCodec(const Spec& spec, std::int64_t n)
        : TensorCodec(spec, n), indices_(static_cast<size_t>(kept_entries(spec.parameter, n))) {}
    Channel channel() const override { return Channel::sparse_sum; }
    std::int64_t payload_bytes() const override { return 4 * static_cast<std::int64_t>(indices_.size()); }
    bool error_feedback() const override { return true; }
    bool checks_finite() const override { return false; }
    bool shared_stream() const override { return true; }
    bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) override {
        const auto kept = static_cast<std::int64_t>(indices_.size());
        k::random_indices(key, numel_, kept, indices_.data(), bitmap_);
        auto* values = reinterpret_cast<float*>(payload);
        for (std::int64_t j = 0; j < kept; ++j) {
            std::int32_t index = indices_[static_cast<size_t>(j)];
            values[j] = t[index];
            if (update_error) t[index] = 0.0f;
        }
        return true;
    }
    void decode_sum(const std::uint8_t* sum, int world, float* out, float*) const override {
        const auto divisor = static_cast<float>(world);
        std::fill(out, out + numel_, 0.0f);
        const auto* values = reinterpret_cast<const float*>(sum);
        for (size_t j = 0; j < indices_.size(); ++j) out[indices_[j]] = values[j] / divisor;
    }

private:
    std::vector<std::int32_t> indices_;
    std::vector<std::uint64_t> bitmap_;
};

// Only the values: the indices come from the shared seed.
std::int64_t wire(double fraction, const std::vector<std::int64_t>& shape) {
    return 4 * kept_entries(fraction, shape_numel(shape));
}

}  // namespace

const CompressorInfo& randomk_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "randomk";
        c.parameter_info = {"FRACTION", "F", false, 1, "0.01", {0.01}};
        c.summary = "random FRACTION of entries from a shared seed, error feedback";
        c.collective = Collective::allreduce;
        c.error_feedback = true;
        c.wire_bytes = wire;
        // A uniform random subset of g_o drawn directly has the distribution of one of C_min.
        c.gravac_family = true;
        c.make_codec = codec_util::make<RandomkCodec>;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

namespace acc::compress {

namespace {

// The indices come from the host's sequential stream (rejection sampling has no
// per-index formula), k int32 per step; the values never leave the device.
class RandomkDeviceCodec : public DeviceCodec {
public:
    RandomkDeviceCodec(std::unique_ptr<TensorCodec> host, std::int64_t k)
        : DeviceCodec(std::move(host)), host_indices_(static_cast<size_t>(k)) {}

    at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t key, at::Tensor& payload) override {
        const auto kept = static_cast<std::int64_t>(host_indices_.size());
        if (t.is_cuda()) {
            // Drawn into pinned memory, the copy is queued behind the step's work instead
            // of making the host wait for the GPU; LibTorch's pinned-memory cache keeps the
            // block until the copy has run. Widened to int64 on the device.
            at::Tensor drawn = at::empty({kept}, at::TensorOptions().dtype(at::kInt).pinned_memory(true));
            kernels::random_indices(key, numel(), kept, drawn.data_ptr<std::int32_t>(), bitmap_);
            indices_ = drawn.to(at::TensorOptions().device(t.device()), /*non_blocking=*/true).to(at::kLong);
        } else {
            kernels::random_indices(key, numel(), kept, host_indices_.data(), bitmap_);
            indices_ = at::from_blob(host_indices_.data(), {kept}, at::kInt).to(t.device(), at::kLong);
        }
        payload.copy_(t.index_select(0, indices_));
        if (update_error) t.index_fill_(0, indices_, 0.0);
        return device::flag(true, t.device());
    }

    void decode_sum(const at::Tensor& sum, int world, at::Tensor& out, at::Tensor*) override {
        out.zero_();
        out.index_copy_(0, indices_, sum / at::scalar_tensor(static_cast<float>(world), sum.options()));
    }

private:
    std::vector<std::int32_t> host_indices_;
    std::vector<std::uint64_t> bitmap_;
    at::Tensor indices_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_randomk_device_codec(std::unique_ptr<TensorCodec> host, const Spec&,
                                                       const CodecOptions&) {
    const std::int64_t k = host->payload_bytes() / 4;
    return std::make_unique<RandomkDeviceCodec>(std::move(host), k);
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
