// The trainer's gradient hook over GraVAC's exchange (exchange/gravac.hpp, which
// explains the algorithm): GravacSync gives the exchange what it needs of each
// train::StepInfo and turns its step records and throughput rows into the metrics
// file's. train-dist sets it up and reports its epochs (tools/train-dist/gravac.hpp).
#pragma once

#include "comm/collectives.hpp"
#include "exchange/gravac.hpp"
#include "exchange/totals.hpp"
#include "exchange/trainer/run_sync.hpp"
#include "io/parameters.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::exchange {

class GravacSync final : public RunSync {
public:
    /// `parameters` (their shapes) described by `description` (their names), in model
    /// order. Throws acc::UsageError for an unknown family or settings.
    GravacSync(const std::vector<torch::Tensor>& parameters, const std::vector<io::Parameter>& description,
               comm::Collectives& comm, torch::Device device, GravacExchangeOptions options);

    /// The epoch's samples per step (GraVAC's throughput); GraVAC chooses the levels.
    void begin_epoch(const EpochSettings& settings) override {
        exchange_->set_samples_per_step(settings.samples_per_step);
    }
    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;
    void load_state(const train::TensorMap& state) override { exchange_->load_state(state); }
    train::TensorMap state() const override { return exchange_->state(); }
    std::vector<bool> momentum_in_gradient() const override { return exchange_->momentum_in_gradient(); }
    ExchangeTotals take_totals() override { return exchange_->take_totals(); }
    /// The step records since the last call and the throughput table now, tagged with `epoch`.
    SyncRecord take_record(std::int64_t epoch) override;
    /// None: a step's gradients go together once the backward pass has ended.
    std::int64_t buckets() const override { return 0; }

    GravacExchange& core() { return *exchange_; }
    const GravacExchange& core() const { return *exchange_; }

private:
    std::unique_ptr<GravacExchange> exchange_;
};

}  // namespace acc::exchange
