// The training loop, built to be shared: grad-dump runs it on one process,
// train-dist on several. One optimizer step is
//
//   for each micro-batch: forward, backward (gradients accumulate); before the
//     last one's backward the exchange may arm hooks that start communicating
//     gradients as the backward pass produces them (not with clipping)
//   clip the local gradient (optional)
//   recorder: add the raw local gradient to the epoch's sum
//   exchange: replace each gradient with an aggregated one (identity on one process)
//   SGD: weight decay, momentum (Nesterov), step with the epoch's learning rate
#pragma once

#include "io/atomic.hpp"
#include "io/header.hpp"
#include "io/parameters.hpp"
#include "train/config.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/sampling.hpp"

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace acc::train {

/// Named tensors, e.g. a component's state in a checkpoint.
using TensorMap = std::map<std::string, torch::Tensor>;

/// A 64-bit FNV-1a hash of the tensors' bytes, in order: equal on two ranks
/// exactly when they hold bit-identical values (barring collisions).
std::uint64_t checksum(const std::vector<torch::Tensor>& tensors);

/// Where a step is.
struct StepInfo {
    std::int64_t epoch = 0;
    std::int64_t step = 0;         ///< step within the epoch, from 0
    std::int64_t global_step = 0;  ///< steps since the start of training, from 0
    double lr = 0;
    std::int64_t samples = 0;  ///< this rank's samples in the step (an epoch's last batch may be short); 0: not known
    /// When the step began, before its batch was read; the clock's epoch: not known.
    std::chrono::steady_clock::time_point started{};
};

/// The hook between backward and the optimizer step that makes the ranks'
/// gradients one: a data-parallel run aggregates them here (allreduce,
/// compression, error feedback). Not exchange::GradientExchange, which such a
/// hook may use to do it.
class GradientSync {
public:
    virtual ~GradientSync() = default;
    /// Called before the backward pass of a step's last micro-batch, unless the
    /// gradient is clipped (clipping needs every gradient before any is sent). An
    /// exchange that overlaps communication with the backward pass starts here;
    /// `accumulated`: earlier micro-batches already left gradients in .grad.
    /// exchange() is called after the backward pass either way.
    virtual void before_backward(const StepInfo& /*step*/, bool /*accumulated*/) {}
    /// `gradients[i]` is parameter i's local gradient; replace or modify each in place.
    virtual void exchange(std::vector<torch::Tensor>& gradients, const StepInfo& step) = 0;
    /// Called after an epoch's last step: throws what checks the exchange deferred
    /// found (a GPU's NaN flags are read a step late, so that no step waits for it).
    virtual void settle() {}
};

/// Sums each parameter's raw local gradient over an epoch's steps: one
/// parameter-sized buffer and one add per step. Optionally keeps each step's
/// per-parameter norms too.
class GradientRecorder {
public:
    GradientRecorder(const std::vector<torch::Tensor>& parameters, bool step_norms);
    /// Zeroes the sums (at the start of an epoch).
    void reset();
    void add(const std::vector<torch::Tensor>& gradients);
    /// Per parameter, the L2 norm of the sum (computed in double precision).
    std::vector<double> norms() const;
    /// The same, throwing acc::Error ("training diverged: ...", naming the parameter
    /// and `epoch`) when one is NaN or infinite.
    std::vector<double> finite_norms(const std::vector<io::Parameter>& parameters, std::int64_t epoch) const;
    /// The sums, one tensor per parameter.
    const std::vector<torch::Tensor>& sums() const { return sums_; }
    /// Norms of the last step's gradients (empty unless step_norms).
    const std::vector<double>& last_step_norms() const { return last_step_; }
    bool keeps_step_norms() const { return step_norms_; }

private:
    std::vector<torch::Tensor> sums_;
    bool step_norms_;
    std::vector<double> last_step_;
};

/// SGD as PyTorch's torch.optim.SGD (dampening 0): g += wd * p; buf = m * buf + g
/// (buf = g at the first step); g = g + m * buf (Nesterov) or buf; p -= lr * g.
/// A gradient that already carries momentum (DGC's momentum correction) gets
/// momentum on its weight-decay term only, as DGC's optimizer does:
/// d = wd * p; buf = m * buf + d; g = g + (d + m * buf (Nesterov) or buf).
class Sgd {
public:
    Sgd(std::vector<torch::Tensor> parameters, OptimizerConfig config);
    void step(const std::vector<torch::Tensor>& gradients, double lr);
    /// Marks which parameters' gradients arrive with momentum applied (all false at first).
    void set_momentum_in_gradient(std::vector<bool> flags);
    const std::vector<bool>& momentum_in_gradient() const { return momentum_in_gradient_; }
    /// Momentum buffers, one per parameter (undefined before the first step).
    std::vector<torch::Tensor>& momentum() { return momentum_; }
    const std::vector<torch::Tensor>& momentum() const { return momentum_; }

private:
    std::vector<torch::Tensor> parameters_;
    OptimizerConfig config_;
    std::vector<torch::Tensor> momentum_;
    std::vector<bool> momentum_in_gradient_;
};

/// Results of one epoch of training, as the recording rank saw it.
struct EpochResult {
    double loss = 0;      ///< mean training loss per sample
    double accuracy = 0;  ///< fraction of samples classified right (next token for text)
    std::int64_t steps = 0;
    std::int64_t samples = 0;
    double seconds = 0;  ///< wall time
};

struct EvalResult {
    double loss = 0;
    double accuracy = 0;
    std::int64_t samples = 0;
};

/// What a checkpoint says about the run, besides tensors.
struct CheckpointInfo {
    std::int64_t epoch = 0;  ///< completed epochs: training continues with this epoch
    std::int64_t global_step = 0;
    std::string model;
    std::string dataset;
    std::int64_t batch_size = 0;
    std::int64_t world_size = 1;
    std::uint64_t seed = 0;
    io::Provenance provenance;  ///< the program that writes the checkpoint
    /// Read from a file of format 1.1 or later, whose tensors all carry checksums
    /// and whose /extra/run/epoch_steps its reader must cross-check.
    bool checksummed = false;
};

inline constexpr const char* kCheckpointFormat = "accordion.checkpoint";
/// 1.1: every tensor with a Fletcher-32 checksum; /extra/run/epoch_steps.
inline constexpr int kCheckpointMinor = 1;

/// Called for every step, in order, with its loss (mean over the step's samples)
/// and sample count: on the CPU as the step ends; on a GPU in batches, at most half
/// a second after the step and at the latest at the end of the epoch (as the step
/// ends when a recorder keeps per-step norms).
using StepCallback = std::function<void(const StepInfo&, double loss, std::int64_t samples)>;

/// A window of training steps (--trace): steps [first, first + count) of the next
/// epoch trained, or its last `count` steps where it is shorter, run between start()
/// and stop(). Every step is a trace range "step" (trace::range), the window a range
/// "epoch E, steps A to B", the step's parts ranges of their own (data, forward and
/// backward, gradient exchange, optimizer).
struct StepWindow {
    std::int64_t first = 10;
    std::int64_t count = 10;
    std::function<void()> start;
    std::function<void(std::int64_t epoch, std::int64_t first, std::int64_t last)> stop;  ///< steps [first, last)
};

struct TrainerOptions {
    std::int64_t batch_size = 128;
    std::int64_t micro_batch_size = 0;  ///< 0: the whole batch at once
    OptimizerConfig optimizer;
    double clip_norm = 0;
    std::uint64_t seed = 42;
    torch::Device device = torch::kCPU;
};

/// The loop's options from a run's configuration.
TrainerOptions trainer_options(const TrainConfig& config);

/// Seeds LibTorch's random generators for work on `device`: the CPU's alone for
/// the CPU (torch::manual_seed would ask CUDA for its devices, which on a GPU
/// machine costs start-up time and warns when CUDA cannot start), the CPU's and
/// CUDA's for a GPU.
void seed_generators(std::uint64_t seed, const torch::Device& device);

class Trainer {
public:
    Trainer(std::shared_ptr<Model> model, const Dataset& data, TrainerOptions options, Shard shard = {});

    Model& model() { return *model_; }
    const std::vector<io::Parameter>& parameters() const { return description_; }
    const std::vector<torch::Tensor>& parameter_tensors() const { return parameters_; }
    Shard shard() const { return shard_; }
    std::int64_t global_step() const { return global_step_; }

    /// The exchange between backward and the optimizer step; nullptr: identity.
    void set_exchange(GradientSync* exchange) { exchange_ = exchange; }
    /// The recorder that sees every step's raw local gradient; nullptr: none.
    void set_recorder(GradientRecorder* recorder) { recorder_ = recorder; }
    /// Runs the next epoch's window of steps between its start() and stop() (once).
    void watch_steps(StepWindow window) { window_ = std::move(window); }

    Sgd& optimizer() { return sgd_; }
    std::int64_t batch_size() const { return options_.batch_size; }
    /// Changes the batch size per rank from the next epoch on (a batch schedule);
    /// throws UsageError if the training split then gives some rank no batch.
    void set_batch_size(std::int64_t batch_size);

    /// Steps one epoch takes on this rank.
    std::int64_t steps_in_epoch(std::int64_t epoch) const;
    /// Trains one epoch at learning rate `lr` (the caller applies schedule and
    /// scale). Throws acc::Error if the loss becomes NaN or infinite.
    EpochResult train_epoch(std::int64_t epoch, double lr, const StepCallback& on_step = {});
    /// Loss and accuracy on the whole test split; with a shard of several ranks, on
    /// this rank's part of it (the rank-th of world_size runs of consecutive batches).
    EvalResult evaluate(Shard shard = {});

    /// Writes model, buffers, optimizer state and `extra` tensors (plus the
    /// exchange's state under "exchange/") to `target`'s temporary file, whole and
    /// closed; the caller commits it, so that it can put it in place together with
    /// what else the epoch writes.
    void write_checkpoint(io::AtomicPath& target, const CheckpointInfo& info, const TensorMap& extra = {}) const;
    /// Restores what save_checkpoint wrote; checks that the parameters match.
    /// Returns the info and fills `extra` with the other tensors.
    CheckpointInfo load_checkpoint(const std::string& path, TensorMap* extra = nullptr);
    /// The same from a checkpoint file held in memory (`bytes`, named `path` in messages).
    CheckpointInfo load_checkpoint_image(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                         TensorMap* extra = nullptr);

private:
    CheckpointInfo load_checkpoint_from(const io::H5File& file, TensorMap* extra);
    void check_batches(std::int64_t batch_size) const;
    torch::Tensor forward_backward(const Batch& batch, const StepInfo& info, torch::Tensor& correct);
    void step_gradients(std::vector<torch::Tensor>& gradients) const;

    std::shared_ptr<Model> model_;
    const Dataset& data_;
    TrainerOptions options_;
    Shard shard_;
    std::vector<torch::Tensor> parameters_;
    std::vector<io::Parameter> description_;
    Sgd sgd_;
    std::optional<StepWindow> window_;
    GradientSync* exchange_ = nullptr;
    GradientRecorder* recorder_ = nullptr;
    std::int64_t global_step_ = 0;
};

}  // namespace acc::train
