// The trainer's gradient hook over GraVAC's exchange (exchange/gravac.hpp, which
// explains the algorithm): GravacSync gives the exchange what it needs of each
// train::StepInfo and turns its step records and throughput rows into the metrics
// file's. train-dist sets it up and reports its epochs (app/train_dist_gravac.hpp).
#pragma once

#include "comm/collectives.hpp"
#include "exchange/gravac.hpp"
#include "exchange/totals.hpp"
#include "io/metrics.hpp"
#include "io/parameters.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::exchange {

class GravacSync final : public train::GradientSync {
public:
    /// `parameters` (their shapes) described by `description` (their names), in model
    /// order. Throws acc::UsageError for an unknown family or settings.
    GravacSync(const std::vector<torch::Tensor>& parameters, const std::vector<io::Parameter>& description,
               comm::Collectives& comm, torch::Device device, GravacExchangeOptions options);

    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;
    /// GravacExchange::load_state (also when the trainer loads a checkpoint).
    void load_state(const train::TensorMap& state) override { exchange_->load_state(state); }
    train::TensorMap state() const { return exchange_->state(); }

    /// Per parameter: dgc's aggregated gradient carries momentum (SGD applies it to weight decay only).
    std::vector<bool> momentum_in_gradient() const { return exchange_->momentum_in_gradient(); }
    void set_samples_per_step(std::int64_t samples) { exchange_->set_samples_per_step(samples); }
    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals() { return exchange_->take_totals(); }
    /// Step records since the last take_steps(), which clears them.
    std::vector<regime::GravacStep> take_steps();
    /// The throughput table now, tagged with `epoch`.
    std::vector<regime::GravacThroughputRow> throughput(std::int64_t epoch) const;

    GravacExchange& core() { return *exchange_; }
    const GravacExchange& core() const { return *exchange_; }

private:
    std::unique_ptr<GravacExchange> exchange_;
};

}  // namespace acc::exchange
