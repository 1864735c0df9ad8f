// Every difference between LibTorch 1.13 (Debian) and 2.x in the C++ APIs the
// toolkit meets (c10d's process groups and stores for lib/comm, c10's events for
// the compressors' device timing), in one place. Nothing else in the toolkit
// tests TORCH_VERSION_*.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>  // also without Gloo, whose header brought it in
#ifndef ACC_WITHOUT_GLOO  // cmake/AccTorch.cmake sets it where Gloo's headers are missing (pip's LibTorch)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>  // needs USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>
#ifdef C10_USE_GLOG
#include <glog/logging.h>
#endif
#ifdef ACC_HAVE_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>  // needs USE_C10D_NCCL
#endif

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace acc::comm::compat {

#define ACC_TORCH_AT_LEAST(major, minor) \
    (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// 1.13: ProcessGroupGloo/NCCL derive from ProcessGroup. 2.x: they derive from
// Backend, and ProcessGroup became a dispatching front end; we hold the
// concrete backend in both.
#if ACC_TORCH_AT_LEAST(2, 0)
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

/// Options of a TCPStore client (torchrun's agent store), set field by field:
/// 2.x added useLibUV (default true from 2.4, and builds without libuv then throw).
/// Never a server: torchrun's agent hosts that store, and a run without torchrun
/// has rank 0 serve its own (run_store.hpp), not a TCPStore. numWorkers
/// (c10::optional in 1.13, std::optional in 2.x) stays unset: lib/comm counts
/// arrivals itself to name the missing ranks.
inline c10d::TCPStoreOptions store_options(std::uint16_t port, std::chrono::milliseconds timeout) {
    c10d::TCPStoreOptions options;
    options.port = port;
    options.isServer = false;
    options.waitWorkers = false;
    options.timeout = timeout;
#if ACC_TORCH_AT_LEAST(2, 1)
    options.useLibUV = false;
#endif
    return options;
}

/// Whether this build has the Gloo backend (cmake/AccTorch.cmake checks for Gloo's headers).
#ifndef ACC_WITHOUT_GLOO
inline constexpr bool kHaveGloo = true;

/// Gloo transport devices. 2.x added a trailing `bool lazyInit = false`; the
/// default keeps the one-argument call valid in both.
inline std::shared_ptr<::gloo::transport::Device> gloo_device_for_host(const std::string& host) {
    return c10d::ProcessGroupGloo::createDeviceForHostname(host);
}
inline std::shared_ptr<::gloo::transport::Device> gloo_device_for_interface(const std::string& name) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(name);
}
#else
inline constexpr bool kHaveGloo = false;
#endif

#ifdef ACC_HAVE_CUDA
/// Releases NCCL's communicators at the end of a run. 2.2 added shutdown();
/// from 2.4 a group destroyed without it warns "destroy_process_group() was
/// not called". 1.13 frees them in the destructor.
inline void shutdown_nccl(c10d::ProcessGroupNCCL& pg) {
#if ACC_TORCH_AT_LEAST(2, 2)
    pg.shutdown();
#else
    (void)pg;
#endif
}

/// Aborts NCCL's communicators and pending collectives when a rank stops on an error,
/// instead of the destructor's wait for them (and, from 2.4, its warning that
/// destroy_process_group() was not called). 1.13's destructor aborts them itself.
inline void abort_nccl(c10d::ProcessGroupNCCL& pg) {
#if ACC_TORCH_AT_LEAST(2, 7)
    pg.abort();
#else
    (void)pg;
#endif
}

/// Binds an NCCL group to the rank's GPU and starts its communicator now (2.3 on).
/// Unbound, NCCL starts at the first collective, whose step then carries its set-up,
/// and a barrier guesses the device from the rank, with a warning. 1.13 has neither:
/// there NCCL starts at the first collective on the current device.
inline void bind_nccl_device(c10d::ProcessGroupNCCL& pg, const at::Device& device) {
#if ACC_TORCH_AT_LEAST(2, 3)
    pg.setBoundDeviceId(device);
    pg.eagerConnectSingleDevice(device);
#else
    (void)pg;
    (void)device;
#endif
}

/// What NCCL's watchdog has found since the group started, "" if nothing: a
/// collective that failed or timed out after its wait() had returned (wait() does
/// not block the host). Asked of getError() from 2.7 on; with an older LibTorch, ""
/// and the next collective reports such a failure.
inline std::string nccl_error(c10d::ProcessGroupNCCL& pg) {
#if ACC_TORCH_AT_LEAST(2, 7)
    switch (pg.getError()) {
        case c10d::ErrorType::SUCCESS:
            return "";
        case c10d::ErrorType::TIMEOUT:
            return "a collective made no progress within --timeout";
        case c10d::ErrorType::COMM_ERROR:
            return "NCCL reported an error in a collective";
        case c10d::ErrorType::REMOTE_ERROR:
            return "another rank's NCCL reported an error in a collective";
    }
    return "NCCL reported an error";
#else
    (void)pg;
    return "";
#endif
}
#endif

/// NCCL's environment switch for what its watchdog does with a collective that
/// failed or timed out; renamed in 2.x (the old name is deprecated there).
/// "2" (CleanUpOnly) aborts the communicators and leaves the process running.
#if ACC_TORCH_AT_LEAST(2, 2)
inline constexpr const char* kNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
#else
inline constexpr const char* kNcclAsyncErrorHandling = "NCCL_ASYNC_ERROR_HANDLING";
#endif
inline constexpr const char* kNcclCleanUpOnly = "2";

/// How a client shortens its store's timeout once a peer is lost. In 1.13 the
/// timeout of a wait becomes the socket's, so a short wait after setTimeout
/// bounds every later call. In 2.x a wait that times out asks the server to
/// stop waiting and blocks for its answer, which a hung server never gives;
/// setTimeout alone bounds the later calls there.
inline constexpr bool kWaitSetsSocketTimeout = !ACC_TORCH_AT_LEAST(2, 0);

/// c10d logs through glog in Debian's build (C10_USE_GLOG) and through its
/// own logger in pip builds. lib/comm reports failures itself, so the
/// backend's lines ("[c10d] The client socket has timed out ...") are shown
/// only when `verbose`.
inline void set_backend_logging(bool verbose) {
#ifdef C10_USE_GLOG
    FLAGS_minloglevel = verbose ? google::GLOG_INFO : google::GLOG_FATAL;
#else
    (void)verbose;
#endif
}

/// CUDA events that can say how much device time lay between them:
/// c10::Event::elapsedTime exists from 2.4 on. Without it (1.13), a caller
/// that times device work synchronises the device around each timed part.
#define ACC_TORCH_TIMED_EVENTS ACC_TORCH_AT_LEAST(2, 4)
inline constexpr bool kTimedEvents = ACC_TORCH_TIMED_EVENTS;

/// An event on `type` that records time stamps: BACKEND_DEFAULT is
/// cudaEventDefault (PyTorch's default flag disables timing), in both versions.
inline c10::Event timed_event(c10::DeviceType type) { return c10::Event(type, c10::EventFlag::BACKEND_DEFAULT); }

/// Milliseconds of device time from `start` to `end`, two completed events
/// made by timed_event; NaN where LibTorch cannot tell (kTimedEvents false).
inline double elapsed_ms(const c10::Event& start, const c10::Event& end) {
#if ACC_TORCH_TIMED_EVENTS
    return start.elapsedTime(end);
#else
    (void)start;
    (void)end;
    return std::numeric_limits<double>::quiet_NaN();
#endif
}

/// "1.13.0"
inline std::string torch_version() { return TORCH_VERSION; }

/// dst[i] = src[i] for every i: one multi-tensor kernel where LibTorch has one (2.1 on),
/// else a copy each.
inline void copy_each(std::vector<at::Tensor>& dst, const std::vector<at::Tensor>& src) {
#if ACC_TORCH_AT_LEAST(2, 1)
    at::_foreach_copy_(dst, src);
#else
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
#endif
}

}  // namespace acc::comm::compat
