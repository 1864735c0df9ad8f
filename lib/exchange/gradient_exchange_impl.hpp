// GradientExchange's inside, private to lib/exchange, in parts:
//   gradient_exchange.cpp           levels, layout of the flat buffers, state, the public API
//   gradient_exchange_host.cpp      a step on host memory (raw float loops, compress/codecs.hpp)
//   gradient_exchange_device.cpp    a step on the gradients' device (ATen ops, compress/device_codec.hpp)
//   gradient_exchange_powersgd.cpp  PowerSGD's two rounds on the host, and its Q matrices
//   gradient_exchange_sparse.cpp    the device path's batches of top-k and DGC tensors
//   gradient_exchange_family.cpp    level changes within a family, and the levels' norms (GraVAC)
#pragma once

#include "compress/device_codec.hpp"
#include "comm/device_timer.hpp"
#include "compress/kernels.hpp"
#include "compress/low_rank_kernels.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/powersgd_state.hpp"

#include <ATen/core/grad_mode.h>
#include <c10/core/Event.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace acc::exchange {

// The compressors' codecs and loops, which every part of the exchange drives.
namespace k = compress::kernels;
using compress::Channel;
using compress::CodecOptions;
using compress::Collective;
using compress::DeviceCodec;
using comm::DeviceTimer;
using compress::LowRank;
using compress::Spec;
using compress::TensorCodec;
using compress::TensorInfo;
using compress::kernels::kSharedStream;

// The channels with a flat buffer of their own, in the order a step launches them:
// the summed ones (before PowerSGD's P), then the allgather. PowerSGD's low_rank channel
// has its P and Q buffers instead.
inline constexpr std::array<Channel, 3> kSumChannels = {Channel::fp32_sum, Channel::fp16_sum, Channel::sparse_sum};
inline constexpr size_t kChannels = 5;

at::ScalarType channel_dtype(Channel c);

// A saved state entry that does not fit: acc::Error naming it.
[[noreturn]] void state_error(const std::string& name, const std::string& problem);
// A saved entry as `expected` float32 values on the host, flat; state_error otherwise.
at::Tensor checked_floats(const std::string& name, const at::Tensor& t, std::int64_t expected);
std::vector<float> to_vector(const at::Tensor& host_floats);

struct Slot {
    TensorInfo info;
    std::int64_t n = 0;
    Spec level, effective;
    bool error_feedback = false;   // keeps an error memory at this level
    std::vector<float> memory;     // host path: allocated on first use
    bool memory_used = false;      // memory may hold values that still have to be sent
    std::unique_ptr<TensorCodec> codec;  // the effective level's, for this tensor
    // PowerSGD: the matrix view, and its state (the warm-start Q).
    std::int64_t rows = 0, cols = 0;
    int rank = 0;
    int run = -1;                  // device path: its DenseRun, if any
    int sparse_batch = -1;         // device path: its SparseDecodeBatch, if any
    int topk_batch = -1;           // device path: its TopkEncodeBatch, if any
    PowerSgdState powersgd;
    // LevelChange::within_family: the family's codecs while the level sends values whole
    // (DGC's momentum, kept and applied on dense steps).
    std::unique_ptr<TensorCodec> compensator;
    std::unique_ptr<DeviceCodec> device_compensator;
    // The codecs holding the state beyond the memory: the compensators where there are.
    TensorCodec* state_codec() const { return compensator ? compensator.get() : codec.get(); }
    DeviceCodec* state_device_codec() const { return device_compensator ? device_compensator.get() : device_codec.get(); }
    // squared_norms(): codecs of the levels measured, by level text.
    std::map<std::string, std::unique_ptr<TensorCodec>> measure_codecs;
    std::map<std::string, std::unique_ptr<DeviceCodec>> measure_device_codecs;
    // Place in its channel's flat buffer (bytes), and in P and Q (elements).
    std::int64_t offset = 0, p_offset = 0, q_offset = 0;
    std::int64_t bytes = 0;
    // During a host step.
    float* grad = nullptr;  // read at start, overwritten with the aggregate at finish
    float* t = nullptr;     // the compensated input: memory, or grad itself
    bool t_in_memory = false;
    at::Tensor staged;      // a copy of a gradient that is not contiguous (host path: on the host)
    at::Tensor original;
    // The device path: its codec and state on the gradients' device.
    std::unique_ptr<DeviceCodec> device_codec;
    at::Tensor device_memory;  // n floats (a view into its PowerSGD group's memory)
    at::Tensor device_grad;    // flat view of the gradient (or of `staged`)
    at::Tensor device_t;       // the compensated input
    at::Tensor input_finite, encode_finite;  // 0-dim bool flags of this step
};

// Device path: consecutive PowerSGD tensors of one matrix shape and rank, whose P and Q
// are contiguous in the P and Q buffers, multiplied in one batched product.
struct PowerGroup {
    std::vector<size_t> slots;
    std::int64_t rows = 0, cols = 0;
    int rank = 0;
    std::int64_t p_offset = 0, q_offset = 0;  // elements
    at::Tensor p_view, q_view;  // [B, rows, rank], [B, cols, rank]: the group's part of P and Q
    at::Tensor q_warm;  // [B, cols, rank]: the group's part of the warm-start Q (the slots' powersgd.device_q)
    at::Tensor memory;  // [B, rows, cols]: the slots' error memories (a view of powersgd_memory)
    at::Tensor m;       // [B, rows, cols]: this step's compensated input
};

// Device path: matrices of one rank from several PowerSGD groups, back to back in a flat
// buffer (P or Q), orthogonalized as one zero-padded batch [count, longest, rank]: a few
// kernels per round instead of a few per group.
struct PaddedBatch {
    int rank = 0;
    at::Tensor padded;  // [count, longest, rank]; zero where no matrix reaches
    at::Tensor to;      // [elements]: where in `padded` (flat) each element of the batch goes
    at::Tensor from;    // [elements]: the elements of the flat buffer; undefined: all, in order
};

// Device path: small tensors whose payload is their values (DeviceCodec::sends_values),
// back to back in the fp32 buffer, handled as one: one copy in (or one addition to their
// memories), one finiteness check with a flag per tensor, one division and one copy out
// per step, where each tensor alone would take a few kernels.
struct DenseRun {
    std::vector<size_t> slots;
    std::int64_t offset = 0, n = 0;    // elements of the fp32 buffer
    bool error_feedback = false;
    std::vector<std::int64_t> sizes;   // the slots' values
    at::Tensor ends;                   // [slots] int64: each slot's last element in the run
    at::Tensor memory;                 // [n]: the slots' error memories (with error feedback)
    bool active = false;               // this step: the run, else its slots one by one
};

// Device path: moves a slot's state into its part of a batch's tensor (a run's, a PowerSGD
// group's, a top-k batch's): `part` takes what `state` holds (where it holds values), and
// `state` becomes that view.
inline void adopt(at::Tensor& state, bool holds_values, const at::Tensor& part) {
    if (state.defined() && holds_values) part.copy_(state);
    state = part;
}

// Device path: slots of the allgather whose payloads are sparse pairs (top-k, DGC), decoded
// as one: about 20 operations and a scatter per worker for all of them, instead of about 25
// per slot.
struct SparseDecodeBatch {
    std::vector<size_t> slots;
    compress::device::SparseBatch batch;
};

// Device path: small top-k or DGC slots of similar sizes (DeviceCodec::sends_largest)
// encoded as one: their error memories (and DGC's momenta) one tensor each, one
// multi-tensor addition of the gradients and about 15 operations for the selection and
// the payloads, instead of about 20 per slot.
struct TopkEncodeBatch {
    std::vector<size_t> slots;
    compress::device::TopkBatch batch;
    at::Tensor memory;    // the slots' error memories back to back, in `slots` order
    at::Tensor momentum;  // DGC: the slots' momenta the same way (undefined for top-k)
    std::vector<at::Tensor> momenta;  // DGC: each slot's part of `momentum`
    float momentum_factor = 0;
};

// Device path: a flag of a step, kept to be read later (ExchangeOptions::check_timing);
// a flag of several slots holds one value per slot.
struct DeviceCheck {
    enum class Kind { input_finite, encode_finite, well_formed };
    std::vector<size_t> slots;
    Kind kind = Kind::input_finite;
    at::Tensor flag;  // bool on the device: 0-dim for one slot, else one per slot
};

// A step's flags on their way to the host: their AND, copied without waiting, and on a
// GPU an event recorded after the copy (no event on the CPU, where the copy is done).
struct PendingChecks {
    std::int64_t step = 0;
    std::vector<DeviceCheck> checks;
    at::Tensor all_ok;
    std::unique_ptr<c10::Event> copied;
};

// squared_norms(): PowerSGD's local approximation at `rank` as the Gram matrices of its
// factors, P^T P and Q'^T Q' (rank x rank, double).
struct LowRankGrams {
    int rank = 0;
    at::Tensor pp, qq;
};

struct GradientExchange::Impl {
    using Clock = std::chrono::steady_clock;

    comm::Collectives& comm;
    ExchangeOptions options;
    CodecOptions codec_options;
    std::vector<TensorInfo> tensors;
    std::vector<Spec> levels;
    std::vector<Slot> slots;
    std::int64_t epoch = 0;
    std::int64_t step = 0;
    std::shared_ptr<k::NumpyRandomState> powersgd_rng;  // options.compressors.powersgd.rng, or its own
    bool layout_dirty = true;
    // Which path runs the steps; chosen by the first step's gradients (or the option).
    bool device_path = false;
    at::Device device{at::kCPU};

    // Flat buffers of one step (by channel; P and Q apart) and the order of PowerSGD's
    // matrices in P and Q.
    std::array<at::Tensor, kChannels> buffer;
    at::Tensor p, q;
    std::vector<size_t> powersgd_order;
    std::vector<PowerGroup> groups;  // device path
    at::Tensor q_state;              // device path: the warm-start Q of every matrix, in Q's layout
    // Device path, with error feedback: every group's memory in one tensor, and the slots
    // in its order with the last element of each (for one finiteness pass over all).
    at::Tensor powersgd_memory, powersgd_memory_ends;
    std::vector<size_t> powersgd_memory_slots;
    std::vector<PaddedBatch> p_batches, q_batches;  // device path: P's and Q's orthogonalization
    // Device path on a GPU: PowerSGD's rounds by the toolkit's CUDA kernels, where every
    // group has error feedback and a rank they take (null otherwise), whether this step
    // uses them (ACC_CUDA_KERNELS=all, read once per step), and each slot's size in M.
    std::unique_ptr<compress::device::LowRankKernels> powersgd_kernels;
    bool powersgd_kernels_now = false;
    std::vector<std::int64_t> powersgd_memory_sizes;
    std::vector<DenseRun> runs;      // device path
    std::vector<SparseDecodeBatch> sparse_batches;  // device path
    std::vector<TopkEncodeBatch> topk_batches;      // device path
    at::Tensor sparse_means;         // device path: room for the largest sparse batch's means
    at::Tensor world_divisor;        // device path: W as a 0-dim float on the device (exact division)
    std::array<std::unique_ptr<comm::Work>, kChannels> sum_work;
    std::unique_ptr<comm::Work> p_work, q_work;
    bool in_flight = false;
    std::vector<float> qt;  // scratch: one Q transposed
    // Host path: the fp32 sum channel's allreduce runs on the gradients themselves when
    // they lie back to back in one buffer (a DDP bucket) and nothing is added to them.
    at::Tensor sum_in_place;

    StepStats current, last, total;
    DeviceTimer timer;  // the device path's encode and decode times
    std::vector<std::int64_t> tensor_bytes;
    std::vector<DeviceCheck> step_checks;  // the device path's flags of the current step
    std::vector<DeviceCheck> step_batched_checks;  // flags of several slots each (runs, PowerSGD)
    std::vector<PendingChecks> pending;    // earlier steps' flags not read yet

    Impl(comm::Collectives& c, ExchangeOptions o);

    at::Tensor& channel_buffer(Channel c) { return buffer[static_cast<size_t>(c)]; }
    int world() const { return comm.world_size(); }
    std::uint64_t key_of(size_t i, const TensorCodec& codec) const;

    // exchange.cpp: levels, layout, paths.
    Spec effective_of(const Spec& level) const;
    void configure(Slot& s, bool keep_codec_state);
    void apply_level(size_t i, const Spec& level, bool initial);
    void refresh_effective();
    void check_agreement();
    void layout();
    void group_powersgd();
    void choose_path(const std::vector<at::Tensor>& grads);
    std::vector<std::pair<std::string, at::Tensor>> state() const;
    void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);
    // load_state's parts: every slot's memory, Q and codec state emptied; the exchange's
    // own entries ("exchange/..."; false for any other); a slot's error memory, its
    // PowerSGD Q (gradient_exchange_powersgd.cpp) and its codec's state.
    void clear_state();
    // Float32 on the exchange's device: where the device path keeps loaded state.
    at::TensorOptions state_options() const { return at::TensorOptions().dtype(at::kFloat).device(device); }
    bool load_own_entry(const std::string& name, const at::Tensor& tensor);
    void load_memory(Slot& s, const std::string& name, const at::Tensor& tensor);
    void load_powersgd_q(Slot& s, const std::string& name, const at::Tensor& tensor);
    void load_codec_state(Slot& s, const std::string& what, const std::string& name, const at::Tensor& tensor);
    [[noreturn]] void not_finite(const Slot& s, const std::string& detail = "") const;
    [[noreturn]] void malformed(const Slot& s) const;
    [[noreturn]] void not_finite_at(const Slot& s, std::int64_t at_step, const std::string& detail) const;
    [[noreturn]] void malformed_at(const Slot& s, std::int64_t at_step) const;
    void check_gradients(const std::vector<at::Tensor>& grads) const;
    std::unique_ptr<comm::Work> launch(at::Tensor& buffer);
    void wait(std::unique_ptr<comm::Work>& work);
    std::vector<at::Tensor> gather_payloads();
    void end_step();

    // exchange_host.cpp
    void bind(const std::vector<at::Tensor>& grads);
    bool sums_in_place() const;
    float* memory_of(Slot& s);
    bool compensate(Slot& s);
    void settle_memory(Slot& s);
    void encode_slot(size_t i, Slot& s);
    void start_host(const std::vector<at::Tensor>& grads);
    void finish_host();
    void decode_gather_host();
    void decode_dense(int W);

    // exchange_powersgd.cpp
    void orthogonalize(float* m, std::int64_t n, int r) const;
    bool gram_schmidt_at(int r) const;
    void prepare_qs();
    void transpose_into(const float* src, std::int64_t cols, int r);
    void powersgd_first_round();
    void powersgd_second_round();
    void powersgd_decode(int W);

    // exchange_device.cpp
    void bind_device(const std::vector<at::Tensor>& grads);
    at::Tensor& device_memory_of(Slot& s);
    void layout_runs_device();
    void compensate_device(size_t i, Slot& s);
    void encode_run(DenseRun& r);
    void decode_run(DenseRun& r);
    void settle_memory_device(Slot& s);
    void start_device(const std::vector<at::Tensor>& grads);
    void check_flags_device();
    bool deferring_checks() const;
    void check_now(const std::vector<DeviceCheck>& checks, std::int64_t at_step);
    void defer_checks();
    /// Reads the deferred flags, oldest step first. `all` false (a step's start): a
    /// step whose flags the GPU has not copied yet stays pending, unless a later one
    /// is pending too, so the host never waits for the step just before.
    void settle_checks(bool all = true);
    void finish_device();
    void decode_gather_device();
    void decode_dense_device(int W);
    void layout_powersgd_device();
    void layout_powersgd_kernels();
    void orthogonalize_device(std::vector<PaddedBatch>& batches, at::Tensor& flat);
    void powersgd_first_round_device();
    void powersgd_second_round_device();
    void powersgd_decode_device();
    at::Tensor slice_of(Slot& s);

    // exchange_sparse.cpp
    void layout_sparse_device();
    void decode_sparse_batch(const SparseDecodeBatch& b, const at::Tensor& rows, std::vector<DeviceCheck>& checks);
    void layout_topk_device();
    void encode_topk_batch(TopkEncodeBatch& b);

    // exchange_family.cpp
    void change_within_family(size_t i, const Spec& level);
    at::Tensor current_q(const Slot& s) const;
    at::Tensor q_columns(Slot& s, int r, std::int64_t cols);
    void orthogonalize_tensor(at::Tensor& m, int r) const;
    at::Tensor compensated_copy(Slot& s, const at::Tensor& grad);
    LowRankGrams low_rank_grams(Slot& s, const LowRank& low, int r, const at::Tensor& t);
    double level_squared_norm(size_t i, Slot& s, const Spec& level, const at::Tensor& t, const LowRankGrams& grams);
    TensorCodec& measure_codec(Slot& s, const Spec& level);
    DeviceCodec& measure_device_codec(Slot& s, const Spec& level);
};

}  // namespace acc::exchange
