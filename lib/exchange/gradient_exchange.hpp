// Gradient exchange: data-parallel averaging of a set of parameter tensors, each
// compressed at its own level (compressor spec), through acc::comm::Collectives.
//
// One step, on every worker:
//   start(grads)   error feedback, encoding, and the first collectives launched
//                  (asynchronous allreduces: uncompressed tensors in one flat
//                  buffer, fp16 in one, randomk values in one, all PowerSGD P
//                  matrices in one);
//   finish()       the allgather of every allgather compressor's payload (one
//                  collective), PowerSGD's second round (all Q matrices in one
//                  allreduce), and decoding: each gradient tensor is replaced, in
//                  place, by the aggregate of the W workers, identical on all workers.
// step(grads) does both. Between start() and finish() the caller may compute or start
// another exchange (e.g. one per bucket); the gradients must stay untouched.
//
// Every worker must construct its exchange with the same tensors and levels and call
// the same methods in the same order (levels are checked across workers). Gradients
// are float32. On CPU they take the host path (tensors that are not contiguous are
// staged); on a GPU the device path: the device codecs (compress/device_codec.hpp), with
// error memories, Q, DGC's momentum and the flat buffers on that device, handed to the
// collectives there. All gradients of a step must be on one device; a step on another
// device than the last moves the state along.
#pragma once

#include "comm/collectives.hpp"
#include "compress/codecs.hpp"
#include "compress/options.hpp"
#include "compress/shapes.hpp"
#include "compress/spec.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::exchange {

/// Which PowerSGD the `powersgd` level runs (compress/compressors/powersgd_options.hpp).
using compress::PowerSgdVariant;

/// What set_levels() keeps of a tensor whose level changes.
enum class LevelChange {
    /// A schedule's change (Accordion, --schedule, the hook's set_epoch): the new level
    /// starts fresh compressor state (a new PowerSGD Q) and keeps the error memory; DGC
    /// keeps its momentum when only its fraction changes. Workers' levels are checked to agree.
    restart,
    /// GraVAC's change within one compressor family, as often as every step: the error
    /// memory, DGC's momentum and PowerSGD's warm-start Q are kept. A lower PowerSGD rank
    /// takes Q's first columns and keeps the others for later; a higher one draws the
    /// columns missing (every worker the same). At a level that sends values whole
    /// (`none`, GraVAC's dense steps) DGC's momentum still corrects what is sent, and the
    /// memory is sent whole. Not checked across workers: the caller decides from values
    /// every worker shares. state() then writes Q with every column kept.
    within_family,
};

struct ExchangeOptions {
    /// Each compressor's own options (PowerSGD's variant, orthogonalization, warm start and
    /// RandomState; Top-k's selection; DGC's momentum and warm-up), declared in its file.
    compress::CompressorOptions compressors;
    /// Seeds PowerSGD's RandomState (the hook's random_seed) and every other random stream.
    std::uint32_t seed = 0;
    /// The first tensor's place among the random streams (tensor i draws stream first_stream + i).
    /// Exchanges over the buckets of one model give each bucket the place of its first tensor
    /// among all of them, so that a tensor draws the same numbers however the model is split.
    std::uint64_t first_stream = 0;
    /// Error feedback for the compressors that have it (powersgd, topk, randomk, dgc, efsignsgd).
    bool error_feedback = true;
    /// Refuse gradients holding NaN or infinity (acc::Error naming the tensor).
    bool check_finite = true;
    /// Run the device path (ATen operations on the gradients' device, state kept there)
    /// on CPU gradients too. Gradients on a GPU always take it; CPU gradients otherwise
    /// take the host path (raw float loops). The tests compare the two paths this way.
    bool device_path_on_cpu = false;
    /// On a GPU, make StepStats' encode and decode seconds hold the device's work rather
    /// than the time to queue it (compress-bench): CUDA events around each part, read at
    /// the step's end, or with LibTorch 1.13 a synchronisation before each clock reading
    /// (DeviceTimer). Training leaves it off: it would wait for the device every step.
    bool time_device_work = false;
    /// When the device path reads its flags (NaN or infinity in a gradient, a failed
    /// encode, a malformed payload). Reading one waits for the device, so on a GPU
    /// the flags are copied without waiting and read when the next step starts (or at
    /// settle()): no step waits for the GPU, and such a failure is reported one step
    /// late, after the step was sent, naming the step it happened in. `immediate`
    /// reads them before the collectives start, as the host path does.
    enum class CheckTiming { immediate, deferred_on_gpu, deferred };
    CheckTiming check_timing = CheckTiming::deferred_on_gpu;
    LevelChange level_change = LevelChange::restart;
};

/// What one worker did in one step (or, summed, in many).
struct StepStats {
    std::int64_t bytes = 0;        ///< bytes handed to collectives (docs/metrics.md, "Data sent")
    std::int64_t collectives = 0;  ///< collective calls
    double encode_seconds = 0;     ///< error feedback and encoding (PowerSGD: both rounds' products)
    double communication_seconds = 0;  ///< inside collectives, waiting included
    double decode_seconds = 0;     ///< aggregating received payloads into the gradients
    double floats() const { return static_cast<double>(bytes) / 4.0; }
    StepStats& operator+=(const StepStats& other);
};

/// One collective of a step: its kind and the bytes each worker hands in.
struct PlannedCollective {
    compress::Collective kind = compress::Collective::allreduce;
    std::int64_t bytes = 0;
};

/// DGC's warmed-up keep fraction in `epoch` (see compress::DgcOptions::warmup_epochs).
double dgc_warmup_fraction(double fraction, std::int64_t epoch, std::int64_t warmup_epochs);

class GradientExchange {
public:
    /// Throws UsageError if the levels do not fit the tensors, acc::Error if workers disagree.
    GradientExchange(std::vector<compress::TensorInfo> tensors, std::vector<compress::Spec> levels, comm::Collectives& comm,
                     ExchangeOptions options = {});
    ~GradientExchange();
    GradientExchange(const GradientExchange&) = delete;
    GradientExchange& operator=(const GradientExchange&) = delete;

    size_t size() const;
    const std::vector<compress::TensorInfo>& tensors() const;
    const std::vector<compress::Spec>& levels() const;
    /// The level in force this epoch (DGC's warm-up applied).
    compress::Spec effective_level(size_t tensor) const;

    /// New levels (e.g. each epoch, from a schedule). What a tensor whose level changes
    /// keeps is ExchangeOptions::level_change's: by default it starts fresh compressor
    /// state (a new PowerSGD Q) but keeps its error memory, as Accordion does; a level
    /// without error feedback sends the memory once and then keeps none. DGC keeps its
    /// momentum across a change of its fraction. Collective with LevelChange::restart:
    /// checks that every worker passes the same levels.
    void set_levels(const std::vector<compress::Spec>& levels);

    /// This worker's squared norms, summed over `tensors` (indices), of what the next
    /// step would compress (the gradient plus the error memory, DGC's momentum applied)
    /// and of what each level set in `level_sets` (a level per tensor of the exchange)
    /// would make of it on this worker alone: {input, level set 0, level set 1, ...}.
    /// A level's approximation is the one the next step at that level sends (the same
    /// random subset, PowerSGD's P and Q from the same warm-start Q), so GraVAC's gains
    /// describe what it sends. Changes no state, but may draw PowerSGD Q columns a level
    /// needs (as set_levels() would, identically on every worker). Not collective.
    /// Levels must keep an error memory or send values whole (UsageError otherwise).
    std::vector<double> squared_norms(const std::vector<at::Tensor>& grads, const std::vector<size_t>& tensors,
                                      const std::vector<std::vector<compress::Spec>>& level_sets);
    /// The epoch about to run (for DGC's warm-up); 0 until called.
    void set_epoch(std::int64_t epoch);

    void start(const std::vector<at::Tensor>& grads);
    void finish();
    void step(const std::vector<at::Tensor>& grads);
    bool in_flight() const;
    /// Reads the flags of steps whose check was deferred (ExchangeOptions::check_timing),
    /// waiting for the device if they are not there yet; throws acc::Error as the step
    /// would have. set_levels(), load_state() and the next start() call it too.
    void settle();

    /// The collectives a step runs with the current levels, in the order it starts them.
    std::vector<PlannedCollective> planned_collectives() const;
    /// Bytes per tensor the last step sent (each equals wire_bytes of its effective level).
    const std::vector<std::int64_t>& last_tensor_bytes() const;
    const StepStats& last_step() const;
    const StepStats& total() const;
    std::int64_t steps() const;

    /// Everything a checkpoint must keep, as named tensors: "<tensor>/error" (error
    /// memory), "<tensor>/powersgd_q" (warm-start Q), "<tensor>/dgc_momentum",
    /// "exchange/powersgd_rng" (RandomState words and position), "exchange/step".
    std::vector<std::pair<std::string, at::Tensor>> state() const;
    /// Restores state(); entries absent start empty. Throws acc::Error naming the entry
    /// that does not fit (unknown name, wrong shape, or a Q for another rank).
    void load_state(const std::vector<std::pair<std::string, at::Tensor>>& state);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace acc::exchange
