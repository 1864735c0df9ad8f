// train-dist's gradient exchange: every parameter's gradient combined at its
// own level, the levels changing from epoch to epoch.
//
// Parameters at level none go through the BucketReducer, whose allreduces overlap
// the backward pass. The others go through one compress::GradientExchange over
// just those parameters, after the backward pass: its start() (error feedback,
// encoding, the first allreduces) runs while the last buckets are still in
// flight, its finish() (allgathers, PowerSGD's second round, decoding) after
// they are done. Collectives are issued in the same order on every rank: the
// buckets in bucket order, then the compressed exchange's.
//
// A level change keeps each parameter's error-feedback memory and resets its
// compressor state (compress::GradientExchange::set_levels). A parameter that
// changes to none sends its memory once, in its next bucket, and then keeps none.
#pragma once

#include "compress/exchange.hpp"
#include "dist/reducer.hpp"
#include "exchange/totals.hpp"
#include "io/parameters.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::dist {

using ExchangeTotals = exchange::ExchangeTotals;

struct ExchangeSetup {
    BucketOptions buckets;
    compress::ExchangeOptions compression;
};

class DistExchange final : public train::GradientSync {
public:
    /// `parameters` (the model's, in model order) described by `description`;
    /// `levels` (one per parameter) for the first epoch. Collective.
    DistExchange(std::vector<torch::Tensor> parameters, std::vector<io::Parameter> description,
                 comm::Collectives& comm, torch::Device device, ExchangeSetup setup,
                 const std::vector<compress::Spec>& levels);
    ~DistExchange() override;

    /// New levels from the next step on. Collective: every rank passes the same.
    void set_levels(const std::vector<compress::Spec>& levels);
    const std::vector<compress::Spec>& levels() const { return levels_; }
    /// The epoch about to run (DGC's warm-up).
    void set_epoch(std::int64_t epoch);
    /// Per parameter: its aggregated gradient already carries momentum (dgc), so
    /// SGD applies momentum to its weight decay only.
    std::vector<bool> momentum_in_gradient() const;

    void before_backward(const train::StepInfo& step, bool accumulated) override;
    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;
    void settle() override;

    /// This rank's state for a checkpoint: error memories and compressor state,
    /// named "<parameter>/error", "<parameter>/powersgd_q", ..., "exchange/...".
    train::TensorMap state() const;
    /// Restores state(); throws acc::Error naming an entry that does not fit.
    void load_state(const train::TensorMap& state);

    /// Totals since the last take_totals(), which resets them.
    ExchangeTotals take_totals();
    const BucketReducer& reducer() const { return *reducer_; }

private:
    void rebuild(const std::vector<compress::Spec>& levels);

    std::vector<torch::Tensor> parameters_;
    std::vector<io::Parameter> description_;
    std::unique_ptr<comm::Collectives> staged_;  // host tensors over a device backend (NCCL)
    comm::Collectives& comm_;                    // what the compressed exchange talks to
    ExchangeSetup setup_;
    std::vector<compress::Spec> levels_;
    std::vector<size_t> compressed_;  // parameters in the compressed exchange, in model order
    std::unique_ptr<BucketReducer> reducer_;
    std::unique_ptr<compress::GradientExchange> compress_;
    train::TensorMap carried_;  // the compressed exchange's own state while there is none
    std::int64_t epoch_ = 0;
    std::int64_t steps_ = 0;  // steps exchanged: the compressed exchange's step counter, kept while there is none
    ExchangeTotals totals_;
};

}  // namespace acc::dist
