// The Collectives interface over a c10d process group made elsewhere: the one a
// PyTorch script made with torch.distributed (the Python package's hook runs the
// toolkit's exchange over the user's DDP group). Unlike ProcessGroupCollectives it
// neither joins nor watches the group: a failed collective throws acc::Error with
// the backend's message, and the group's own timeout applies. It does not keep the
// group alive either (a weak reference): the group ends when its owner ends it,
// not when the last object that used it is freed, perhaps during the
// interpreter's teardown, where a Gloo group's threads can abort the process.
//
// Not thread-safe: one thread issues the collectives (DDP's hooks run on one).
#pragma once

#include "comm/collectives.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <vector>

namespace acc::comm {

class GroupCollectives final : public Collectives {
public:
    explicit GroupCollectives(c10::intrusive_ptr<c10d::ProcessGroup> group);

    int rank() const override;
    int world_size() const override;
    void allreduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
    std::unique_ptr<Work> allreduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::sum) override;
    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override;
    /// Exchanges the lengths first (not counted as data sent), then gathers padded copies.
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override;
    void broadcast(at::Tensor& tensor, int root) override;
    void barrier() override;
    const Traffic& traffic() const override { return traffic_; }

private:
    /// The group, or acc::Error once it has been destroyed.
    c10::intrusive_ptr<c10d::ProcessGroup> group() const;

    c10::weak_intrusive_ptr<c10d::ProcessGroup> group_;
    int rank_ = 0, world_ = 1;
    Traffic traffic_;
};

}  // namespace acc::comm
