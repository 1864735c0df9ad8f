#include "trace/trace.hpp"

#include "base/error.hpp"
#include "base/paths.hpp"
#include "io/atomic.hpp"

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

namespace acc::trace {

namespace {

namespace profiler = torch::autograd::profiler;
namespace profiler_impl = torch::profiler::impl;

profiler_impl::ProfilerConfig config() {
    return profiler_impl::ProfilerConfig(profiler_impl::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                         /*profile_memory=*/false);
}

std::set<profiler_impl::ActivityType> activities(bool cuda) {
    std::set<profiler_impl::ActivityType> a{profiler_impl::ActivityType::CPU};
    if (cuda) a.insert(profiler_impl::ActivityType::CUDA);
    return a;
}

// An event's start and duration in nanoseconds: LibTorch 1.13's KinetoEvent has startUs
// and durationUs, 2.x's startNs and durationNs (told apart by what the type has, not
// by version).
template <class Event, class = void>
struct Nanoseconds : std::false_type {};
template <class Event>
struct Nanoseconds<Event, std::void_t<decltype(std::declval<const Event&>().startNs())>> : std::true_type {};

struct Span {
    std::uint64_t start_ns, duration_ns;
};

template <class Event>
Span span_of(const Event& e) {
    if constexpr (Nanoseconds<Event>::value)
        return {e.startNs(), e.durationNs()};
    else
        return {e.startUs() * 1000, e.durationUs() * 1000};
}

}  // namespace

void check_destination(const std::string& path) {
    create_parent_directories(path);
    io::check_writable_destination(path);
}

Trace::Trace(std::string path, bool cuda) : path_(std::move(path)) {
    check_destination(path_);
    // A CUDA LibTorch's Kineto looks for GPUs even for a CPU trace and logs an error
    // where it finds none; a user's own KINETO_LOG_LEVEL wins.
    if (!cuda) ::setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
    try {
        profiler::prepareProfiler(config(), activities(cuda));
        profiler::enableProfiler(config(), activities(cuda));
    } catch (const c10::Error& e) {
        throw Error(std::string("--trace: LibTorch's profiler did not start: ") + e.what_without_backtrace());
    }
    running_ = true;
}

Trace::~Trace() {
    if (!running_) return;
    try {
        profiler::disableProfiler();
    } catch (...) {  // nothing to report from a destructor: the run already failed
    }
}

std::unique_ptr<at::RecordFunction> range(const std::string& name) {
    if (!at::hasCallbacks()) return nullptr;  // the trainer's every step: no allocation
    auto guard = std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE);
    if (guard->isActive()) guard->before(name);
    return guard;
}

std::size_t Trace::finish() {
    running_ = false;
    const std::unique_ptr<profiler::ProfilerResult> result = profiler::disableProfiler();
    const auto& events = result->events();
    std::uint64_t first = UINT64_MAX;
    for (const auto& e : events) first = std::min(first, span_of(e).start_ns);
    nlohmann::json trace = nlohmann::json::array();
    for (const auto& e : events) {
        const Span span = span_of(e);
        const bool host = e.deviceType() == c10::DeviceType::CPU;
        const bool ranged = host && e.scope() == static_cast<std::uint8_t>(at::RecordScope::USER_SCOPE);
        nlohmann::json event = {
            {"name", e.name()},
            {"ph", "X"},
            {"cat", ranged ? "range" : host ? "operation" : "device"},
            {"pid", host ? std::string("host") : "GPU " + std::to_string(static_cast<int>(e.deviceIndex()))},
            {"tid", host ? static_cast<std::int64_t>(e.startThreadId()) : e.deviceResourceId()},
            {"ts", static_cast<double>(span.start_ns - first) / 1e3},
            {"dur", static_cast<double>(span.duration_ns) / 1e3},
        };
        trace.push_back(std::move(event));
    }
    const nlohmann::json document = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ns"}};
    io::AtomicPath out(path_);
    {
        std::ofstream f(out.temp());
        f << document.dump() << '\n';
        if (!f.flush()) throw FileError(path_, "cannot write the trace");
    }
    out.commit();
    return events.size();
}

}  // namespace acc::trace
