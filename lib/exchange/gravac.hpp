// GraVAC's per-step exchange (Tyagi & Swany, Algorithm 1): train-dist --gravac's
// (through dist::GravacSync, dist/gravac_exchange.hpp) and anything else that hands it
// a step's gradients. It needs only the compressors, the controller (regime) and
// comm::Collectives: no trainer, no files.
//
// Each step, on every rank, for every matrix parameter (vectors are always sent
// dense, as in the other modes):
//   1. error feedback: g_o = g + memory, by the family's codec (compensate; dgc's codec
//      keeps its momentum u = m u + g and adds u, and clears u where the sent level sent
//      entries: mark_sent);
//   2. C_min(g_o): the family's codec at keep fraction 1 / theta_min;
//   3. the candidate C_cand from C_min(g_o) (multi-level: topk and dgc take the
//      top 1 / candidate of the n entries of C_min(g_o), which equals top-k of
//      g_o at that fraction); randomk draws its shared random subset from g_o
//      directly (a uniform random subset of a uniform random subset is one of
//      g_o, so the distribution is the same);
//   4. one allreduce (sum) of four doubles: ||g_o||^2, ||C_min||^2, ||C_cand||^2
//      over all matrix parameters and ranks, and the samples of the step (an
//      epoch's short last batch counts what it holds). Every rank passes the
//      same sums to regime::GravacController::decide, so every rank takes the
//      same decision;
//   5. the chosen level (candidate, theta_min or dense) is exchanged and the
//      error memory keeps what was not sent (dense: memory = 0);
//   6. one allreduce (max) of the step's time, from the step's start
//      (GravacStepInfo::started; train-dist: before its batch is read) to the end of the
//      exchange, so that the throughput samples / time fed to
//      GravacController::end_step (and CheckGraVAC) is the same on every rank.
//      Whatever runs between steps (the optimizer step, the test-set evaluation
//      and checkpoint after an epoch) is not counted. Dense steps count the
//      compression that measured their gains: it runs on every step, since the
//      choice depends on it (Algorithm 1's line 23 leaves it out).
//
// The sparsifiers run compress's host codecs (float arrays) on CPU gradients and
// its device codecs (compress/device_codec.hpp: ATen ops, the same payloads) on
// gradients elsewhere, so GPU gradients stay on the GPU; encode_sparse_device()
// and send_sparse_device() mirror encode_sparse() and send_sparse().
//
// powersgd (a rank per matrix and factor, regime::powersgd_rank_for_factor) runs
// in ATen ops where the gradients are. Steps 2-3: with the warm-started Q of the
// last exchange, P = g_o Q, P orthogonalized (Gram-Schmidt), Q' = g_o^T P, and
// C(g_o) = P Q'^T at theta_min's rank; Gram-Schmidt treats columns in order, so
// the candidate's (lower) rank takes the first columns of the same P and Q':
// truncating C_min's factors equals compressing g_o directly at that rank. Step 5
// at rank r is PowerSGD's exchange: allreduce (sum) of every matrix's g_o Q[:, :r],
// orthogonalize, allreduce of g_o^T P, divided by the world size. Q keeps the
// columns of the largest rank used (theta_min's first), an exchange at rank r
// replaces the first r; a matrix PowerSGD would not compress at the level's rank
// (compress::powersgd_compresses) is sent whole with the vectors, residual 0.
#pragma once

#include "base/clock.hpp"
#include "comm/collectives.hpp"
#include "compress/codecs.hpp"
#include "compress/device_codec.hpp"
#include "compress/shapes.hpp"
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
    regime::GravacFamily family = regime::GravacFamily::topk;  ///< the compressor whose factor GraVAC chooses
    regime::GravacSettings settings;    ///< the controller's (smoothing already set for the world size)
    std::uint32_t seed = 0;             ///< random streams (randomk; powersgd's first Q)
    double dgc_momentum = 0.9;          ///< dgc's momentum correction factor
    /// Samples of one step over all ranks (N b), for a step whose GravacStepInfo gives no
    /// samples (0): such a rank counts samples_per_step / N.
    std::int64_t samples_per_step = 1;
    /// topk, dgc, randomk: run the device codecs (ATen ops) on CPU gradients too. Gradients
    /// on a GPU always take them; the tests compare both on CPU this way.
    bool device_path_on_cpu = false;
    /// The clock that ends a step's time (and starts it where GravacStepInfo::started is
    /// not set); empty: the steady clock. Tests fix it.
    std::function<SteadyClock::time_point()> clock;
};

/// What the exchange needs to know of a step.
struct GravacStepInfo {
    std::int64_t epoch = 0;    ///< recorded in the step's GravacStepRecord
    std::int64_t samples = 0;  ///< this rank's samples in the step (a short last batch counts what it holds); 0: not known
    /// When the step began (before its batch was read); the clock's epoch: not known, the
    /// exchange's start is taken instead.
    SteadyClock::time_point started{};
};

/// One step's decision (the metrics file's /gravac/steps row).
struct GravacStepRecord {
    static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    std::int64_t epoch = 0;
    double factor = 1;          ///< compression factor sent (1: dense)
    std::int8_t choice = 2;     ///< regime::GravacChoice: 0 candidate, 1 theta_min, 2 dense (lines 10-24 of Algorithm 1)
    double theta_min = 0;       ///< minimum factor this step
    double candidate = 0;       ///< candidate factor evaluated this step
    double gain_min = kNaN;     ///< EWMA gain of theta_min after this step's sample
    double gain_candidate = kNaN;  ///< EWMA gain of the candidate after this step's sample
};

/// One row of the controller's compression-throughput table.
struct GravacThroughputRow {
    std::int64_t epoch = 0;
    double factor = 1;      ///< compression factor (1: dense)
    double throughput = 0;  ///< samples/s x gain, last measured at this factor
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

    /// Error memories ("<tensor>/error"), the family's codec state (dgc's momentum,
    /// "<tensor>/dgc_momentum"),
    /// powersgd's warm-start Q ("<tensor>/powersgd_q", cols x rank) and
    /// the controller's inputs so far ("gravac/inputs", steps x 4: the three all-reduced
    /// squared norms and the throughput in samples/s), from which load_state() replays the controller.
    TensorMap state() const;
    /// Throws acc::Error naming an entry that does not fit.
    void load_state(const TensorMap& state);

    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals();
    /// Step records since the last take_steps(), which clears them.
    std::vector<GravacStepRecord> take_steps();
    /// The throughput table now, tagged with `epoch`, ascending factor.
    std::vector<GravacThroughputRow> throughput(std::int64_t epoch) const;
    const regime::GravacController& controller() const { return *controller_; }
    /// Bytes each level would send per step (this worker), vectors and scalars excluded.
    GravacLevelBytes level_bytes() const;

    /// powersgd: the rank of each matrix tensor at `factor` (0: sent whole, as
    /// PowerSGD would not compress it at that rank), in tensor order.
    std::vector<std::int64_t> powersgd_ranks(double factor) const;

private:
    struct Slot;
    struct Level;
    bool powersgd() const { return family_->low_rank; }
    std::int64_t powersgd_rank(const Slot& s, double factor) const;
    SteadyClock::time_point clock_now() const;
    regime::GravacNorms decide_from(std::vector<double> norms, double& samples, regime::GravacDecision& decision);
    std::vector<double> encode_sparse(std::vector<torch::Tensor>& gradients, std::int64_t step, double theta_min,
                                      double candidate);
    void send_sparse(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision, std::int64_t step,
                     double theta_min, double candidate);
    void sync_to_host(Slot& s);
    compress::DeviceCodec& device_level(Slot& s, double factor, bool candidate);
    std::uint64_t level_key(const Slot& s, bool shared, bool candidate, std::int64_t step) const;
    std::vector<double> encode_sparse_device(std::vector<torch::Tensor>& gradients, std::int64_t step,
                                             double theta_min, double candidate);
    void send_sparse_device(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision,
                            double theta_min, double candidate);
    std::vector<double> encode_powersgd(std::vector<torch::Tensor>& gradients, double theta_min, double candidate);
    void send_powersgd(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision);
    torch::Tensor allreduce_mean(std::vector<torch::Tensor> parts);
    void average_into(std::vector<torch::Tensor> sent, const std::vector<torch::Tensor>& into);
    Level& level(Slot& s, double factor, bool candidate);
    compress::CodecOptions codec_options() const;
    compress::Spec feedback_spec() const;
    void feedback_to_device(Slot& s, const torch::Device& device);
    void encode_level(Slot& s, double factor, bool candidate, std::int64_t step, std::vector<float>& residual,
                      std::vector<std::uint8_t>& payload);
    void exchange_level(double factor, bool candidate, std::int64_t step, std::vector<std::vector<std::uint8_t>>& payloads);

    std::vector<compress::TensorInfo> tensors_;
    std::unique_ptr<comm::Collectives> staged_;
    comm::Collectives& comm_;
    GravacExchangeOptions options_;
    const compress::CompressorInfo* family_ = nullptr;  // the registry's entry of options_.family
    std::unique_ptr<regime::GravacController> controller_;
    std::vector<Slot> slots_;            // matrix tensors
    std::vector<size_t> vectors_;        // tensors always sent dense
    std::vector<std::array<double, 4>> inputs_;  // the controller's inputs, every step
    std::vector<GravacStepRecord> records_;
    ExchangeTotals totals_;
};

}  // namespace acc::exchange
