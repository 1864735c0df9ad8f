// train-dist --gravac: GraVAC's per-step exchange (Tyagi & Swany, Algorithm 1).
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
//      (train::StepInfo::started: before its batch is read) to the end of the
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
#include "comm/process_group.hpp"
#include "compress/codecs.hpp"
#include "compress/device_codec.hpp"
#include "dist/config.hpp"
#include "dist/exchange.hpp"
#include "io/metrics.hpp"
#include "io/parameters.hpp"
#include "regime/gravac.hpp"
#include "train/trainer.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace acc::dist {

struct GravacExchangeOptions {
    std::string family = "topk";        ///< one of compress::gravac_families()
    regime::GravacSettings settings;    ///< the controller's (smoothing already set for the world size)
    std::uint32_t seed = 0;             ///< random streams (randomk; powersgd's first Q)
    double dgc_momentum = 0.9;          ///< dgc's momentum correction factor
    /// Samples of one step over all ranks (N b), for a step whose StepInfo gives no
    /// samples (0): such a rank counts samples_per_step / N.
    std::int64_t samples_per_step = 1;
    /// topk, dgc, randomk: run the device codecs (ATen ops) on CPU gradients too. Gradients
    /// on a GPU always take them; the tests compare both on CPU this way.
    bool device_path_on_cpu = false;
    /// The clock that ends a step's time (and starts it where StepInfo::started is
    /// not set); empty: the steady clock. Tests fix it.
    std::function<SteadyClock::time_point()> clock;
};

/// Bytes of the chosen level for the whole model (this worker, one step).
struct GravacLevelBytes {
    std::int64_t candidate = 0, theta_min = 0, dense = 0;
};

class GravacExchange final : public train::GradientSync {
public:
    /// Throws acc::UsageError for an unknown family or settings.
    GravacExchange(std::vector<torch::Tensor> parameters, std::vector<io::Parameter> description,
                   comm::Collectives& comm, torch::Device device, GravacExchangeOptions options);
    ~GravacExchange() override;

    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;

    /// Per parameter: dgc's aggregated gradient carries momentum (SGD applies it to weight decay only).
    std::vector<bool> momentum_in_gradient() const;
    void set_samples_per_step(std::int64_t samples) { options_.samples_per_step = samples; }

    /// Error memories ("<parameter>/error"), the family's codec state (dgc's momentum,
    /// "<parameter>/dgc_momentum"),
    /// powersgd's warm-start Q ("<parameter>/powersgd_q", cols x rank) and
    /// the controller's inputs so far ("gravac/inputs", steps x 4: the three all-reduced
    /// squared norms and the throughput), from which load_state() replays the controller.
    train::TensorMap state() const;
    /// Throws acc::Error naming an entry that does not fit.
    void load_state(const train::TensorMap& state);

    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals();
    /// Step records since the last take_steps(), which clears them.
    std::vector<io::MetricsGravacStep> take_steps();
    /// The throughput table now, tagged with `epoch`.
    std::vector<io::MetricsGravacThroughput> throughput(std::int64_t epoch) const;
    const regime::GravacController& controller() const { return *controller_; }
    /// Bytes each level would send per step (this worker), vectors and scalars excluded.
    GravacLevelBytes level_bytes() const;

    /// powersgd: the rank of each matrix parameter at `factor` (0: sent whole, as
    /// PowerSGD would not compress it at that rank), in parameter order.
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

    std::vector<torch::Tensor> parameters_;
    std::vector<io::Parameter> description_;
    std::unique_ptr<comm::Collectives> staged_;
    comm::Collectives& comm_;
    GravacExchangeOptions options_;
    const compress::CompressorInfo* family_ = nullptr;  // the registry's entry of options_.family
    std::unique_ptr<regime::GravacController> controller_;
    std::vector<Slot> slots_;            // matrix parameters
    std::vector<size_t> vectors_;        // parameters always sent dense
    std::vector<std::array<double, 4>> inputs_;  // the controller's inputs, every step
    std::vector<io::MetricsGravacStep> records_;
    ExchangeTotals totals_;
};

/// train-dist's GraVAC exchange over `parameters`, or nullptr without --gravac. Collective.
std::unique_ptr<GravacExchange> make_gravac_exchange(const TrainDistConfig& config,
                                                     const std::vector<torch::Tensor>& parameters,
                                                     const std::vector<io::Parameter>& description,
                                                     comm::ProcessGroupCollectives& pg, int world);
/// The settings part of the metrics file's /gravac.
io::MetricsGravac gravac_metrics(const TrainDistConfig& config, int world);
/// Takes the epoch's step records and logs (debug) a digest of its decisions, so that
/// ranks can be compared.
std::vector<io::MetricsGravacStep> log_gravac_epoch(GravacExchange& exchange, int rank, std::int64_t epoch);
/// "6 at 4x, 10 at 8x, 2 dense": steps at each factor, for the epoch line.
std::string gravac_summary(const std::vector<io::MetricsGravacStep>& steps);

}  // namespace acc::dist
