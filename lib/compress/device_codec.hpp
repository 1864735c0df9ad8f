// One compressor's codec for one parameter tensor, over LibTorch tensors on any device
// (the device path: CUDA tensors stay on the GPU; CPU tensors run the same ATen code,
// which is how the tests check it against the host codecs of compress/codecs.hpp).
//
// The same protocol as TensorCodec (compensate, encode into the codec's slice of its
// channel's buffer, decode the aggregate), with the same payload layout, so that host
// and device payloads can be compared byte for byte. Finite checks come back as 0-dim
// bool tensors on the codec's device instead of bools, so that a step needs no host
// synchronisation until the caller looks at them once.
//
// Each compressor's file (compressors/<name>.cpp) holds its device codec in a section
// compiled only into the LibTorch library (ACC_COMPRESS_DEVICE); device_registry.cpp
// lists the factories. A compressor without a device section gets a codec that stages
// through host memory and runs its host codec.
#pragma once

#include "compress/codecs.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::compress {

class DeviceCodec {
public:
    virtual ~DeviceCodec() = default;
    /// The host codec of the same tensor: sizes, channel, flags.
    const TensorCodec& host() const { return *host_; }
    std::int64_t numel() const { return host_->numel(); }
    Channel channel() const { return host_->channel(); }
    std::int64_t payload_bytes() const { return host_->payload_bytes(); }
    bool error_feedback() const { return host_->error_feedback(); }
    bool checks_finite() const { return host_->checks_finite(); }
    bool shared_stream() const { return host_->shared_stream(); }
    /// Whether the payload is the input itself (float32) and decode_sum its mean, with
    /// error feedback memory -= mean: then the exchange may treat many such tensors as one.
    virtual bool sends_values() const { return false; }
    /// k where the payload is k float32 values followed by their k int32 indices and
    /// decode() the mean of every worker's scatter (top-k, DGC), else -1: then the exchange
    /// may decode many such tensors as one (device::SparseBatch).
    virtual std::int64_t sparse_pairs() const { return -1; }
    /// Whether compensate() only adds g to the memory (through momentum(), where there is
    /// one) and encode() only sends the sparse_pairs() largest magnitudes of t in ascending
    /// index order (error feedback zeroing them in t), flagging NaN and infinity: then the
    /// exchange may encode many such tensors as one (device::TopkBatch).
    virtual bool sends_largest() const { return false; }
    /// Where sends_largest(): the momentum the codec corrects its input with first
    /// (u = factor u + g, then memory += u) and clears where encode() sent (DGC), with its
    /// factor; nullptr where there is none. The tensor is undefined until first used.
    virtual at::Tensor* momentum(float* factor) {
        (void)factor;
        return nullptr;
    }

    /// Whether encode()'s flag also says whether t is finite, so that neither the caller
    /// nor compensate() needs a pass over t to check it: top-k by magnitude always chooses
    /// a NaN or an infinity where t holds one.
    virtual bool finite_in_encode() const { return false; }
    /// Error feedback: memory += g, or memory = g when memory_zero (1-D float32 views of
    /// numel() values). Returns a 0-dim bool tensor: whether the result is finite; an
    /// undefined tensor where finite_in_encode() (encode() tells).
    virtual at::Tensor compensate(const at::Tensor& g, at::Tensor& memory, bool memory_zero);
    /// Encodes t into `payload`, a 1-D slice of its channel's buffer on t's device (uint8
    /// for the gather channel, float32 for fp32_sum and sparse_sum, float16 for fp16_sum).
    /// With update_error, t becomes t - decode(payload). Returns a 0-dim bool tensor
    /// (false: t held NaN or infinity, or fp16 overflowed); always true when the codec
    /// does not check (checks_finite() and finite_in_encode() false).
    virtual at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t key, at::Tensor& payload) = 0;
    /// Allgather channel: out = aggregate of the W workers' payloads (uint8, payload_bytes()
    /// each). Returns a 0-dim bool tensor: whether every payload was well formed.
    virtual at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out);
    /// Allreduce channels: out = mean from the sum of `world` payloads (a slice like encode's);
    /// with a memory, memory -= out as well.
    virtual void decode_sum(const at::Tensor& sum, int world, at::Tensor& out, at::Tensor* memory);
    /// State beyond the error memory (DGC's momentum), by name; tensors of numel() values.
    virtual std::vector<std::pair<std::string, at::Tensor*>> state() { return {}; }

protected:
    explicit DeviceCodec(std::unique_ptr<TensorCodec> host) : host_(std::move(host)) {}
    std::unique_ptr<TensorCodec> host_;
};

/// The factory a compressor's device section defines.
using DeviceCodecFactory = std::unique_ptr<DeviceCodec> (*)(std::unique_ptr<TensorCodec> host, const Spec& spec,
                                                            const CodecOptions& options);

/// The device codec of any compressor for one tensor of this shape (the host codec's
/// checks apply: UsageError when the level does not fit).
std::unique_ptr<DeviceCodec> make_device_codec(const Spec& spec, const std::vector<std::int64_t>& shape,
                                               const CodecOptions& options);

/// The codec that runs the host codec on a host copy of the tensors: the default of a
/// compressor without a device section.
std::unique_ptr<DeviceCodec> make_staging_codec(std::unique_ptr<TensorCodec> host);

/// Whether a compressor has a device section (otherwise it stages through host memory).
bool has_device_codec(const std::string& compressor);

namespace device {

/// uniform_at(key, begin + i) for i < n, as float32 on `device` (bit-identical to the host's).
at::Tensor uniform(std::uint64_t key, std::int64_t begin, std::int64_t n, const at::Device& device);
/// A 0-dim bool tensor holding `value`.
at::Tensor flag(bool value, const at::Device& device);
/// Which of the toolkit's CUDA kernels run where a build has them: none (the ATen
/// operations, to compare or measure them), the measured ones (the default), or all,
/// those not yet measured on a GPU included.
enum class CudaKernels { none, measured, all };
/// ACC_CUDA_KERNELS's value as a choice: "0" none, "all" all, anything else (unset
/// included) the measured ones.
CudaKernels cuda_kernels_from(const char* value);
/// The process's choice: what set_cuda_kernels set, else ACC_CUDA_KERNELS as it was at
/// the first call (read once: CUDA's, NCCL's and the profiler's threads read the
/// environment, so a choice must not be made by changing it).
CudaKernels cuda_kernels();
/// Sets the choice for the whole process from now on (the GPU tests compare paths so).
void set_cuda_kernels(CudaKernels choice);
/// Whether the CUDA kernels of compress/cuda/encoders.hpp encode x: built with them
/// (ACC_CUDA_KERNELS), x on a CUDA device, and cuda_kernels() not none.
bool cuda_kernels_for(const at::Tensor& x);
/// Whether the CUDA kernels not yet measured on a GPU (top-k's selection, PowerSGD's
/// rounds) run on `device`: a CUDA device, a build with the kernels, cuda_kernels() all.
bool cuda_unmeasured_kernels_for(const at::Device& device);
/// The architectures the CUDA kernels were built for ("75-real,80-real,..."; empty in a
/// build without them).
std::string cuda_kernels_built();
/// The current CUDA stream of x's device, as the kernels take it (nullptr without them).
void* cuda_stream_of(const at::Tensor& x);
/// A CUDA kernel's flag: a 0-dim bool tensor on x's device, true until the kernel that
/// `launch(flag, stream)` queues on x's current stream writes false (no ATen operation
/// around the kernel).
at::Tensor kernel_flag(const at::Tensor& x, const std::function<void(bool* flag, void* stream)>& launch);
/// |x| < infinity, elementwise (false for NaN): two kernels, where ATen's isfinite() takes four.
at::Tensor finite_mask(const at::Tensor& x);
/// A 0-dim bool tensor: every value of x is finite.
at::Tensor all_finite(const at::Tensor& x);
/// The bytes of x (any dtype, contiguous) as a 1-D uint8 tensor.
at::Tensor bytes_of(const at::Tensor& x);
/// `count` values of `type` stored from byte `offset` of the uint8 tensor `bytes`
/// (a view where aligned, else a copy).
at::Tensor read_as(const at::Tensor& bytes, std::int64_t offset, std::int64_t count, at::ScalarType type);
/// Bytes [offset, offset + count * size of type) of each row of the uint8 matrix `rows`
/// (one payload per row) as a [rows, count] tensor of `type`.
at::Tensor columns_as(const at::Tensor& rows, std::int64_t offset, std::int64_t count, at::ScalarType type);
/// Packs bits (bool, n values) LSB first into 32-bit words' bytes: 4 ceil(n / 32) bytes.
at::Tensor pack_bits(const at::Tensor& bits);
/// The inverse for a batch: packed [W, bytes] -> bool [W, n].
at::Tensor unpack_bits(const at::Tensor& packed, std::int64_t n);

/// Values (n per worker) an allgather decoder expands at most at once: a block of
/// max(1, kDecodeBlockValues / n) workers. Temporaries then stay a few times
/// max(n, kDecodeBlockValues) floats whatever the number of workers, while small tensors
/// still decode many workers per kernel.
inline constexpr std::int64_t kDecodeBlockValues = std::int64_t{1} << 20;
/// Calls f(rows) for consecutive blocks of the payloads in worker order, rows a
/// [workers in the block, payload bytes] uint8 matrix, for a decoder of n values per worker.
void for_worker_blocks(const std::vector<at::Tensor>& payloads, std::int64_t n,
                       const std::function<void(const at::Tensor& rows)>& f);
/// The host decoders' sum over workers: out = v_0, then out += v_w for w = 1, 2, ... in
/// worker order, so that the result equals theirs bit for bit on any device (a sum over
/// a [W, n] tensor would be both W times larger and in another order). `terms` maps a
/// block of payloads (as for for_worker_blocks) to their float32 terms v, [rows, n].
/// No payloads: out = 0.
void sum_over_workers(const std::vector<at::Tensor>& payloads, at::Tensor& out,
                      const std::function<at::Tensor(const at::Tensor& rows)>& terms);
/// QSGD's stochastic rounding of x in units of divisor / levels (`divisor` float32,
/// broadcast against x: a bucket's norm, TernGrad's s) to at most `levels`, signed,
/// element i drawing uniform(key, begin + i): the host's qsgd_bucket_portable, also where
/// levels / divisor overflows and where the divisor is zero (zero codes).
at::Tensor stochastic_codes(const at::Tensor& x, const at::Tensor& divisor, int levels, std::uint64_t key,
                            std::int64_t begin);

// PowerSGD, batched over B matrices of one shape (the exchange's device path).
/// Orthogonalizes the columns of each n x r matrix of m [B, n, r] in place: modified
/// Gram-Schmidt (the host's gram_schmidt, epsilon as there) when gram_schmidt, else QR.
void orthogonalize(at::Tensor& m, bool gram_schmidt, float epsilon);

/// Whether each part of `values` (1-D) is finite, the parts back to back and part k
/// ending at element ends[k] (int64, ascending): a [parts] bool tensor, in a few
/// operations whatever the number of parts.
at::Tensor finite_parts(const at::Tensor& values, const at::Tensor& ends);
/// The same for a bool tensor `mask`: whether each part is all true.
at::Tensor true_parts(const at::Tensor& mask, const at::Tensor& ends);

/// The payloads of many tensors' sparse codecs (DeviceCodec::sparse_pairs) decoded
/// together: about 20 operations and one scatter per worker for all of them, where each
/// tensor alone takes about 25. Each tensor's mean equals its codec's decode() bit for bit
/// (the workers added in worker order).
class SparseBatch {
public:
    struct Part {
        std::int64_t offset = 0;  ///< the payload's first byte in each worker's buffer (a multiple of 4)
        std::int64_t pairs = 0;   ///< k >= 1 value and index pairs
        std::int64_t numel = 0;   ///< the tensor's values
    };
    SparseBatch(const std::vector<Part>& parts, const at::Device& device);
    /// Values of all parts together.
    std::int64_t numel() const { return numel_; }
    /// Each part's values, in order.
    const std::vector<std::int64_t>& sizes() const { return sizes_; }
    /// rows: [W, bytes] uint8, worker w's buffer in row w; means: 1-D float32 of numel()
    /// values on the device, overwritten with the parts' means back to back. Returns a
    /// [parts] bool tensor: whether part i's payloads were well formed (every index inside
    /// its tensor).
    at::Tensor decode(const at::Tensor& rows, at::Tensor& means) const;

private:
    std::vector<std::int64_t> sizes_;
    std::int64_t numel_ = 0, bytes_ = 0;  // bytes_: the end of the last payload
    // Per pair ([K], all parts' pairs back to back): its value's and index's 32-bit word in a
    // worker's buffer, its tensor's size and its tensor's start in `means`; per part, its
    // last pair.
    at::Tensor value_words_, index_words_, limit_, base_, ends_;
};

/// The exact top k of many small tensors' values by magnitude at once, each payload as its
/// sparse codec (DeviceCodec::sends_largest) writes it, among equal magnitudes perhaps
/// another choice: their magnitudes in one [tensors, longest] matrix padded with -1, one
/// topk over its rows. About 15 operations for all of them, where each tensor alone takes
/// about 20. The padding costs (tensors x longest - values) floats, so that tensors of
/// similar sizes make a batch.
class TopkBatch {
public:
    struct Part {
        std::int64_t offset = 0;  ///< the payload's first byte in the channel buffer (a multiple of 4)
        std::int64_t pairs = 0;   ///< k, 1 <= k <= numel
        std::int64_t numel = 0;   ///< the tensor's values
    };
    TopkBatch(const std::vector<Part>& parts, const at::Device& device);
    /// Values of all parts together.
    std::int64_t numel() const { return numel_; }
    /// t: the parts' inputs back to back (1-D float32, numel() values); buffer: the uint8
    /// channel buffer holding every part's payload. With update_error, the values sent
    /// become 0 in t; `sent`, if given, gets their places in t (int64). Returns a [parts]
    /// bool tensor: whether part i's input was finite.
    at::Tensor encode(at::Tensor& t, bool update_error, at::Tensor& buffer, at::Tensor* sent = nullptr) const;

private:
    std::int64_t numel_ = 0, rows_ = 0, longest_ = 0, widest_ = 0, bytes_ = 0;  // widest_: the largest k
    at::Tensor to_;       // [numel_]: each value's place in the padded [rows_, longest_] matrix
    at::Tensor unused_;   // [rows_, widest_] bool: column j >= the row's k
    at::Tensor chosen_;   // [K]: place of each sent pair in [rows_, widest_], rows one after another
    at::Tensor start_;    // [K]: its tensor's first value in t
    at::Tensor value_words_, index_words_;  // [K]: its value's and index's 32-bit word in the buffer
};

}  // namespace device
}  // namespace acc::compress
