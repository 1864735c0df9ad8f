// Inside ProcessGroupCollectives, shared by the files that do its three jobs:
// joining.cpp (the store, the run token, the rendezvous, the process group),
// liveness.cpp (the heartbeat, the lost-peer diagnosis, a clean end or a stop) and
// process_group.cpp (the collectives). Only those files include it.
#pragma once

#include "base/clock.hpp"
#include "comm/process_group.hpp"
#include "comm/run_store.hpp"
#include "comm/torch_compat.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace acc::comm {
namespace internal {

using Clock = SteadyClock;
using std::chrono::milliseconds;

// Store operations after a failure: short, so that a dead or stopped store
// cannot stall the report much beyond --timeout.
constexpr milliseconds kDiagnosisTimeout{2000};

inline milliseconds to_ms(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5)); }

// "0.3 s", "12 s"
inline std::string seconds_text(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, seconds < 10 ? "%.1f s" : "%.0f s", seconds);
    return text;
}

inline std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
inline std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

// Gloo and NCCL report problems as c10::Error, gloo exceptions or
// std::runtime_error; keep the first line and drop c10's source locations.
inline std::string backend_message(const std::exception& e) {
    std::string text = e.what();
    size_t newline = text.find('\n');
    if (newline != std::string::npos) text.resize(newline);
    return text;
}

inline bool looks_like_timeout(const std::string& message) {
    return message.find("Timed out") != std::string::npos || message.find("timed out") != std::string::npos ||
           message.find("Timeout") != std::string::npos || message.find("timeout") != std::string::npos;
}

// A rank as it announced itself at the rendezvous.
struct Member {
    std::string host;
    std::string pid;
};

}  // namespace internal

struct ProcessGroupCollectives::Impl {
    Rendezvous rendezvous;
    Backend backend = Backend::gloo;
    at::Device device{at::kCPU};
    std::unique_ptr<RunStoreServer> server;      // the run's store, on rank 0
    c10::intrusive_ptr<c10d::Store> base_store;  // a RunStoreClient, torchrun's TCPStore, or a HashStore for one rank
    RunStoreClient* run_store = nullptr;         // base_store as the run's store, when it is one
    c10d::TCPStore* tcp_store = nullptr;         // base_store as torchrun's agent store, when it is one
    c10::intrusive_ptr<c10d::Store> store;       // base_store, under torchrun's attempt prefix
    c10::intrusive_ptr<compat::BackendBase> pg;
    bool hosts_store = false;
    std::string space;  // this run's key names, derived from its token
    std::vector<internal::Member> members;
    std::vector<std::string> hosts;
    Traffic traffic;
    std::optional<std::string> failure;  // set once a collective failed; every later call rethrows it
    bool finished = false;

    // Heartbeat.
    std::thread heartbeat;
    std::mutex heartbeat_mutex;
    std::condition_variable heartbeat_wake;
    bool heartbeat_stop = false;


    ~Impl();
    // Frees the backend's resources explicitly (NCCL's communicators), at the
    // end of every run, finished or failed.
    void shutdown_backend() noexcept;
    int rank() const { return rendezvous.rank; }
    // Whether the ranks share a store over the network (not one rank's HashStore).
    bool shares_store() const { return run_store || tcp_store; }
    int world() const { return rendezvous.world_size; }
    // Keys live under a name only the run token gives, so that a process
    // without it can neither read nor plant them.
    std::string key(const std::string& name) const { return "acc/" + space + "/" + name; }
    void start_heartbeat();
    void stop_heartbeat();
    // Ranks whose heartbeat did not move during kSilenceWindow.
    std::vector<int> silent_ranks();
    std::string who(const std::vector<int>& ranks) const;
    // Bounds every later store call by kDiagnosisTimeout, so that a stopped
    // store host cannot make the diagnosis wait a second --timeout.
    void shorten_store_timeout();
    // Closes this rank's connections so that peers blocked on it fail at once.
    void close_connections() noexcept;
    // The store host keeps the store until the ranks still alive have read the diagnosis.
    void linger() noexcept;
    // Publishes `message` unless another rank was first, and marks it read by
    // this rank; returns the message every rank reports. `readers`: the ranks
    // still alive, who will read it.
    std::string publish(const std::string& message, std::int64_t readers);
    [[noreturn]] void fail(const char* op, SteadyClock::time_point start, const std::exception& error);

    // Collectives (process_group.cpp).
    // Throws the failure every call after the first one rethrows, or that the group is closed.
    void check_usable() const;
    // Runs one blocking collective: checks, times, counts, and turns a backend failure into a diagnosis.
    template <class Issue>
    void run(const char* op, std::int64_t bytes, Issue&& issue);
};

}  // namespace acc::comm
