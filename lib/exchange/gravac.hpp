// GraVAC's per-step exchange (Tyagi & Swany, Algorithm 1): train-dist --gravac's
// (through exchange::GravacSync) and the Python package's. A policy over the one
// gradient exchange (GradientExchange, levels changed within the family,
// LevelChange::within_family): GraVAC keeps its gains, its controller (regime) and its
// records; the error memories, DGC's momentum, PowerSGD's Q and every collective of the
// gradients are the exchange's. No trainer, no files.
//
// Each step, on every rank, over the matrix parameters (vectors are always sent
// dense, as in the other modes):
//   1. the exchange's squared norms (GradientExchange::squared_norms) of g_o, the
//      gradient plus the error memory (DGC: with its momentum), and of what the
//      family's level at theta_min and at the candidate factor would send of it on
//      this rank (the same selection, random subset or P and Q the step at that level
//      sends: a sparsifier at keep fraction 1 / factor; powersgd at each matrix's rank
//      for the factor, regime::powersgd_rank_for_factor, whole where PowerSGD would not
//      compress it);
//   2. one allreduce (sum) of four doubles: those three norms and the samples of the
//      step (an epoch's short last batch counts what it holds). Every rank passes the
//      same sums to regime::GravacController::decide, so every rank takes the same
//      decision;
//   3. the chosen level (candidate, theta_min or dense) set on the exchange, which
//      averages the gradients at it: the error memory keeps what was not sent (dense:
//      the memory is sent whole and cleared; DGC's momentum still corrects it);
//   4. one allreduce (max) of the step's time, from the step's start
//      (GravacStepInfo::started; train-dist: before its batch is read) to the end of the
//      exchange, so that the throughput samples / time fed to
//      GravacController::end_step (and CheckGraVAC) is the same on every rank.
//      Whatever runs between steps (the optimizer step, the test-set evaluation
//      and checkpoint after an epoch) is not counted. Dense steps count the
//      compression that measured their gains: it runs on every step, since the
//      choice depends on it (Algorithm 1's line 23 leaves it out).
//
// PowerSGD keeps Q's columns of the largest rank used: an exchange at a lower rank
// takes and replaces the first ones (Gram-Schmidt treats columns in order, so the
// candidate's approximation is theta_min's truncated). It runs the Accordion
// reference's PowerSGD (PowerSgdVariant::accordion). Gradients on a GPU stay there (the
// exchange's device path).
#pragma once

#include "base/clock.hpp"
#include "comm/collectives.hpp"
#include "compress/shapes.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/totals.hpp"
#include "regime/gravac.hpp"

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace acc::exchange {

/// Named tensors (state(), load_state()); the same type as train::TensorMap.
using TensorMap = std::map<std::string, torch::Tensor>;

struct GravacExchangeOptions {
    regime::GravacFamily family{};  ///< the compressor whose factor GraVAC chooses (the registry's first)
    regime::GravacSettings settings;    ///< the controller's (smoothing already set for the world size)
    std::uint32_t seed = 0;             ///< the exchange's random streams (randomk's subsets, dgc's samples, powersgd's Q)
    compress::DgcOptions dgc;           ///< dgc's momentum correction factor (its warm-up is not GraVAC's)
    /// Samples of one step over all ranks (N b), for a step whose GravacStepInfo gives no
    /// samples (0): such a rank counts samples_per_step / N.
    std::int64_t samples_per_step = 1;
    /// Run the exchange's device path (ATen ops) on CPU gradients too. Gradients on a GPU
    /// always take it; the tests compare both on CPU this way.
    bool device_path_on_cpu = false;
    /// The clock that ends a step's time (and starts it where GravacStepInfo::started is
    /// not set); empty: the steady clock. Tests fix it.
    std::function<SteadyClock::time_point()> clock;
    /// The ranks that decide together (steps 2 and 4: the sums of the norms and samples,
    /// the slowest step's time), a group that contains the exchange's; nullptr: the
    /// exchange's own. The Python package's FSDP2 exchange averages each shard over its
    /// replicas while the whole world, every shard of the model, decides. The samples
    /// per step are then the deciding ranks'.
    comm::Collectives* decisions = nullptr;
};

/// What the exchange needs to know of a step.
struct GravacStepInfo {
    std::int64_t epoch = 0;    ///< recorded in the step's regime::GravacStep
    std::int64_t samples = 0;  ///< this rank's samples in the step (a short last batch counts what it holds); 0: not known
    /// When the step began (before its batch was read); the clock's epoch: not known, the
    /// exchange's start is taken instead.
    SteadyClock::time_point started{};
};

/// Bytes of the chosen level for the whole model (this worker, one step).
struct GravacLevelBytes {
    std::int64_t candidate = 0, theta_min = 0, dense = 0;
};

class GravacExchange {
public:
    /// `tensors`: the gradients' names and shapes, in the order exchange() takes them;
    /// `device`: where the gradients are (a device other than the CPU stages host tensors
    /// there for the collectives). Throws acc::UsageError for an unknown family or settings.
    /// Collective: the exchange checks that the ranks pass the same tensors.
    GravacExchange(std::vector<compress::TensorInfo> tensors, comm::Collectives& comm, torch::Device device,
                   GravacExchangeOptions options);
    ~GravacExchange();
    GravacExchange(const GravacExchange&) = delete;
    GravacExchange& operator=(const GravacExchange&) = delete;

    /// One step: replaces `gradients` (one per tensor, shaped as its TensorInfo) by their
    /// mean over the ranks at the level the controller chose. Collective.
    void exchange(std::vector<torch::Tensor>& gradients, const GravacStepInfo& step);

    /// Per tensor: dgc's aggregated gradient carries momentum (SGD applies it to weight decay only).
    std::vector<bool> momentum_in_gradient() const;
    void set_samples_per_step(std::int64_t samples) { options_.samples_per_step = samples; }

    /// The exchange's state (GradientExchange::state(): error memories "<tensor>/error",
    /// dgc's momentum "<tensor>/dgc_momentum", powersgd's warm-start Q
    /// "<tensor>/powersgd_q", cols x the largest rank used, its random state and step) and
    /// the controller's inputs so far ("gravac/inputs", steps x 4: the three all-reduced
    /// squared norms and the throughput in samples/s), from which load_state() replays the controller.
    TensorMap state() const;
    /// Throws acc::Error naming an entry that does not fit.
    void load_state(const TensorMap& state);

    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals();
    /// Step records since the last take_steps(), which clears them.
    std::vector<regime::GravacStep> take_steps();
    /// The throughput table now, tagged with `epoch`, ascending factor.
    std::vector<regime::GravacThroughputRow> throughput(std::int64_t epoch) const;
    const regime::GravacController& controller() const { return *controller_; }
    /// Bytes each level would send per step (this worker), vectors and scalars excluded.
    GravacLevelBytes level_bytes() const;

    /// powersgd: the rank of each matrix tensor at `factor` (0: sent whole, as
    /// PowerSGD would not compress it at that rank), in tensor order.
    std::vector<std::int64_t> powersgd_ranks(double factor) const;

private:
    bool powersgd() const { return family_->low_rank; }
    /// The exchange's level of every tensor at `factor` (1: all dense).
    std::vector<compress::Spec> levels_at(double factor) const;
    std::int64_t powersgd_rank(size_t tensor, double factor) const;
    SteadyClock::time_point clock_now() const;
    regime::GravacNorms decide_from(std::vector<double> norms, double& samples, regime::GravacDecision& decision);

    std::vector<compress::TensorInfo> tensors_;
    std::unique_ptr<comm::Collectives> staged_;
    comm::Collectives& comm_;
    GravacExchangeOptions options_;
    std::unique_ptr<comm::Collectives> staged_decisions_;
    comm::Collectives& decide_;  // options_.decisions, or comm_
    const compress::CompressorInfo* family_ = nullptr;  // the registry's entry of options_.family
    std::unique_ptr<regime::GravacController> controller_;
    std::vector<size_t> matrices_;       // tensors GraVAC compresses
    std::unique_ptr<GradientExchange> exchange_;
    std::vector<std::array<double, 4>> inputs_;  // the controller's inputs, every step
    std::vector<regime::GravacStep> records_;
    ExchangeTotals totals_;
};

}  // namespace acc::exchange
