#include "comm/process_group.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/c10d_allreduce.hpp"
#include "comm/store_server.hpp"
#include "comm/torch_compat.hpp"

#include <c10/util/hash.h>

#ifdef ACC_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

namespace acc::comm {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kHeartbeatPeriod{500};
// Long enough for a live rank to beat at least twice.
constexpr milliseconds kSilenceWindow{1600};
// Store operations after a failure: short, so that a dead or stopped store
// cannot stall the report much beyond --timeout.
constexpr milliseconds kDiagnosisTimeout{2000};
// How long the rank hosting the store keeps it for the others to read the diagnosis.
constexpr milliseconds kLinger{5000};
// How long a rank looks for the host's mark in its run's name space before it
// concludes that the store was opened with another token: the host sets the
// mark as soon as the store listens.
constexpr milliseconds kTokenGrace{5000};


milliseconds to_ms(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000 + 0.5)); }

// "0.3 s", "12 s"
std::string seconds_text(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, seconds < 10 ? "%.1f s" : "%.0f s", seconds);
    return text;
}

std::vector<std::uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }
std::string text_of(const std::vector<std::uint8_t>& bytes) { return {bytes.begin(), bytes.end()}; }

std::string hostname() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
    return name;
}

bool is_loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

// The local address this machine uses to reach `host`: the address Gloo must
// listen on so that peers on the same network (or in the same network
// namespace) can connect to it. Unused in builds without Gloo.
[[maybe_unused]] std::string local_address_towards(const std::string& host, int port) {
    if (is_loopback(host)) return "127.0.0.1";
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found)
        throw Error("--master-addr " + host + ": cannot resolve this host name");
    std::string result;
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    socklen_t length = sizeof local;
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
        char text[INET_ADDRSTRLEN] = {};
        if (::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) result = text;
    }
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
    if (result.empty()) throw Error("--master-addr " + host + ": no route from this machine to it");
    return result;
}

// Gloo and NCCL report problems as c10::Error, gloo exceptions or
// std::runtime_error; keep the first line and drop c10's source locations.
std::string backend_message(const std::exception& e) {
    std::string text = e.what();
    size_t newline = text.find('\n');
    if (newline != std::string::npos) text.resize(newline);
    return text;
}

bool looks_like_timeout(const std::string& message) {
    return message.find("Timed out") != std::string::npos || message.find("timed out") != std::string::npos ||
           message.find("Timeout") != std::string::npos || message.find("timeout") != std::string::npos;
}

// Waits until something accepts connections at host:port, trying every 20 ms.
// TCPStore's own client retries only once a second, which would add a second
// to every start where a rank is quicker than rank 0.
bool wait_for_listener(const std::string& host, int port, Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) return false;
    bool listening = false;
    while (!listening && Clock::now() < deadline) {
        for (addrinfo* a = found; a && !listening; a = a->ai_next) {
            int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) continue;
            listening = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
            ::close(fd);
        }
        if (!listening) std::this_thread::sleep_for(milliseconds(20));
    }
    ::freeaddrinfo(found);
    return listening;
}

// Bounds every read and write on this process's connections to `port` (the
// store's). LibTorch 2.x's store client reads without a timeout once it has
// sent a request (compat::kWaitSetsSocketTimeout), so a store host that hangs
// would hold the lost-peer diagnosis forever; with the bound its calls fail.
void bound_store_connections(int port, milliseconds timeout) {
    DIR* fds = ::opendir("/proc/self/fd");
    if (!fds) return;
    timeval bound{};
    bound.tv_sec = static_cast<time_t>(timeout.count() / 1000);
    bound.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
    while (const dirent* entry = ::readdir(fds)) {
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        const int fd = std::atoi(entry->d_name);
        sockaddr_storage peer{};
        socklen_t length = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) continue;
        int peer_port = -1;
        if (peer.ss_family == AF_INET) peer_port = ntohs(reinterpret_cast<const sockaddr_in*>(&peer)->sin_port);
        if (peer.ss_family == AF_INET6) peer_port = ntohs(reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_port);
        if (peer_port != port) continue;
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
    }
    ::closedir(fds);
}

struct Member {
    std::string host;
    std::string pid;
};

}  // namespace

void check_backend_available(Backend backend) {
#ifndef ACC_HAVE_CUDA
    if (backend == Backend::nccl)
        throw UsageError("the nccl backend needs a build against a CUDA LibTorch; this one has Gloo only");
#endif
    if (backend == Backend::gloo && !compat::kHaveGloo)
        throw UsageError("the gloo backend (--device cpu) is not in this build: its LibTorch came without Gloo's "
                         "headers; use --device cuda (nccl)");
}

at::Device rank_gpu(int rank, int local_rank, int gpus, Backend backend) {
    if (backend == Backend::gloo && gpus > 0 && local_rank >= 0) local_rank %= gpus;
    if (local_rank < 0 || local_rank >= gpus)
        throw Error("rank " + std::to_string(rank) + " needs GPU " + std::to_string(local_rank) +
                    " (LOCAL_RANK), but this machine has " + std::to_string(gpus) +
                    (gpus == 1 ? " GPU" : " GPUs") + "; start at most one rank per GPU");
    return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

at::Device rank_gpu(int rank, int local_rank, Backend backend) {
    return rank_gpu(rank, local_rank, static_cast<int>(torch::cuda::device_count()), backend);
}

int rank_gpu_index(const Rendezvous& rendezvous, int gpus) {
    if (rendezvous.local_rank_given || gpus < 1) return rendezvous.local_rank;
    return rendezvous.rank % gpus;
}

struct ProcessGroupCollectives::Impl {
    Rendezvous rendezvous;
    Backend backend = Backend::gloo;
    at::Device device{at::kCPU};
    c10::intrusive_ptr<c10d::Store> base_store;  // the TCPStore (or HashStore for one rank)
    c10d::TCPStore* tcp_store = nullptr;         // base_store as a TCPStore, when it is one
    c10::intrusive_ptr<c10d::Store> store;       // base_store, under torchrun's attempt prefix
    c10::intrusive_ptr<compat::BackendBase> pg;
    bool hosts_store = false;
    std::string space;  // this run's key names, derived from its token
    std::vector<Member> members;
    std::vector<std::string> hosts;
    Traffic traffic;
    std::optional<std::string> failure;  // set once a collective failed; every later call rethrows it
    bool finished = false;

    // Heartbeat.
    std::thread heartbeat;
    std::mutex heartbeat_mutex;
    std::condition_variable heartbeat_wake;
    bool heartbeat_stop = false;

    ~Impl() {
        stop_heartbeat();
        shutdown_backend();
        pg.reset();
        store.reset();
        base_store.reset();
    }

    // Frees the backend's resources explicitly (NCCL's communicators), at the
    // end of every run, finished or failed.
    void shutdown_backend() noexcept {
#ifdef ACC_HAVE_CUDA
        if (pg && backend == Backend::nccl) {
            try {
                compat::shutdown_nccl(static_cast<c10d::ProcessGroupNCCL&>(*pg));
            } catch (const std::exception& e) {
                spdlog::debug("shutting down the nccl process group: {}", backend_message(e));
            }
        }
#endif
    }

    int rank() const { return rendezvous.rank; }
    int world() const { return rendezvous.world_size; }
    // Keys live under a name only the run token gives, so that a process
    // without it can neither read nor plant them.
    std::string key(const std::string& name) const { return "acc/" + space + "/" + name; }

    void start_heartbeat() {
        heartbeat = std::thread([this] {
            std::int64_t beat = 0;
            std::unique_lock<std::mutex> lock(heartbeat_mutex);
            while (!heartbeat_stop) {
                lock.unlock();
                try {
                    store->set(key("heartbeat/" + std::to_string(rank())), bytes_of(std::to_string(++beat)));
                } catch (const std::exception&) {
                    return;  // the store is gone; the next collective will report why
                }
                lock.lock();
                heartbeat_wake.wait_for(lock, kHeartbeatPeriod, [this] { return heartbeat_stop; });
            }
        });
    }

    void stop_heartbeat() {
        {
            std::lock_guard<std::mutex> lock(heartbeat_mutex);
            heartbeat_stop = true;
        }
        heartbeat_wake.notify_all();
        if (heartbeat.joinable()) heartbeat.join();
    }

    // Ranks whose heartbeat did not move during kSilenceWindow.
    std::vector<int> silent_ranks() {
        auto read = [this] {
            std::vector<std::string> beats(static_cast<size_t>(world()));
            for (int r = 0; r < world(); ++r) {
                const std::string k = key("heartbeat/" + std::to_string(r));
                if (r != rank() && store->check({k})) beats[static_cast<size_t>(r)] = text_of(store->get(k));
            }
            return beats;
        };
        const auto before = read();
        std::this_thread::sleep_for(kSilenceWindow);
        const auto after = read();
        std::vector<int> silent;
        for (int r = 0; r < world(); ++r)
            if (r != rank() && before[static_cast<size_t>(r)] == after[static_cast<size_t>(r)]) silent.push_back(r);
        return silent;
    }

    std::string who(const std::vector<int>& ranks) const {
        std::vector<std::string> parts;
        for (int r : ranks) {
            std::string text = std::to_string(r);
            if (static_cast<size_t>(r) < members.size())
                text += " (host " + members[static_cast<size_t>(r)].host + ", pid " +
                        members[static_cast<size_t>(r)].pid + ")";
            parts.push_back(text);
        }
        return (ranks.size() == 1 ? "rank " : "ranks ") + acc::join(parts, ", ");
    }

    // TCPStore::setTimeout alone bounds only later wait() calls: get, add and
    // check keep the socket timeout of the last wait (--timeout, from the
    // rendezvous), so a stopped store host would make the diagnosis wait a
    // second --timeout. A wait on a key that exists applies the short one.
    void shorten_store_timeout() {
        tcp_store->setTimeout(kDiagnosisTimeout);
        if (compat::kWaitSetsSocketTimeout)
            store->wait({key("member/" + std::to_string(rank()))}, kDiagnosisTimeout);
        else
            bound_store_connections(rendezvous.master_port, kDiagnosisTimeout);
    }

    // Closes this rank's connections so that peers blocked on it fail at once.
    void close_connections() noexcept {
        try {
#ifdef ACC_HAVE_CUDA
            if (pg && backend == Backend::nccl) compat::abort_nccl(static_cast<c10d::ProcessGroupNCCL&>(*pg));
#endif
            pg.reset();
        } catch (...) {
        }
    }

    // The store host keeps the store until the ranks still alive have read the diagnosis.
    void linger() noexcept {
        if (!hosts_store) return;
        // NCCL's peers see no closed connection: they fail only when the watchdog ends
        // their collective, up to --timeout later, and then come for the reason.
        const auto deadline =
            Clock::now() + kLinger + (backend == Backend::nccl ? to_ms(rendezvous.timeout) : milliseconds(0));
        try {
            const std::int64_t readers = std::stoll(text_of(store->get(key("failure_readers"))));
            while (Clock::now() < deadline && store->add(key("failure_seen"), 0) < readers)
                std::this_thread::sleep_for(milliseconds(50));
        } catch (...) {
        }
    }

    // Publishes `message` unless another rank was first, and marks it read by
    // this rank; returns the message every rank reports. `readers`: the ranks
    // still alive, who will read it.
    std::string publish(const std::string& message, std::int64_t readers) {
        std::string result = message;
        if (store->add(key("failures"), 1) == 1) {
            store->set(key("failure_readers"), bytes_of(std::to_string(readers)));
            store->set(key("failure"), bytes_of(message));
        } else {
            store->wait({key("failure")}, kDiagnosisTimeout);
            result = text_of(store->get(key("failure")));
        }
        store->add(key("failure_seen"), 1);
        return result;
    }

    [[noreturn]] void fail(const char* op, Clock::time_point start, const std::exception& error) {
        const double elapsed = seconds_since(start);
        const std::string detail = backend_message(error);
        // NCCL's watchdog aborts the communicators of a collective that made no progress
        // within --timeout; the next call fails at once ("... communicator was aborted"),
        // so the cause is the timeout, and that call's own time says nothing.
        const bool aborted = backend == Backend::nccl && detail.find("aborted") != std::string::npos;
        const bool timed_out = aborted || looks_like_timeout(detail) || elapsed >= rendezvous.timeout * 0.95;
        const std::string after = aborted ? std::string() : " after " + seconds_text(elapsed);
        std::string message;
        if (world() == 1 || !tcp_store) {
            message = std::string(op) + " failed" + after + ": " + detail;
        } else {
            try {
                shorten_store_timeout();
                if (store->check({key("failure")})) {
                    message = publish("", world());
                } else {
                    const std::vector<int> lost = silent_ranks();
                    std::string diagnosis;
                    if (!lost.empty()) {
                        diagnosis =
                            who(lost) + " lost during " + op + after +
                            (timed_out ? " (no progress within --timeout " + seconds_text(rendezvous.timeout) + ")"
                                       : " (connection closed)");
                    } else if (timed_out) {
                        diagnosis = std::string(op) + " timed out" + after + " on rank " +
                                    std::to_string(rank()) +
                                    ": every rank is alive, but not all joined it (a rank busy for longer than "
                                    "--timeout, or ranks calling different collectives)";
                    } else {
                        diagnosis = std::string(op) + " failed" + after + " on rank " +
                                    std::to_string(rank()) + ": " + detail;
                    }
                    message = publish(diagnosis, world() - static_cast<std::int64_t>(lost.size()));
                }
                failure = message;
                close_connections();
                linger();
            } catch (const std::exception&) {
                // The store does not answer: whoever hosted it is gone.
                if (!rendezvous.agent_store && rank() != 0)
                    message = who({0}) + " lost during " + op + after +
                              " (it hosted the rendezvous store, which no longer answers)";
                else
                    message = std::string(op) + " failed" + after +
                              " and the rendezvous store at " + rendezvous.master_addr + ":" +
                              std::to_string(rendezvous.master_port) + " no longer answers: " + detail;
            }
        }
        failure = message;
        close_connections();
        throw Error(message);
    }

    void check_usable() const {
        if (failure) throw Error(*failure);
        if (!pg) throw Error("the process group is closed");
    }

    // Runs one blocking collective: checks, times, counts, and turns a backend failure into a diagnosis.
    template <class Issue>
    void run(const char* op, std::int64_t bytes, Issue&& issue) {
        check_usable();
        const auto start = Clock::now();
        try {
            c10::intrusive_ptr<c10d::Work> work = issue();
            work->wait();
        } catch (const acc::Error&) {
            throw;
        } catch (const std::exception& e) {
            fail(op, start, e);
        }
        traffic.calls += 1;
        traffic.bytes += bytes;
        traffic.seconds += seconds_since(start);
    }
};

namespace {

class AsyncWork final : public PendingAllreduce {
public:
    AsyncWork(ProcessGroupCollectives::Impl* impl, c10::intrusive_ptr<c10d::Work> work, at::Tensor target,
              at::Tensor buffer, ReduceOp op)
        : PendingAllreduce(std::move(target), std::move(buffer), op, impl->world(), impl->traffic.seconds),
          impl_(impl), work_(std::move(work)) {}
    ~AsyncWork() override { wait_quietly(); }

private:
    void wait_for_backend(SteadyClock::time_point start) override {
        impl_->check_usable();
        try {
            work_->wait();
        } catch (const acc::Error&) {
            throw;
        } catch (const std::exception& e) {
            impl_->fail("allreduce", start, e);
        }
    }

    ProcessGroupCollectives::Impl* impl_;
    c10::intrusive_ptr<c10d::Work> work_;
};

c10d::ReduceOp to_c10d(ReduceOp op) { return op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM; }

std::int64_t byte_size(const at::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

void connect_store(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    const milliseconds timeout = to_ms(rv.timeout);
    if (rv.world_size == 1) {
        impl.base_store = c10::make_intrusive<c10d::HashStore>();
        impl.store = impl.base_store;
        return;
    }
    impl.hosts_store = rv.rank == 0 && !rv.agent_store;
    const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
    if (!impl.hosts_store && !wait_for_listener(rv.master_addr, rv.master_port, Clock::now() + timeout))
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + " cannot reach the store at " + where + " within " +
                    seconds_text(rv.timeout) + "; " +
                    (rv.agent_store ? "is torchrun's agent still running?" : "did rank 0 start?"));
    try {
        auto tcp = impl.hosts_store
                       ? start_store_server(rv.master_addr, rv.master_port, timeout)
                       : c10::make_intrusive<c10d::TCPStore>(
                             rv.master_addr,
                             compat::store_options(static_cast<std::uint16_t>(rv.master_port), false, timeout));
        impl.tcp_store = tcp.get();
        impl.base_store = tcp;
    } catch (const acc::Error&) {
        throw;
    } catch (const std::exception& e) {
        const std::string detail = backend_message(e);
        if (impl.hosts_store)
            throw Error("--master-port " + std::to_string(rv.master_port) +
                        ": rank 0 cannot open the rendezvous store there (" + detail + ")");
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + " cannot reach the store at " + where + " within " +
                    seconds_text(rv.timeout) + (looks_like_timeout(detail) ? "" : " (" + detail + ")") + "; " +
                    (rv.agent_store ? "is torchrun's agent still running?" : "did rank 0 start?"));
    }
    impl.store = impl.base_store;
    if (rv.agent_store)
        impl.store = c10::make_intrusive<c10d::PrefixStore>(agent_store_prefix(rv.restart_count), impl.base_store);
}

// A rendezvous that failed: the first rank to see it publishes why, so that the
// ranks still waiting report the same cause; the rank hosting the store keeps
// it until the `arrived` ranks have read it (or a few seconds passed).
[[noreturn]] void fail_rendezvous(ProcessGroupCollectives::Impl& impl, const std::string& message, int arrived) {
    try {
        if (impl.store->add(impl.key("rendezvous_failures"), 1) == 1)
            impl.store->set(impl.key("rendezvous_failure"), bytes_of(message));
        if (impl.hosts_store) {
            const auto deadline = Clock::now() + kDiagnosisTimeout;
            while (Clock::now() < deadline && impl.store->add(impl.key("rendezvous_seen"), 0) < arrived - 1)
                std::this_thread::sleep_for(milliseconds(20));
        } else {
            impl.store->add(impl.key("rendezvous_seen"), 1);
        }
    } catch (const std::exception&) {
    }
    throw Error(message);
}

std::string token_hash(const std::string& purpose, const std::string& token) {
    return c10::sha1("accordion run token, " + purpose + ": " + token).str();
}

// A rank presents its run token. Every key a run reads or writes lies in the
// token's name space, so that a process without the token can neither read
// them nor plant one the run trusts; keys outside it are never read. The rank
// hosting the store marks it there at once, and any other rank must find that
// mark: a rank with another token looks in another name space and is turned away.
void present_token(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    // One rank has a store in memory; torchrun's agent store is hosted by no rank.
    if (!impl.tcp_store || rv.agent_store) return;
    const std::string mark = impl.key("store");
    const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
    try {
        if (impl.hosts_store) {
            impl.store->set(mark, bytes_of("1"));
            return;
        }
        // Half the timeout at most: the host's own rendezvous must still be waiting.
        const auto deadline = Clock::now() + std::min(to_ms(rv.timeout / 2), kTokenGrace);
        while (!impl.store->check({mark})) {
            if (Clock::now() >= deadline)
                throw Error("rendezvous at " + where +
                            ": the store there belongs to another run (it was opened with another run token); give "
                            "every rank the same " + kRunTokenVariable + ", or none");
            std::this_thread::sleep_for(milliseconds(20));
        }
    } catch (const acc::Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error("rendezvous at " + where + " failed: the store stopped answering (" + backend_message(e) + ")");
    }
}

// Every rank announces itself and waits for the others, so that a rank that
// never arrives is named.
void meet(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    const std::string me = std::to_string(rv.rank);
    const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
    present_token(impl);
    if (impl.store->add(impl.key("claims/" + me), 1) > 1)
        throw Error("rendezvous: rank " + me + " was started twice (another process already joined as rank " + me +
                    ")");
    impl.store->set(impl.key("member/" + me),
                    bytes_of(hostname() + "\t" + std::to_string(::getpid()) + "\t" + std::to_string(rv.world_size)));
    std::vector<std::string> keys;
    for (int r = 0; r < rv.world_size; ++r) keys.push_back(impl.key("member/" + std::to_string(r)));
    const std::string failure = impl.key("rendezvous_failure");
    const auto deadline = Clock::now() + to_ms(rv.timeout);
    for (;;) {
        std::vector<int> missing;
        try {
            if (impl.store->check(keys)) break;
            if (impl.store->check({failure})) {
                const std::string message = text_of(impl.store->get(failure));
                impl.store->add(impl.key("rendezvous_seen"), 1);
                throw Error(message);
            }
            if (Clock::now() >= deadline)
                for (int r = 0; r < rv.world_size; ++r)
                    if (!impl.store->check({keys[static_cast<size_t>(r)]})) missing.push_back(r);
        } catch (const acc::Error&) {
            throw;
        } catch (const std::exception& e) {
            throw Error("rendezvous at " + where + " failed: the store stopped answering (" + backend_message(e) + ")");
        }
        if (!missing.empty()) {
            std::vector<std::string> names;
            for (int r : missing) names.push_back(std::to_string(r));
            fail_rendezvous(impl,
                            "rendezvous at " + where + " timed out after " + seconds_text(rv.timeout) + ": " +
                                (missing.size() == 1 ? "rank " : "ranks ") + join(names, ", ") + " of " +
                                std::to_string(rv.world_size) + " never arrived",
                            rv.world_size - static_cast<int>(missing.size()));
        }
        std::this_thread::sleep_for(milliseconds(20));
    }
    for (int r = 0; r < rv.world_size; ++r) {
        const std::vector<std::string> fields = split(text_of(impl.store->get(keys[static_cast<size_t>(r)])), '\t');
        if (fields.size() != 3)
            fail_rendezvous(impl, "rendezvous: rank " + std::to_string(r) + " announced itself in an unknown way",
                            rv.world_size);
        if (fields[2] != std::to_string(rv.world_size))
            fail_rendezvous(impl,
                            "rendezvous: rank " + std::to_string(r) + " was started with a world size of " + fields[2] +
                                ", rank " + me + " with " + std::to_string(rv.world_size),
                            rv.world_size);
        impl.members.push_back({fields[0], fields[1]});
        impl.hosts.push_back(fields[0]);
    }
}

void create_process_group(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    [[maybe_unused]] const milliseconds timeout = to_ms(rv.timeout);
    // The process group's own keys (Gloo's addresses, the hosts' names) live apart
    // from ours, in the token's name space too.
    [[maybe_unused]] auto pg_store = c10::make_intrusive<c10d::PrefixStore>(impl.key("pg"), impl.store);
    try {
#ifdef ACC_HAVE_CUDA
        if (impl.backend == Backend::nccl) {
            const at::Device gpu = rank_gpu(rv.rank, rv.local_rank);
            c10::cuda::set_device(gpu.index());
            // wait() does not block the host: it orders the caller's stream after
            // the collective, so steps queue on the GPU without a host round trip.
            // A collective that fails or makes no progress within the timeout is
            // found by NCCL's watchdog; CleanUpOnly makes it abort the
            // communicators instead of the process (torchrun's and PyTorch's
            // default), so the stuck step returns and the next collective throws,
            // which runs the lost-peer diagnosis below.
            ::setenv(compat::kNcclAsyncErrorHandling, compat::kNcclCleanUpOnly, 1);
            // PyTorch 2.x's watchdog otherwise waits a minute for a debug dump after each
            // failed collective before it aborts, and again for each one queued behind
            // it: the lost-peer report would come --timeout plus minutes late. A user's
            // own setting of either variable stays.
            ::setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0", 0);
            ::setenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "0", 0);
            auto options = c10d::ProcessGroupNCCL::Options::create();
            options->timeout = timeout;
            auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_store, rv.rank, rv.world_size, options);
            compat::bind_nccl_device(*nccl, gpu);
            impl.pg = nccl;
            impl.device = gpu;
            return;
        }
#endif
#ifndef ACC_WITHOUT_GLOO  // check_backend_available refused Gloo before any rank started where it is missing
        auto options = c10d::ProcessGroupGloo::Options::create(timeout);
        const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
        if (interface && *interface)
            options->devices.push_back(compat::gloo_device_for_interface(interface));
        else
            options->devices.push_back(
                compat::gloo_device_for_host(local_address_towards(rv.master_addr, rv.master_port)));
        impl.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, rv.rank, rv.world_size, options);
#endif
    } catch (const acc::Error&) {
        throw;
    } catch (const std::exception& e) {
        // A rank that stopped for its own reason right after the rendezvous (a bad
        // output, say) closes its connections while this one still makes them: its
        // published reason is the one to report.
        if (rv.world_size > 1 && impl.tcp_store) {
            std::string reason;
            try {
                impl.shorten_store_timeout();
                if (impl.store->check({impl.key("failure")})) reason = impl.publish("", rv.world_size);
            } catch (const std::exception&) {
            }
            if (!reason.empty()) throw Error(reason);
        }
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + " could not connect to the other ranks within " +
                    seconds_text(rv.timeout) + ": " + backend_message(e));
    }
}

}  // namespace

ProcessGroupCollectives::ProcessGroupCollectives(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProcessGroupCollectives::~ProcessGroupCollectives() {
    if (!impl_->failure && !impl_->finished && std::uncaught_exceptions() == 0) {
        try {
            finish();
        } catch (...) {
        }
    }
}

std::unique_ptr<ProcessGroupCollectives> ProcessGroupCollectives::join(const Rendezvous& rendezvous, Backend backend) {
    compat::set_backend_logging(spdlog::default_logger()->level() <= spdlog::level::debug);
    check_backend_available(backend);
    auto impl = std::make_unique<Impl>();
    impl->rendezvous = rendezvous;
    impl->backend = backend;
    if (backend == Backend::nccl)
        impl->rendezvous.local_rank = rank_gpu_index(rendezvous, static_cast<int>(torch::cuda::device_count()));
    impl->space = token_hash("keys", rendezvous.run_token).substr(0, 20);
    spdlog::debug("joining as rank {} of {} ({}), store at {}:{}{}", rendezvous.rank, rendezvous.world_size,
                  backend_name(backend), rendezvous.master_addr, rendezvous.master_port,
                  rendezvous.world_size == 1 ? " (not needed)"
                  : rendezvous.agent_store
                      ? " hosted by torchrun's agent, keys under " + agent_store_prefix(rendezvous.restart_count)
                  : rendezvous.rank == 0 ? " hosted by this rank"
                                         : " hosted by rank 0");
    connect_store(*impl);
    meet(*impl);
    if (rendezvous.world_size > 1) impl->start_heartbeat();
    create_process_group(*impl);
    if (impl->tcp_store) impl->tcp_store->setTimeout(to_ms(rendezvous.timeout));
    return std::unique_ptr<ProcessGroupCollectives>(new ProcessGroupCollectives(std::move(impl)));
}

int ProcessGroupCollectives::rank() const { return impl_->rank(); }
int ProcessGroupCollectives::world_size() const { return impl_->world(); }
int ProcessGroupCollectives::local_rank() const { return impl_->rendezvous.local_rank; }
Backend ProcessGroupCollectives::backend() const { return impl_->backend; }
at::Device ProcessGroupCollectives::device() const { return impl_->device; }
const std::vector<std::string>& ProcessGroupCollectives::hosts() const { return impl_->hosts; }
const Traffic& ProcessGroupCollectives::traffic() const { return impl_->traffic; }
double ProcessGroupCollectives::timeout_seconds() const { return impl_->rendezvous.timeout; }
void ProcessGroupCollectives::reset_traffic() { impl_->traffic = Traffic{}; }

void ProcessGroupCollectives::allreduce(at::Tensor& tensor, ReduceOp op) {
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    impl_->run("allreduce", byte_size(tensor), [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::AllreduceOptions options;
        options.reduceOp = to_c10d(op);
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->allreduce(tensors, options);
    });
    finish_allreduce(buffer, tensor, op, impl_->world());
}

std::unique_ptr<Work> ProcessGroupCollectives::allreduce_async(at::Tensor& tensor, ReduceOp op) {
    impl_->check_usable();
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto start = Clock::now();
    c10::intrusive_ptr<c10d::Work> work;
    try {
        std::vector<at::Tensor> tensors{buffer};
        c10d::AllreduceOptions options;
        options.reduceOp = to_c10d(op);
        options.timeout = to_ms(impl_->rendezvous.timeout);
        work = impl_->pg->allreduce(tensors, options);
    } catch (const std::exception& e) {
        impl_->fail("allreduce", start, e);
    }
    impl_->traffic.calls += 1;
    impl_->traffic.bytes += byte_size(tensor);
    impl_->traffic.seconds += seconds_since(start);
    return std::make_unique<AsyncWork>(impl_.get(), std::move(work), tensor, buffer, op);
}

namespace {

// The one buffer `parts` are consecutive views of (each contiguous, `n` elements, the
// input's type), or an undefined tensor.
at::Tensor buffer_of_parts(const std::vector<at::Tensor>& parts, const at::Tensor& input) {
    const std::int64_t n = input.numel();
    for (size_t r = 0; r < parts.size(); ++r) {
        const at::Tensor& p = parts[r];
        if (!p.defined() || !p.is_contiguous() || p.numel() != n || p.scalar_type() != input.scalar_type() ||
            p.device() != input.device() || !p.storage().is_alias_of(parts[0].storage()) ||
            p.storage_offset() != parts[0].storage_offset() + static_cast<std::int64_t>(r) * n)
            return at::Tensor();
    }
    return parts[0].as_strided({static_cast<std::int64_t>(parts.size()) * n}, {1});
}

}  // namespace

void ProcessGroupCollectives::allgather_into(const at::Tensor& tensor, std::vector<at::Tensor>& outputs) {
    if (static_cast<int>(outputs.size()) != world_size())
        throw Error("allgather: " + std::to_string(outputs.size()) + " output tensors for " +
                    std::to_string(world_size()) + " ranks");
    at::Tensor input = tensor.contiguous();
    if (backend() == Backend::nccl) {
        // Parts back to back in one buffer: NCCL gathers into it directly. Given a list,
        // c10d's NCCL gathers into a buffer of its own and copies each part out.
        if (at::Tensor all = buffer_of_parts(outputs, input); all.defined()) {
            impl_->run("allgather", byte_size(tensor), [&] {
                c10d::AllgatherOptions options;
                options.timeout = to_ms(impl_->rendezvous.timeout);
                return impl_->pg->_allgather_base(all, input, options);
            });
            return;
        }
    }
    impl_->run("allgather", byte_size(tensor), [&] {
        std::vector<std::vector<at::Tensor>> out{outputs};
        std::vector<at::Tensor> in{input};
        return impl_->pg->allgather(out, in);
    });
}

std::vector<at::Tensor> ProcessGroupCollectives::allgather(const at::Tensor& tensor) {
    std::vector<at::Tensor> outputs;
    const std::int64_t n = tensor.numel();
    const at::Tensor all = at::empty({world_size() * n}, tensor.options());
    for (int r = 0; r < world_size(); ++r) outputs.push_back(all.narrow(0, r * n, n).view(tensor.sizes()));
    allgather_into(tensor, outputs);
    return outputs;
}

std::vector<at::Tensor> ProcessGroupCollectives::allgather_unequal(const at::Tensor& tensor) {
    if (tensor.dim() != 1)
        throw Error("allgather_unequal: needs a 1-D tensor, not one of " + std::to_string(tensor.dim()) +
                    " dimensions");
    const int world = world_size();
    const auto start = Clock::now();
    const Traffic before = impl_->traffic;
    // Lengths first, then every part padded to the longest.
    at::Tensor length = at::full({1}, tensor.numel(), at::TensorOptions().dtype(at::kLong).device(device()));
    std::vector<at::Tensor> lengths = allgather(length);
    std::int64_t longest = 0;
    std::vector<std::int64_t> sizes;
    for (const auto& l : lengths) {
        sizes.push_back(l.cpu().item<std::int64_t>());
        longest = std::max(longest, sizes.back());
    }
    at::Tensor padded = at::zeros({longest}, tensor.options());
    padded.narrow(0, 0, tensor.numel()).copy_(tensor);
    std::vector<at::Tensor> parts = allgather(padded);
    std::vector<at::Tensor> result;
    for (int r = 0; r < world; ++r)
        result.push_back(parts[static_cast<size_t>(r)].narrow(0, 0, sizes[static_cast<size_t>(r)]));
    // One call, counting this rank's own part once.
    impl_->traffic.calls = before.calls + 1;
    impl_->traffic.bytes = before.bytes + byte_size(tensor);
    impl_->traffic.seconds = before.seconds + seconds_since(start);
    return result;
}

void ProcessGroupCollectives::broadcast(at::Tensor& tensor, int root) {
    if (root < 0 || root >= world_size())
        throw Error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                    std::to_string(world_size()));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    impl_->run("broadcast", rank() == root ? byte_size(tensor) : 0, [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        options.rootTensor = 0;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->broadcast(tensors, options);
    });
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

void ProcessGroupCollectives::barrier() {
    impl_->run("barrier", 0, [&] {
        c10d::BarrierOptions options;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->barrier(options);
    });
}

void ProcessGroupCollectives::reduce_scatter(const at::Tensor& input, at::Tensor& output) {
    const std::int64_t world = world_size();
    if (input.numel() != world * output.numel())
        throw Error("reduce_scatter: the input has " + std::to_string(input.numel()) + " elements, expected " +
                    std::to_string(world) + " x " + std::to_string(output.numel()));
    impl_->check_usable();
    const std::int64_t chunk = output.numel();
    if (backend() == Backend::gloo) {
        // Gloo has no reduce-scatter algorithm: LibTorch 1.13 refuses the call and
        // later versions run one allreduce per rank behind a composite work item.
        // One allreduce of the whole input, keeping this rank's chunk, moves the
        // same bytes in one collective and behaves alike in both versions.
        at::Tensor sum = input.contiguous().view({-1}).clone();
        impl_->run("reduce_scatter", byte_size(input), [&] {
            std::vector<at::Tensor> tensors{sum};
            c10d::AllreduceOptions options;
            options.reduceOp = c10d::ReduceOp::SUM;
            options.timeout = to_ms(impl_->rendezvous.timeout);
            return impl_->pg->allreduce(tensors, options);
        });
        output.copy_(sum.narrow(0, rank() * chunk, chunk).view(output.sizes()));
        return;
    }
    at::Tensor flat = input.contiguous().view({-1});
    at::Tensor result = output.is_contiguous() ? output : output.contiguous();
    if (backend() == Backend::nccl) {
        // One flat input: with a list, c10d's NCCL would first copy it into a buffer of its own.
        impl_->run("reduce_scatter", byte_size(input), [&] {
            c10d::ReduceScatterOptions options;
            options.reduceOp = c10d::ReduceOp::SUM;
            options.timeout = to_ms(impl_->rendezvous.timeout);
            at::Tensor out = result.view({-1});
            return impl_->pg->_reduce_scatter_base(out, flat, options);
        });
        if (!result.is_same(output)) output.copy_(result);
        return;
    }
    std::vector<at::Tensor> chunks;
    for (std::int64_t r = 0; r < world; ++r) chunks.push_back(flat.narrow(0, r * chunk, chunk).view(output.sizes()));
    impl_->run("reduce_scatter", byte_size(input), [&] {
        std::vector<at::Tensor> outputs{result};
        std::vector<std::vector<at::Tensor>> inputs{chunks};
        c10d::ReduceScatterOptions options;
        options.reduceOp = c10d::ReduceOp::SUM;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->reduce_scatter(outputs, inputs, options);
    });
    if (!result.is_same(output)) output.copy_(result);
}

void ProcessGroupCollectives::confirm() {
#ifdef ACC_HAVE_CUDA
    if (impl_->backend != Backend::nccl || impl_->world() == 1 || impl_->finished || impl_->failure) return;
    // NCCL's barrier waits on the host for its collective, and so for every one queued
    // before it; one of those that failed meanwhile aborted the communicators, which the
    // barrier or getError() reports.
    barrier();
    const std::string error = compat::nccl_error(static_cast<c10d::ProcessGroupNCCL&>(*impl_->pg));
    if (!error.empty()) impl_->fail("an earlier collective", Clock::now(), std::runtime_error(error));
#endif
}

void ProcessGroupCollectives::finish() {
    if (impl_->finished) return;
    confirm();
    impl_->finished = true;
    impl_->stop_heartbeat();
    if (impl_->world() == 1 || impl_->failure) return;
    const std::string all_done = impl_->key("all_done");
    if (impl_->store->add(impl_->key("done"), 1) == impl_->world()) impl_->store->set(all_done, bytes_of("1"));
    if (impl_->hosts_store) {
        try {
            impl_->store->wait({all_done}, to_ms(impl_->rendezvous.timeout));
        } catch (const std::exception&) {
            // Everything was measured; a rank that never says goodbye is not an error here.
        }
    }
}

int run_in_group(ProcessGroupCollectives& comm, const std::function<int()>& work) {
    try {
        const int code = work();
        comm.finish();
        return code;
    } catch (const std::exception& e) {
        comm.abort(e.what());
        throw;
    }
}

void ProcessGroupCollectives::abort(const std::string& reason) noexcept {
    if (impl_->failure || impl_->finished) return;
    impl_->failure = "rank " + std::to_string(rank()) + " stopped: " + reason;
    impl_->stop_heartbeat();
    if (impl_->world() > 1 && impl_->tcp_store) {
        try {
            impl_->shorten_store_timeout();
            impl_->publish(*impl_->failure, impl_->world());
        } catch (...) {
        }
    }
    impl_->close_connections();
    impl_->linger();
}

}  // namespace acc::comm
