// The clock of a device step's timed parts (encode, decode). On a GPU, where a
// part's time should be the device's work rather than the time to queue it,
// each part is a pair of CUDA events on the device's stream, read once at the
// end of the step; with a LibTorch whose events cannot be timed (1.13), the
// device is synchronised before each clock reading instead. Everywhere else,
// and on a GPU when the device's work need not be timed (training), it is the
// host's clock.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace acc::compress {

class DeviceTimer {
public:
    using Clock = std::chrono::steady_clock;
    struct Mark {
        Clock::time_point host;
        size_t event = 0;
    };
    /// How the parts are timed, as begin_step chose it.
    enum class Method { host_clock, synchronize, events };

    /// Starts a step on `device`; `device_work`: a GPU's parts must hold its work.
    void begin_step(const at::Device& device, bool device_work);
    Method method() const { return method_; }
    /// The start of a part, and its end: adds the part's seconds to `seconds`, at
    /// once or (events) at finish_step. `seconds` must live until then.
    Mark start();
    void stop(const Mark& from, double& seconds);
    /// Adds the times of the parts still pending (events: one wait for the device).
    void finish_step();

private:
    struct Events;
    struct Pending {
        size_t start, end;
        double* seconds;
    };
    size_t record();

    Method method_ = Method::host_clock;
    at::Device device_{at::kCPU};
    std::shared_ptr<Events> events_;  // created at the first use; shared_ptr: Events is complete only in the .cpp
    size_t used_ = 0;                 // events recorded in this step
    std::vector<Pending> pending_;
};

}  // namespace acc::compress
