#include "comm/loopback.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"

#include <chrono>

namespace acc::comm {
namespace {

class DoneWork : public comm::Work {
public:
    void wait() override {}
};

}  // namespace

LoopbackCollectives::LoopbackCollectives(int world_size) : world_(world_size) {
    if (world_size < 1) throw UsageError("world size must be at least 1, not " + std::to_string(world_size));
}

void LoopbackCollectives::allreduce(at::Tensor& tensor, comm::ReduceOp op) {
    auto t0 = std::chrono::steady_clock::now();
    // W equal contributions: the sum is W times the tensor; average and max leave it as it is.
    if (op == comm::ReduceOp::sum && world_ > 1) tensor.mul_(world_);
    traffic_.calls += 1;
    traffic_.bytes += static_cast<std::int64_t>(tensor.nbytes());
    traffic_.seconds += seconds_since(t0);
}

std::unique_ptr<comm::Work> LoopbackCollectives::allreduce_async(at::Tensor& tensor, comm::ReduceOp op) {
    allreduce(tensor, op);
    return std::make_unique<DoneWork>();
}

std::vector<at::Tensor> LoopbackCollectives::allgather(const at::Tensor& tensor) {
    traffic_.calls += 1;
    traffic_.bytes += static_cast<std::int64_t>(tensor.nbytes());
    return std::vector<at::Tensor>(static_cast<size_t>(world_), tensor);
}

std::vector<at::Tensor> LoopbackCollectives::allgather_unequal(const at::Tensor& tensor) { return allgather(tensor); }

void LoopbackCollectives::broadcast(at::Tensor& tensor, int root) {
    if (root < 0 || root >= world_) throw UsageError("broadcast root " + std::to_string(root) + " is not a rank");
    traffic_.calls += 1;
    traffic_.bytes += static_cast<std::int64_t>(tensor.nbytes());
}

}  // namespace acc::comm
