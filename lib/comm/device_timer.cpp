#include "comm/device_timer.hpp"

#include "comm/torch_compat.hpp"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/cuda.h>
#ifdef ACC_HAVE_CUDA
#include <ATen/cuda/Sleep.h>
#endif

#include <deque>

namespace acc::comm {

// A deque: events are neither copied nor moved once made.
struct DeviceTimer::Events {
    std::deque<c10::Event> pool;
};

void DeviceTimer::begin_step(const at::Device& device, bool device_work) {
    device_ = device;
    if (!device_work || !device.is_cuda())
        method_ = Method::host_clock;
    else
        method_ = compat::kTimedEvents ? Method::events : Method::synchronize;
    used_ = 0;
    pending_.clear();
}

size_t DeviceTimer::record() {
    if (!events_) events_ = std::make_shared<Events>();
    if (used_ == events_->pool.size()) events_->pool.push_back(compat::timed_event(device_.type()));
    events_->pool[used_].record(c10::impl::VirtualGuardImpl(device_.type()).getStream(device_));
    return used_++;
}

DeviceTimer::Mark DeviceTimer::start() {
    Mark mark;
    if (method_ == Method::events) {
        mark.event = record();
        return mark;
    }
    if (method_ == Method::synchronize) torch::cuda::synchronize(device_.index());
    mark.host = Clock::now();
    return mark;
}

void DeviceTimer::stop(const Mark& from, double& seconds) {
    if (method_ == Method::events) {
        pending_.push_back({from.event, record(), &seconds});
        return;
    }
    if (method_ == Method::synchronize) torch::cuda::synchronize(device_.index());
    seconds += std::chrono::duration<double>(Clock::now() - from.host).count();
}

void DeviceTimer::hold(std::int64_t cycles) {
    if (method_ != Method::events || cycles <= 0) return;
#ifdef ACC_HAVE_CUDA
    const c10::DeviceGuard guard(device_);  // the sleep runs on the current device's current stream
    at::cuda::sleep(cycles);
#endif
}

bool DeviceTimer::reached(const Mark& mark) const {
    return method_ == Method::events && events_->pool[mark.event].query();
}

void DeviceTimer::finish_step() {
    if (pending_.empty()) return;
    torch::cuda::synchronize(device_.index());  // every event of the step has completed
    for (const Pending& p : pending_)
        *p.seconds += compat::elapsed_ms(events_->pool[p.start], events_->pool[p.end]) / 1e3;
    pending_.clear();
    used_ = 0;
}

}  // namespace acc::comm
