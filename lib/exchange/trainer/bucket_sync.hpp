// The trainer's gradient hook for training at chosen levels (train-dist's --compress,
// --schedule and --accordion, and grad-dump at level none): every parameter's gradient
// combined at its own level, the levels changing from epoch to epoch.
//
// Every parameter goes through the BucketReducer, whose buckets are launched during
// the backward pass: those at level none in allreduce buckets, the others in
// compressed buckets, each averaged by a GradientExchange of its own
// (error feedback, encoding and the first collectives start in the backward pass;
// the allgathers, PowerSGD's second round and decoding after it, bucket by bucket).
// Collectives are issued in the same order on every rank: the buckets' launch order.
// The bucket exchanges share one PowerSGD RandomState (drawn from bucket by bucket, as
// PyTorch's PowerSGD hook does), and each tensor's random streams are keyed by its
// place among all compressed parameters, so that how the buckets split the model
// changes no random number but PowerSGD's Q.
//
// A level change keeps each parameter's error-feedback memory and resets its
// compressor state (GradientExchange::set_levels). A parameter that
// changes to none sends its memory once, in its next bucket, and then keeps none.
// When the set of compressed parameters changes, the compressed buckets are made
// anew and each parameter's state follows it by name (BucketExchanges, which the
// Python package's DDP hook shares).
#pragma once

#include "exchange/bucket_exchanges.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/totals.hpp"
#include "exchange/trainer/reducer.hpp"
#include "exchange/trainer/run_sync.hpp"
#include "io/parameters.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::exchange {

class BucketSync final : public RunSync, private BucketExchange {
public:
    /// `parameters` (the model's, in model order) described by `description`;
    /// `levels` (one per parameter) for the first epoch. Collective.
    BucketSync(std::vector<torch::Tensor> parameters, std::vector<io::Parameter> description,
                 comm::Collectives& comm, torch::Device device, ExchangeSetup setup,
                 const std::vector<compress::Spec>& levels);
    ~BucketSync() override;

    /// The epoch's levels from the next step on (set_levels), and its number (DGC's warm-up).
    void begin_epoch(const EpochSettings& settings) override;
    /// New levels from the next step on. Collective: every rank passes the same.
    void set_levels(const std::vector<compress::Spec>& levels);
    const std::vector<compress::Spec>& levels() const { return levels_; }
    /// The epoch about to run (DGC's warm-up).
    void set_epoch(std::int64_t epoch);
    std::vector<bool> momentum_in_gradient() const override;

    void before_backward(const train::StepInfo& step, bool accumulated) override;
    void exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) override;
    void settle() override;

    /// This rank's state for a checkpoint: error memories and compressor state,
    /// named "<parameter>/error", "<parameter>/powersgd_q", ..., "exchange/...".
    train::TensorMap state() const override;
    /// Restores state(); throws acc::Error naming an entry that does not fit.
    void load_state(const train::TensorMap& state) override;

    ExchangeTotals take_totals() override;
    /// Nothing: the levels are the run's.
    SyncRecord take_record(std::int64_t) override { return {}; }
    std::int64_t buckets() const override { return static_cast<std::int64_t>(reducer_->buckets().size()); }
    const BucketReducer& reducer() const { return *reducer_; }

private:
    void start(size_t bucket, const std::vector<torch::Tensor>& gradients) override;
    void finish(size_t bucket) override;
    void route(const std::vector<compress::Spec>& levels);
    void make_exchanges(const std::vector<compress::Spec>& initial, const std::vector<compress::Spec>& target,
                        const StateEntries& own);
    void rebuild(const std::vector<compress::Spec>& levels);
    /// A bucket's parameters in model order (the order its exchange takes them).
    std::vector<size_t> members_of(size_t bucket) const;

    std::vector<torch::Tensor> parameters_;
    std::vector<io::Parameter> description_;
    std::unique_ptr<comm::Collectives> staged_;  // host tensors over a device backend (NCCL)
    comm::Collectives& comm_;                    // what the compressed buckets' exchanges talk to
    ExchangeSetup setup_;
    std::vector<compress::Spec> levels_;
    std::vector<size_t> compressed_;  // parameters at a compressed level, in model order
    std::unique_ptr<BucketReducer> reducer_;
    // The compressed buckets' exchanges. Declared after the reducer: destroyed before it.
    BucketExchanges exchanges_;
    // Per bucket of the reducer: its exchange in exchanges_ (null for allreduce buckets).
    std::vector<GradientExchange*> by_bucket_;
    std::int64_t epoch_ = 0;
    std::int64_t steps_ = 0;  // steps exchanged: the compressed exchange's step counter, kept while there is none
    ExchangeTotals totals_;
};

}  // namespace acc::exchange
