// The collectives the toolkit needs, as one abstract interface.
//
// Compressors and the training loop talk to this interface only. lib/comm
// implements it over a PyTorch c10d process group (Gloo on CPU, NCCL on CUDA);
// tests may implement it over threads of one process.
//
// Every call is counted: Traffic holds what this worker handed to collectives
// (docs/metrics.md, "Data sent"), and the time spent inside them.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace acc::comm {

enum class ReduceOp { sum, average, max };

/// What one worker sent through collectives.
struct Traffic {
    std::int64_t calls = 0;
    std::int64_t bytes = 0;  ///< bytes this worker contributed (tensor bytes; allgather: its own part once)
    double seconds = 0;      ///< host wall time inside collectives, waiting included (NCCL: wait() does not block)
    double floats() const { return static_cast<double>(bytes) / 4.0; }
};

/// A collective in flight (see allreduce_async).
class Work {
public:
    virtual ~Work() = default;
    /// Blocks until the collective has finished; throws acc::Error if a peer was lost.
    virtual void wait() = 0;
};

class Collectives {
public:
    virtual ~Collectives() = default;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;

    /// Reduces `tensor` over all ranks, in place. Every rank passes the same shape and dtype.
    virtual void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
    /// The same, returning at once; `tensor` must stay alive and untouched until wait().
    virtual std::unique_ptr<Work> allreduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
    /// Every rank passes a tensor of the same shape and dtype; returns one per rank, in rank order.
    virtual std::vector<at::Tensor> allgather(const at::Tensor& tensor) = 0;
    /// 1-D tensors whose length may differ between ranks; returns one per rank, in rank order.
    virtual std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) = 0;
    /// Copies root's `tensor` into every other rank's `tensor`.
    virtual void broadcast(at::Tensor& tensor, int root) = 0;
    virtual void barrier() = 0;
    /// How long one collective may take before its peers count as lost (seconds: the
    /// run's --timeout); 0 where the toolkit sets no bound of its own (a group made
    /// elsewhere: its backend's timeout applies).
    virtual double timeout_seconds() const { return 0; }

    virtual const Traffic& traffic() const = 0;
};

}  // namespace acc::comm
