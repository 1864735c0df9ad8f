#include "comm/group.hpp"

#include "base/clock.hpp"
#include "comm/c10d_allreduce.hpp"
#include "base/error.hpp"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

namespace acc::comm {
namespace {

std::int64_t byte_size(const at::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

c10d::ReduceOp to_c10d(ReduceOp op) { return op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM; }

// The backend's exceptions (a lost peer, a timeout) as the toolkit's, naming the collective.
template <typename F>
auto translated(const char* what, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const acc::Error&) {
        throw;
    } catch (const std::exception& e) {
        std::string message = e.what();
        message = message.substr(0, message.find('\n'));
        throw Error(std::string(what) + " failed: " + message);
    }
}

class GroupWork final : public PendingAllreduce {
public:
    GroupWork(c10::intrusive_ptr<c10d::Work> work, at::Tensor target, at::Tensor buffer, ReduceOp op, int world,
              Traffic& traffic)
        : PendingAllreduce(std::move(target), std::move(buffer), op, world, traffic.seconds), work_(std::move(work)) {}
    ~GroupWork() override { wait_quietly(); }

private:
    void wait_for_backend(SteadyClock::time_point) override {
        translated("allreduce", [&] { return work_->wait(); });
    }

    c10::intrusive_ptr<c10d::Work> work_;
};

}  // namespace

GroupCollectives::GroupCollectives(c10::intrusive_ptr<c10d::ProcessGroup> group) : group_(group) {
    if (!group) throw UsageError("process group: none given");
    rank_ = group->getRank();
    world_ = group->getSize();
}

c10::intrusive_ptr<c10d::ProcessGroup> GroupCollectives::group() const {
    auto group = group_.lock();
    if (!group) throw Error("process group: destroyed while the exchange still uses it");
    return group;
}

int GroupCollectives::rank() const { return rank_; }
int GroupCollectives::world_size() const { return world_; }

void GroupCollectives::allreduce(at::Tensor& tensor, ReduceOp op) { allreduce_async(tensor, op)->wait(); }

std::unique_ptr<Work> GroupCollectives::allreduce_async(at::Tensor& tensor, ReduceOp op) {
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto start = SteadyClock::now();
    auto work = translated("allreduce", [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::AllreduceOptions options;
        options.reduceOp = to_c10d(op);
        return group()->allreduce(tensors, options);
    });
    traffic_.calls += 1;
    traffic_.bytes += byte_size(tensor);
    traffic_.seconds += seconds_since(start);
    return std::make_unique<GroupWork>(std::move(work), tensor, buffer, op, world_size(), traffic_);
}

std::vector<at::Tensor> GroupCollectives::allgather(const at::Tensor& tensor) {
    const auto start = SteadyClock::now();
    at::Tensor input = tensor.contiguous();
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int r = 0; r < world_size(); ++r) outputs[0].push_back(at::empty_like(input, at::MemoryFormat::Contiguous));
    translated("allgather", [&] {
        std::vector<at::Tensor> in{input};
        group()->allgather(outputs, in)->wait();
        return 0;
    });
    traffic_.calls += 1;
    traffic_.bytes += byte_size(tensor);
    traffic_.seconds += seconds_since(start);
    return outputs[0];
}

std::vector<at::Tensor> GroupCollectives::allgather_unequal(const at::Tensor& tensor) {
    if (tensor.dim() != 1)
        throw Error("allgather_unequal: needs a 1-D tensor, not one of " + std::to_string(tensor.dim()) +
                    " dimensions");
    const Traffic before = traffic_;
    const auto start = SteadyClock::now();
    at::Tensor length = at::full({1}, tensor.numel(), at::TensorOptions().dtype(at::kLong).device(tensor.device()));
    std::int64_t longest = 0;
    std::vector<std::int64_t> sizes;
    for (const auto& l : allgather(length)) {
        sizes.push_back(l.cpu().item<std::int64_t>());
        longest = std::max(longest, sizes.back());
    }
    at::Tensor padded = at::zeros({longest}, tensor.options());
    padded.narrow(0, 0, tensor.numel()).copy_(tensor);
    std::vector<at::Tensor> parts = allgather(padded);
    for (size_t r = 0; r < parts.size(); ++r) parts[r] = parts[r].narrow(0, 0, sizes[r]);
    // One call, counting this rank's own part once.
    traffic_.calls = before.calls + 1;
    traffic_.bytes = before.bytes + byte_size(tensor);
    traffic_.seconds = before.seconds + seconds_since(start);
    return parts;
}

void GroupCollectives::broadcast(at::Tensor& tensor, int root) {
    if (root < 0 || root >= world_size())
        throw Error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                    std::to_string(world_size()));
    const auto start = SteadyClock::now();
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    translated("broadcast", [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        group()->broadcast(tensors, options)->wait();
        return 0;
    });
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
    traffic_.calls += 1;
    if (rank() == root) traffic_.bytes += byte_size(tensor);
    traffic_.seconds += seconds_since(start);
}

void GroupCollectives::barrier() {
    const auto start = SteadyClock::now();
    translated("barrier", [&] {
        group()->barrier()->wait();
        return 0;
    });
    traffic_.calls += 1;
    traffic_.seconds += seconds_since(start);
}

}  // namespace acc::comm
