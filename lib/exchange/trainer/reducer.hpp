// Gradients averaged in buckets whose exchange overlaps the backward pass, as
// PyTorch DDP does: uncompressed buckets by one allreduce each, compressed ones
// handed, a bucket at a time, to a BucketExchange (DDP's communication hook).
//
// Each route (allreduce, compressed) has buckets of its own, holding its
// parameters in reverse model order (the order in which the backward pass produces
// their gradients): its first bucket up to first_bucket_bytes, the others up to
// bucket_bytes, a bucket being closed once it reaches its size (so a tensor larger
// than that has a bucket of its own). The buckets of both routes are launched in
// one order, that in which their first parameters come in the backward pass.
// A gradient hook on every parameter copies the gradient into its bucket as soon
// as autograd has computed it; a full bucket is launched at once, asynchronously,
// provided the buckets before it have been launched (so every rank launches them
// in the same order). The hooks only act on an armed backward pass (a step's last
// micro-batch); the local gradient still accumulates in .grad, which the gradient
// recorder reads.
#pragma once

#include "comm/collectives.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

namespace acc::exchange {

/// How a parameter's gradient is averaged.
enum class Route : std::uint8_t {
    outside,     ///< not by the buckets
    allreduce,   ///< in an allreduce of its bucket
    compressed,  ///< by the BucketExchange, a bucket at a time
};

/// What averages the compressed buckets. Every rank calls it with the same buckets in
/// the same order.
class BucketExchange {
public:
    virtual ~BucketExchange() = default;
    /// Starts averaging compressed bucket `bucket` (an index into BucketReducer::buckets()):
    /// `gradients` are its parameters' gradients, shaped as the parameters, in model order
    /// (ascending index); they stay untouched until finish(). Runs inside the backward pass.
    virtual void start(size_t bucket, const std::vector<torch::Tensor>& gradients) = 0;
    /// Completes it: the gradients start() was given hold the averages.
    virtual void finish(size_t bucket) = 0;
};

struct BucketOptions {
    std::int64_t bucket_bytes = 25ll << 20;       ///< DDP's bucket_cap_mb = 25
    std::int64_t first_bucket_bytes = 1ll << 20;  ///< DDP's first bucket
};

/// What the buckets did over some steps.
struct BucketStats {
    std::int64_t bytes = 0;            ///< handed to allreduces (4 bytes per gradient value)
    std::int64_t collectives = 0;      ///< allreduces
    std::int64_t early_launches = 0;   ///< buckets (of both routes) launched during the backward pass
    double communication_seconds = 0;  ///< issuing and waiting for the allreduces
    double copy_seconds = 0;           ///< copying gradients into buckets and averages out (hooks included)
};

class BucketReducer {
public:
    /// `parameters` in model order; allreduce buckets live on `device` (the collectives'
    /// device), compressed ones where their parameters are. `exchange` averages the
    /// compressed buckets (none: no parameter may take that route).
    BucketReducer(std::vector<torch::Tensor> parameters, comm::Collectives& comm, torch::Device device,
                  BucketOptions options = {}, BucketExchange* exchange = nullptr);
    ~BucketReducer();
    BucketReducer(const BucketReducer&) = delete;
    BucketReducer& operator=(const BucketReducer&) = delete;

    /// Each parameter's route; rebuilds the buckets. Not during a step.
    void set_routes(const std::vector<Route>& routes);
    /// set_routes with allreduce for the members, outside for the others.
    void set_members(const std::vector<bool>& members);
    const std::vector<Route>& routes() const { return routes_; }
    /// The buckets: parameter indices, in launch order, each in reverse model order.
    const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
    /// Each bucket's route (allreduce or compressed).
    const std::vector<Route>& bucket_routes() const { return bucket_routes_; }

    /// Values an allreduce member's next gradient carries once more (the error memory
    /// a compressed level left when the parameter changed to none).
    void add_leftover(size_t parameter, torch::Tensor values);
    /// Leftovers not yet sent, by parameter (undefined where none).
    const std::vector<torch::Tensor>& leftovers() const { return leftovers_; }
    /// Removes and returns a parameter's leftover (undefined if it has none).
    torch::Tensor take_leftover(size_t parameter);

    /// Arms the hooks for the coming backward pass; `accumulated`: .grad already
    /// holds earlier micro-batches' gradients, which the bucket must include.
    void arm(bool accumulated);
    /// After the backward pass: copies the gradients the hooks did not see (all of
    /// them when not armed) and launches every bucket not yet launched, in order.
    /// `gradients[i]` is parameter i's local gradient.
    void launch_rest(const std::vector<torch::Tensor>& gradients);
    /// Waits for (allreduce) or finishes (compressed) every bucket, in launch order,
    /// and replaces each member's entry of `gradients` with the average over the ranks
    /// (a view into its bucket).
    void finish(std::vector<torch::Tensor>& gradients);

    const BucketStats& stats() const { return stats_; }
    void reset_stats() { stats_ = BucketStats(); }

private:
    void on_gradient(size_t parameter, const torch::Tensor& gradient);
    void fill(size_t parameter, const torch::Tensor& gradient, const torch::Tensor& earlier);
    void launch_ready();

    std::vector<torch::Tensor> parameters_;
    void launch(size_t bucket);

    comm::Collectives& comm_;
    torch::Device device_;
    BucketOptions options_;
    BucketExchange* exchange_;
    std::vector<unsigned> hooks_;
    std::vector<Route> routes_;
    std::vector<std::vector<size_t>> buckets_;
    std::vector<Route> bucket_routes_;
    std::vector<torch::Tensor> buffers_;
    std::vector<size_t> bucket_of_;       // per parameter
    std::vector<std::int64_t> offset_of_;  // per parameter, in its bucket
    std::vector<torch::Tensor> leftovers_;
    // During a step.
    bool armed_ = false, accumulated_ = false;
    std::vector<bool> ready_;
    std::vector<size_t> pending_;  // per bucket: members not yet copied
    size_t next_launch_ = 0;
    std::vector<std::unique_ptr<comm::Work>> works_;
    std::exception_ptr error_;
    BucketStats stats_;
};

}  // namespace acc::exchange
