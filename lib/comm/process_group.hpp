// The Collectives interface over a PyTorch c10d process group: Gloo on CPU,
// NCCL on CUDA (builds against a CUDA LibTorch only).
//
// Joining: every rank connects to the store at MASTER_ADDR:MASTER_PORT (the
// run's own, run_store.hpp, served by rank 0; or torchrun's agent's TCPStore),
// presenting the run token, announces itself, and waits for
// the others; a rank that never arrives ends the rendezvous after the timeout
// with a message naming it. Every rank then keeps a heartbeat in the store.
//
// A lost peer: when a collective fails (a connection closed, or no progress
// within the timeout) the rank looks at the heartbeats to name the ranks that
// are gone, publishes that diagnosis in the store so that every rank reports
// the same cause, closes its connections and throws acc::Error, e.g.
// "rank 1 (host node2, pid 4242) lost during allreduce after 0.3 s (connection
// closed)". Every later call throws the same error.
//
// Not thread-safe: one thread issues the collectives.
#pragma once

#include "comm/backend.hpp"
#include "comm/collectives.hpp"
#include "comm/rendezvous.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace acc::comm {

/// Throws acc::UsageError when this build cannot use `backend` (NCCL needs a CUDA LibTorch).
void check_backend_available(Backend backend);
/// The GPU of rank `rank` on a machine with `gpus` GPUs. NCCL: cuda:`local_rank`
/// (LOCAL_RANK: one rank per GPU, as NCCL requires), acc::Error naming the rank and
/// the GPU when the machine has fewer. Gloo: ranks may share GPUs, cuda:(local_rank
/// mod gpus), so that several ranks can run on a one-GPU machine.
at::Device rank_gpu(int rank, int local_rank, int gpus, Backend backend = Backend::nccl);
/// The same, counting this machine's GPUs (none in a CPU build).
at::Device rank_gpu(int rank, int local_rank, Backend backend = Backend::nccl);
/// The local rank that picks this rank's GPU: a launcher's LOCAL_RANK, else (ranks
/// started by hand with --rank, or RANK alone) the rank modulo the machine's `gpus`,
/// so that rank 1 of two one-GPU machines uses GPU 0 and ranks 0..7 and 8..15 of two
/// eight-GPU machines use GPUs 0..7.
int rank_gpu_index(const Rendezvous& rendezvous, int gpus);

class ProcessGroupCollectives final : public Collectives {
public:
    /// Joins the process group described by `rendezvous`. NCCL puts tensors on
    /// cuda:LOCAL_RANK and needs a CUDA build (acc::UsageError otherwise).
    /// Throws acc::Error naming the missing ranks or the unreachable store.
    static std::unique_ptr<ProcessGroupCollectives> join(const Rendezvous& rendezvous, Backend backend = Backend::gloo);
    ~ProcessGroupCollectives() override;

    int rank() const override;
    int world_size() const override;

    /// Average is a sum followed by a division by the world size (Gloo has no
    /// average); integer tensors are divided with truncation.
    void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
    /// Counted when issued; the time spent issuing and in Work::wait() is added to traffic().seconds.
    /// The returned Work must be waited on (or destroyed) before this object.
    std::unique_ptr<Work> allreduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override;
    /// Exchanges the lengths first (not counted as data sent), then gathers padded copies.
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override;
    void broadcast(at::Tensor& tensor, int root) override;
    void barrier() override;
    /// Throws the lost-peer diagnosis if a collective queued so far failed. NCCL's
    /// wait() does not block the host, so a failure of the last collectives would go
    /// unseen: this waits for them (a barrier) and asks NCCL. Gloo's wait() reports
    /// each failure itself: nothing to do there, as with one rank.
    void confirm();
    const Traffic& traffic() const override;
    /// The rendezvous' timeout (--timeout), which also bounds each collective.
    double timeout_seconds() const override;

    // Beyond the interface.

    /// allgather into preallocated `outputs` (one per rank, each shaped like `tensor`).
    void allgather_into(const at::Tensor& tensor, std::vector<at::Tensor>& outputs);
    /// Sums `input` (world_size * output.numel() elements) over all ranks and
    /// leaves chunk `rank` in `output`. Counts input's bytes. On Gloo, which has
    /// no reduce-scatter algorithm, it is one allreduce of the whole input.
    void reduce_scatter(const at::Tensor& input, at::Tensor& output);
    void reset_traffic();

    int local_rank() const;
    Backend backend() const;
    /// Where tensors must live: cpu for Gloo, cuda:LOCAL_RANK for NCCL.
    at::Device device() const;
    /// Host name of every rank, in rank order.
    const std::vector<std::string>& hosts() const;

    /// Ends cleanly: returns once every rank has called finish() (or the
    /// timeout passed), so that no rank closes its connections while another
    /// still makes or uses them. Called by the destructor when no exception is
    /// in flight.
    void finish();
    /// Tells the other ranks why this one stops (they report "rank R stopped:
    /// <reason>" instead of a lost peer) and closes this rank's connections.
    /// For errors outside communication; never throws.
    void abort(const std::string& reason) noexcept;

    struct Impl;

private:
    explicit ProcessGroupCollectives(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

/// Runs this rank's part of a program in the group: when `work` returns, ends
/// cleanly (finish()) and returns its result; when it throws, tells the other
/// ranks why (abort(), so that they report "rank R stopped: ...") and rethrows.
int run_in_group(ProcessGroupCollectives& comm, const std::function<int()>& work);

}  // namespace acc::comm
