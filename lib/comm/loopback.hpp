// Collectives for one process that stands in for W identical workers: an allreduce
// sums W copies of the tensor, an allgather returns W views of it. compress-bench
// uses it to time decoding W payloads without a network; traffic is counted as
// lib/comm counts it.
#pragma once

#include "comm/collectives.hpp"

namespace acc::comm {

class LoopbackCollectives : public Collectives {
public:
    explicit LoopbackCollectives(int world_size);
    int rank() const override { return 0; }
    int world_size() const override { return world_; }
    void allreduce(at::Tensor& tensor, comm::ReduceOp op = comm::ReduceOp::sum) override;
    std::unique_ptr<comm::Work> allreduce_async(at::Tensor& tensor, comm::ReduceOp op = comm::ReduceOp::sum) override;
    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override;
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override;
    void broadcast(at::Tensor& tensor, int root) override;
    void barrier() override {}
    const comm::Traffic& traffic() const override { return traffic_; }

private:
    int world_;
    comm::Traffic traffic_;
};

}  // namespace acc::comm
