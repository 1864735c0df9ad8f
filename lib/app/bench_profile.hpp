// compress-bench --profile: LibTorch's profiler around the timed steps, written as a
// Chrome trace (chrome://tracing, ui.perfetto.dev). The host's ATen operations always;
// on a GPU (LibTorch with Kineto) every kernel, copy and memset with its device time,
// so that a step's time splits into what the GPU ran and where it waited for the host.
// Ranges mark each compressor's timed steps and each step (BenchProfile::range).
#pragma once

#include <ATen/record_function.h>

#include <memory>
#include <string>

namespace acc::app {

class BenchProfile {
public:
    /// Checks that `path` can be written (acc::FileError otherwise) and starts the
    /// profiler: host operations, and where `cuda` the GPU's activities.
    BenchProfile(std::string path, bool cuda);
    ~BenchProfile();  // stops the profiler without writing, unless finish() did
    BenchProfile(const BenchProfile&) = delete;
    BenchProfile& operator=(const BenchProfile&) = delete;

    /// Stops the profiler and writes the trace atomically; returns its events.
    std::size_t finish();

    /// A named range of the trace for as long as the returned guard lives ("range" in
    /// the trace's categories); a no-op without a profiler running.
    static std::unique_ptr<at::RecordFunction> range(const std::string& name);

private:
    std::string path_;
    bool running_ = false;
};

}  // namespace acc::app
