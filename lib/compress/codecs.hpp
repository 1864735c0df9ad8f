// One compressor's codec for one parameter tensor, over raw float arrays (no LibTorch).
// Each compressor's file (compressors/<name>.cpp) defines its codec and registers a
// factory for it (CompressorInfo::make_codec); the exchange drives every codec through
// this interface and never asks which compressor it is.
//
// A step on one worker: compensate (error feedback adds the memory), encode into the
// codec's place in the flat buffer of its channel (buffer_bytes() bytes), then, once the
// collective is done, decode the aggregate: decode_sum() from an allreduced sum, or
// decode() from all W workers' payloads of an allgather.
#pragma once
#include "compress/kernels.hpp"
#include "compress/options.hpp"
#include "compress/spec.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::compress {


/// The flat buffer of a step a tensor's payload travels in; one collective each.
enum class Channel {
    fp32_sum,  ///< float32 values, summed by an allreduce (none; PowerSGD on a tensor it sends uncompressed)
    fp16_sum,  ///< float16 values, summed by an allreduce (fp16)
    sparse_sum,  ///< float32 values at indices all workers share, summed by an allreduce (randomk)
    low_rank,  ///< PowerSGD's P and Q, in two allreduces of all matrices together
    gather,    ///< bytes, collected from every worker by one allgather
};
/// Bytes of one element of a channel's buffer.
std::int64_t channel_element_bytes(Channel channel);

struct CodecOptions {
    TopkOptions topk;  ///< topk's selection
    DgcOptions dgc;    ///< DGC's momentum (its warm-up is the exchange's: the level it sets)
    int world = 1;              ///< workers (fp16 divides by it before rounding)
    /// PowerSGD on a tensor it sends uncompressed keeps an error memory (local input minus
    /// the mean), as PyTorch's hook does; the Accordion reference keeps none.
    bool uncompressed_error_feedback = true;
};

/// PowerSGD's rows x cols matrix view and its rank r on one tensor (all 0 for the others).
struct LowRank {
    std::int64_t rows = 0, cols = 0;
    int rank = 0;
};

class TensorCodec {
public:
    virtual ~TensorCodec() = default;
    std::int64_t numel() const { return numel_; }
    const Spec& spec() const { return spec_; }
    virtual Channel channel() const { return Channel::gather; }
    /// Bytes of one worker's payload per step (= wire_bytes of its spec).
    virtual std::int64_t payload_bytes() const = 0;
    /// Bytes the codec takes in its channel's buffer (all channels but low_rank).
    virtual std::int64_t buffer_bytes() const { return payload_bytes(); }
    /// PowerSGD's shapes, for the low_rank channel.
    virtual LowRank low_rank() const { return {}; }
    /// Whether the algorithm keeps an error memory (error feedback).
    virtual bool error_feedback() const { return false; }
    /// Whether encode() itself reports NaN and infinity (otherwise the caller checks).
    virtual bool checks_finite() const { return true; }
    /// Whether a failed encode() leaves an unusable payload (fp16 overflow), so that it is
    /// an error even when the caller does not check for NaN and infinity.
    virtual bool encode_failure_fatal() const { return false; }
    /// What else a failed encode() may mean, appended to the error message.
    virtual std::string encode_failure_detail() const { return ""; }
    /// Whether all workers draw the same random stream (randomk's shared indices), not one per rank.
    virtual bool shared_stream() const { return false; }
    /// Error feedback: memory (n floats) += g, or memory = g when memory_zero.
    /// DGC adds its momentum-corrected gradient instead. Returns false on NaN or infinity.
    virtual bool compensate(const float* g, float* memory, bool memory_zero);
    /// Encodes t (n floats) into `payload`. With update_error, t becomes
    /// t - decode(payload): the new error memory. `key` seeds the random choices.
    /// Returns false if t holds NaN or infinity (when checks_finite()).
    virtual bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) = 0;
    /// Allgather channel: writes the aggregate of W workers' payloads into out (n floats):
    /// their mean, or for signsgd the majority vote. Returns false if a payload is malformed.
    virtual bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const;
    /// Allreduce channels: writes the mean into out from the sum of `world` payloads. With
    /// a memory (error feedback of a tensor sent whole), memory -= out as well.
    virtual void decode_sum(const std::uint8_t* sum, int world, float* out, float* memory) const;
    /// Compressor state beyond the error memory (DGC's momentum), by name.
    virtual std::vector<std::pair<std::string, std::vector<float>*>> state() { return {}; }

protected:
    TensorCodec(Spec spec, std::int64_t numel) : spec_(std::move(spec)), numel_(numel) {}
    Spec spec_;
    std::int64_t numel_;
};

/// The name the allgather codecs had before every compressor got a codec.
using GatherCodec = TensorCodec;

/// The codec of any compressor for one tensor of this shape; throws UsageError when the
/// level does not fit it (a tensor too large for int32 indices).
std::unique_ptr<TensorCodec> make_codec(const Spec& spec, const std::vector<std::int64_t>& shape,
                                        const CodecOptions& options);

/// Whether a spec's payload goes through the allgather (topk, dgc, signsgd, efsignsgd, qsgd, terngrad).
bool uses_gather(const Spec& spec);

/// The codec of an allgather compressor for n values; throws UsageError for any other
/// compressor and for a tensor too large for int32 indices.
std::unique_ptr<GatherCodec> make_gather_codec(const Spec& spec, std::int64_t numel, const CodecOptions& options);

}  // namespace acc::compress
