// LibTorch's profiler over part of a run (compress-bench's timed steps, a window of
// train-dist's and grad-dump's training steps), written as a Chrome trace
// (chrome://tracing, ui.perfetto.dev; docs/formats.md, "Traces"). The host's ATen
// operations always; on a GPU (LibTorch with Kineto) every kernel, copy and memset with
// its device time, so that a step's time splits into what the GPU ran and where it
// waited for the host. Named ranges (range()) mark what the run was doing.
#pragma once

#include <ATen/record_function.h>

#include <cstddef>
#include <memory>
#include <string>

namespace acc::trace {

/// Makes the missing directories above `path` and checks that it can be written
/// (acc::FileError otherwise), as a run does for its outputs before any work.
void check_destination(const std::string& path);

class Trace {
public:
    /// check_destination(path), then starts the profiler: host operations, and where
    /// `cuda` the GPU's activities.
    Trace(std::string path, bool cuda);
    ~Trace();  // stops the profiler without writing, unless finish() did
    Trace(const Trace&) = delete;
    Trace& operator=(const Trace&) = delete;

    /// Stops the profiler and writes the trace atomically; returns its events.
    std::size_t finish();

private:
    std::string path_;
    bool running_ = false;
};

/// A named range of the trace (category "range") for as long as the returned guard
/// lives; without a profiler running, nothing (an empty guard).
std::unique_ptr<at::RecordFunction> range(const std::string& name);

}  // namespace acc::trace
