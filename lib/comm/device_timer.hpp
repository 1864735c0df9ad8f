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
#include <cstdint>
#include <memory>
#include <vector>

namespace acc::comm {

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
    /// Before start(): holds the device's stream for `cycles` GPU clock cycles
    /// (events only; else nothing), so that the part's start event is reached
    /// after the host has queued the part and its time holds none of the host's
    /// time to queue it.
    void hold(std::int64_t cycles);
    /// Whether the device had reached `mark`'s start event when this is called.
    /// After queuing a held part, true means the hold was shorter than the host's
    /// time to queue it. Always false unless the method is events.
    bool reached(const Mark& mark) const;
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

}  // namespace acc::comm
