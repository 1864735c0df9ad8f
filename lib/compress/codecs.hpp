// The compressors whose payloads travel through one allgather: topk, dgc, signsgd,
// efsignsgd, qsgd and terngrad. One codec per parameter tensor; no LibTorch.
//
// A step on one worker: compensate (error feedback adds the memory), encode into a
// payload of exactly payload_bytes() bytes (= wire_bytes of its spec), then every
// worker decodes all W payloads into the same aggregated gradient.
#pragma once

#include "compress/kernels.hpp"
#include "compress/spec.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::compress {

/// How topk chooses its entries.
enum class TopkSelection {
    exact,    ///< the k largest magnitudes (a sampled threshold only speeds up the search)
    sampled,  ///< DGC's sampled threshold: between 0.8 k and k entries, the rest padded
};

struct CodecOptions {
    TopkSelection topk_selection = TopkSelection::exact;
    double dgc_momentum = 0.9;  ///< DGC's momentum correction factor m
};

class GatherCodec {
public:
    virtual ~GatherCodec() = default;
    std::int64_t numel() const { return numel_; }
    const Spec& spec() const { return spec_; }
    /// Bytes of one worker's payload per step.
    virtual std::int64_t payload_bytes() const = 0;
    /// Whether the algorithm keeps an error memory (error feedback).
    virtual bool error_feedback() const { return false; }
    /// Whether encode() itself reports NaN and infinity (otherwise the caller checks).
    virtual bool checks_finite() const { return true; }
    /// Error feedback: memory (n floats) += g, or memory = g when memory_zero.
    /// DGC adds its momentum-corrected gradient instead. Returns false on NaN or infinity.
    virtual bool compensate(const float* g, float* memory, bool memory_zero);
    /// Encodes t (n floats) into `payload`. With update_error, t becomes
    /// t - decode(payload): the new error memory. `key` seeds the random choices.
    /// Returns false if t holds NaN or infinity (when checks_finite()).
    virtual bool encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) = 0;
    /// Writes the aggregate of W workers' payloads into out (n floats): their mean, or
    /// for signsgd the majority vote. Returns false if a payload is malformed.
    virtual bool decode(const std::vector<const std::uint8_t*>& payloads, float* out) const = 0;
    /// Compressor state beyond the error memory (DGC's momentum), by name.
    virtual std::vector<std::pair<std::string, std::vector<float>*>> state() { return {}; }

protected:
    GatherCodec(Spec spec, std::int64_t numel) : spec_(std::move(spec)), numel_(numel) {}
    Spec spec_;
    std::int64_t numel_;
};

/// Whether a spec's payload goes through the allgather (topk, dgc, signsgd, efsignsgd, qsgd, terngrad).
bool uses_gather(const Spec& spec);

/// The codec for a spec of an allgather compressor; throws UsageError for a tensor too
/// large for int32 indices.
std::unique_ptr<GatherCodec> make_gather_codec(const Spec& spec, std::int64_t numel, const CodecOptions& options);

}  // namespace acc::compress
