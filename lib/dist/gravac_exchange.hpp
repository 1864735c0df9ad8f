// train-dist --gravac: the trainer's gradient hook over GraVAC's exchange
// (exchange/gravac.hpp, which explains the algorithm). GravacSync gives the exchange
// what it needs of each train::StepInfo and turns its step records and throughput
// rows into the metrics file's; the functions below set it up from train-dist's
// config and report its epochs.
#pragma once

#include "comm/collectives.hpp"
#include "comm/process_group.hpp"
#include "dist/config.hpp"
#include "dist/exchange.hpp"
#include "exchange/gravac.hpp"
#include "io/metrics.hpp"
#include "io/parameters.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::dist {

class GravacSync final : public train::GradientSync {
public:
    /// `parameters` (their shapes) described by `description` (their names), in model
    /// order. Throws acc::UsageError for an unknown family or settings.
    GravacSync(const std::vector<torch::Tensor>& parameters, const std::vector<io::Parameter>& description,
               comm::Collectives& comm, torch::Device device, exchange::GravacExchangeOptions options);

    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;
    /// exchange::GravacExchange::load_state (also when the trainer loads a checkpoint).
    void load_state(const train::TensorMap& state) override { exchange_->load_state(state); }
    train::TensorMap state() const { return exchange_->state(); }

    /// Per parameter: dgc's aggregated gradient carries momentum (SGD applies it to weight decay only).
    std::vector<bool> momentum_in_gradient() const { return exchange_->momentum_in_gradient(); }
    void set_samples_per_step(std::int64_t samples) { exchange_->set_samples_per_step(samples); }
    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals() { return exchange_->take_totals(); }
    /// Step records since the last take_steps(), which clears them.
    std::vector<io::MetricsGravacStep> take_steps();
    /// The throughput table now, tagged with `epoch`.
    std::vector<io::MetricsGravacThroughput> throughput(std::int64_t epoch) const;

    exchange::GravacExchange& core() { return *exchange_; }
    const exchange::GravacExchange& core() const { return *exchange_; }

private:
    std::unique_ptr<exchange::GravacExchange> exchange_;
};

/// train-dist's GraVAC exchange over `parameters`, or nullptr without --gravac. Collective.
std::unique_ptr<GravacSync> make_gravac_exchange(const TrainDistConfig& config, const std::vector<torch::Tensor>& parameters,
                                                 const std::vector<io::Parameter>& description,
                                                 comm::ProcessGroupCollectives& pg, int world);
/// The settings part of the metrics file's /gravac.
io::MetricsGravac gravac_metrics(const TrainDistConfig& config, int world);
/// Takes the epoch's step records and logs (debug) a digest of its decisions, so that
/// ranks can be compared.
std::vector<io::MetricsGravacStep> log_gravac_epoch(GravacSync& exchange, int rank, std::int64_t epoch);
/// "6 at 4x, 10 at 8x, 2 dense": steps at each factor, for the epoch line.
std::string gravac_summary(const std::vector<io::MetricsGravacStep>& steps);

}  // namespace acc::dist
