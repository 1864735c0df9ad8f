#include "compress/codecs.hpp"

#include "base/error.hpp"
#include "compress/compressors/common.hpp"

#include <limits>

namespace acc::compress {
namespace k = kernels;

std::int64_t channel_element_bytes(Channel channel) {
    switch (channel) {
    case Channel::fp16_sum: return 2;
    case Channel::gather: return 1;
    default: return 4;
    }
}

bool TensorCodec::compensate(const float* g, float* memory, bool memory_zero) {
    return memory_zero ? k::copy_checked(memory, g, numel_) : k::add_into(memory, g, numel_);
}

// A codec implements the decode of its own channel only; reaching these is a bug in the caller.
bool TensorCodec::decode(const std::vector<const std::uint8_t*>&, float*) const {
    throw Error("internal error: " + spec_.text() + " has no allgather payload to decode");
}

void TensorCodec::decode_sum(const std::uint8_t*, int, float*, float*) const {
    throw Error("internal error: " + spec_.text() + " has no allreduced sum to decode");
}

namespace codec_util {

void check_int32_indices(const Spec& spec, std::int64_t n) {
    if (n > std::numeric_limits<std::int32_t>::max())
        throw UsageError(spec.text() + ": a tensor of " + std::to_string(n) + " values is too large for 32-bit indices");
}

}  // namespace codec_util

std::unique_ptr<TensorCodec> make_codec(const Spec& spec, const std::vector<std::int64_t>& shape,
                                        const CodecOptions& options) {
    return spec.info().make_codec(spec, shape, options);
}

bool uses_gather(const Spec& spec) { return spec.info().collective == Collective::allgather; }

std::unique_ptr<GatherCodec> make_gather_codec(const Spec& spec, std::int64_t numel, const CodecOptions& options) {
    if (!uses_gather(spec))
        throw UsageError("'" + spec.text() + "' does not send its payload through an allgather");
    return make_codec(spec, {numel}, options);
}

}  // namespace acc::compress
