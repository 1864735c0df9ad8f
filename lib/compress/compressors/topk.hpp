// topk's codec, which DGC (compressors/dgc.cpp) extends.
#pragma once

#include "compress/compressors/common.hpp"

namespace acc::compress {

// topk and dgc: k float32 values, then k int32 indices.
class SparseCodec : public TensorCodec {
public:
    SparseCodec(const Spec& spec, std::int64_t n, bool sampled);
    std::int64_t payload_bytes() const override { return 8 * k_; }
    bool error_feedback() const override { return true; }
    bool checks_finite() const override { return false; }
    bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) override;
    bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const override;

protected:
    const std::vector<std::int32_t>& last_indices() const { return indices_; }
    std::int64_t last_chosen() const { return chosen_; }

private:
    std::int64_t k_;
    bool sampled_;
    std::vector<std::int32_t> indices_;
    std::int64_t chosen_ = 0;
    kernels::SelectScratch scratch_;
};

#ifdef ACC_COMPRESS_DEVICE
// The device form: the exact top k (payload as SparseCodec's).
class SparseDeviceCodec : public DeviceCodec {
public:
    SparseDeviceCodec(std::unique_ptr<TensorCodec> host, std::int64_t k);
    /// The k largest magnitudes are finite only if all are (k > 0).
    bool finite_in_encode() const override { return k_ > 0; }
    std::int64_t sparse_pairs() const override { return k_; }
    bool sends_largest() const override { return k_ > 0; }
    at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t key, at::Tensor& payload) override;
    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override;

protected:
    /// The last step's chosen indices, ascending (int64; undefined before the first).
    const at::Tensor& last_indices();

private:
    std::int64_t k_;
    at::Tensor indices_;  // the last step's, ascending: int64, or int32 from the CUDA kernels
};
#endif

/// fp32 value and int32 index per kept entry (dgc pads its at most k chosen entries to k).
std::int64_t sparse_wire_bytes(double fraction, const std::vector<std::int64_t>& shape);

}  // namespace acc::compress
