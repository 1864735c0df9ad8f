// What the compressors' files share: each one's registration function (called from
// the one list in compress/registry.cpp) and the helpers of their codecs.
#pragma once

#include "base/shape.hpp"
#include "compress/codecs.hpp"
#ifdef ACC_COMPRESS_DEVICE
#include "compress/device_codec.hpp"
#endif
#include "compress/kernels.hpp"
#include "compress/spec.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace acc::compress {

// One per compressor, each in compressors/<name>.cpp.
const CompressorInfo& none_compressor();
const CompressorInfo& fp16_compressor();
const CompressorInfo& powersgd_compressor();
const CompressorInfo& topk_compressor();
const CompressorInfo& randomk_compressor();
const CompressorInfo& dgc_compressor();
const CompressorInfo& signsgd_compressor();
const CompressorInfo& efsignsgd_compressor();
const CompressorInfo& qsgd_compressor();
const CompressorInfo& terngrad_compressor();

namespace codec_util {

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

inline float inverse_world(size_t workers) { return 1.0f / static_cast<float>(workers); }

// Decoding W payloads runs over blocks of entries, all payloads per block, so that the
// output block stays in cache instead of being read and written once per worker.
// A block is a whole number of QSGD buckets, sign words and TernGrad bytes.
inline constexpr std::int64_t kDecodeBlock = 8192;

template <class F>
void by_blocks(std::int64_t n, F add_block) {
    for (std::int64_t begin = 0; begin < n; begin += kDecodeBlock) add_block(begin, std::min(kDecodeBlock, n - begin));
}

/// The factory CompressorInfo::make_codec points at, for a codec built from (spec, numel).
template <class Codec>
std::unique_ptr<TensorCodec> make(const Spec& spec, const std::vector<std::int64_t>& shape, const CodecOptions&) {
    return std::make_unique<Codec>(spec, shape_numel(shape));
}

/// fp32 values in the flat allreduce: `none`, and PowerSGD on a tensor it does not
/// compress. With error feedback the memory keeps the local input minus the mean.
std::unique_ptr<TensorCodec> make_dense_codec(const Spec& spec, std::int64_t n, bool error_feedback);

/// Throws UsageError when a sparsifier's int32 indices cannot address n values.
void check_int32_indices(const Spec& spec, std::int64_t n);

}  // namespace codec_util

#ifdef ACC_COMPRESS_DEVICE
// The device sections' factories (one per compressor with a device section, each in
// compressors/<name>.cpp), listed in compress/device_registry.cpp.
std::unique_ptr<DeviceCodec> make_none_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_fp16_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_powersgd_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_topk_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_randomk_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_dgc_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_signsgd_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_efsignsgd_device_codec(std::unique_ptr<TensorCodec>, const Spec&,
                                                         const CodecOptions&);
std::unique_ptr<DeviceCodec> make_qsgd_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);
std::unique_ptr<DeviceCodec> make_terngrad_device_codec(std::unique_ptr<TensorCodec>, const Spec&, const CodecOptions&);

namespace codec_util {
/// The device form of make_dense_codec's codec (none, and PowerSGD's uncompressed tensors).
std::unique_ptr<DeviceCodec> make_dense_device_codec(std::unique_ptr<TensorCodec> host);
}  // namespace codec_util
#endif

}  // namespace acc::compress
