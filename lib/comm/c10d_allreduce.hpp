// What both Collectives over c10d do with an allreduce: a Work whose wait() runs
// once (also from its destructor, errors swallowed there), and the result put in
// place: the average's division (Gloo has no average) and the copy back from the
// contiguous buffer handed to c10d.
#pragma once

#include "base/clock.hpp"
#include "comm/collectives.hpp"

#include <ATen/ATen.h>

#include <utility>

namespace acc::comm {

/// t /= world, truncating for integer tensors. CUDA divides a tensor by a host number
/// as a multiplication by its reciprocal, which can differ from the host's quotient in
/// the last bit; there the divisor is a 0-dim tensor on the device, which divides.
inline void divide_by_world(at::Tensor& t, int world) {
    if (t.is_cuda() && t.is_floating_point())
        t.div_(at::scalar_tensor(static_cast<double>(world), t.options()));
    else if (t.is_floating_point() || t.is_complex())
        t.div_(world);
    else
        t.div_(world, "trunc");
}

/// After the collective: `buffer` (what c10d reduced) into `target`, averaged for `op` average.
inline void finish_allreduce(at::Tensor& buffer, at::Tensor& target, ReduceOp op, int world) {
    if (op == ReduceOp::average) divide_by_world(buffer, world);
    if (!buffer.is_same(target)) target.copy_(buffer);
}

/// An allreduce in flight: wait_for_backend() waits for c10d's Work (throwing acc::Error
/// on failure); wait() then finishes the result and adds the waiting time to `seconds`.
class PendingAllreduce : public Work {
public:
    PendingAllreduce(at::Tensor target, at::Tensor buffer, ReduceOp op, int world, double& seconds)
        : target_(std::move(target)), buffer_(std::move(buffer)), op_(op), world_(world), seconds_(seconds) {}
    ~PendingAllreduce() override = default;
    void wait() final {
        if (done_) return;
        done_ = true;
        const auto start = SteadyClock::now();
        wait_for_backend(start);
        finish_allreduce(buffer_, target_, op_, world_);
        seconds_ += seconds_since(start);
    }

protected:
    /// Call from the derived class's destructor (wait() must not run after it is gone).
    void wait_quietly() noexcept {
        try {
            wait();
        } catch (...) {
        }
    }
    virtual void wait_for_backend(SteadyClock::time_point start) = 0;

private:
    at::Tensor target_, buffer_;
    ReduceOp op_;
    int world_;
    double& seconds_;
    bool done_ = false;
};

}  // namespace acc::comm
