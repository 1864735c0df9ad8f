// ProcessGroupCollectives' liveness: every rank beats in the store while it is in
// the group; when a collective fails, the silent beats name the ranks that are
// gone, the first rank to find out publishes the diagnosis and every rank reports
// it. A clean end and a rank's own stop are told through the store too.
#include "comm/process_group_impl.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdlib>

namespace acc::comm {

using namespace internal;

namespace {

constexpr milliseconds kHeartbeatPeriod{500};
// Long enough for a live rank to beat at least twice.
constexpr milliseconds kSilenceWindow{1600};
// How long the rank hosting the store keeps it for the others to read the diagnosis.
constexpr milliseconds kLinger{5000};

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

}  // namespace

ProcessGroupCollectives::Impl::~Impl() {
    stop_heartbeat();
    shutdown_backend();
    pg.reset();
    store.reset();
    base_store.reset();
}

void ProcessGroupCollectives::Impl::shutdown_backend() noexcept {
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

void ProcessGroupCollectives::Impl::start_heartbeat() {
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

void ProcessGroupCollectives::Impl::stop_heartbeat() {
    {
        std::lock_guard<std::mutex> lock(heartbeat_mutex);
        heartbeat_stop = true;
    }
    heartbeat_wake.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
}

std::vector<int> ProcessGroupCollectives::Impl::silent_ranks() {
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

std::string ProcessGroupCollectives::Impl::who(const std::vector<int>& ranks) const {
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

void ProcessGroupCollectives::Impl::shorten_store_timeout() {
    base_store->setTimeout(kDiagnosisTimeout);
    if (run_store) return;  // every call of the run's store ends by its timeout
    // TCPStore::setTimeout alone bounds only later wait() calls: get, add and
    // check keep the socket timeout of the last wait (--timeout).
    if (compat::kWaitSetsSocketTimeout)
        store->wait({key("member/" + std::to_string(rank()))}, kDiagnosisTimeout);
    else
        bound_store_connections(rendezvous.master_port, kDiagnosisTimeout);
}

void ProcessGroupCollectives::Impl::close_connections() noexcept {
    try {
#ifdef ACC_HAVE_CUDA
        if (pg && backend == Backend::nccl) compat::abort_nccl(static_cast<c10d::ProcessGroupNCCL&>(*pg));
#endif
        pg.reset();
    } catch (...) {
    }
}

void ProcessGroupCollectives::Impl::linger() noexcept {
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

std::string ProcessGroupCollectives::Impl::publish(const std::string& message, std::int64_t readers) {
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

void ProcessGroupCollectives::Impl::fail(const char* op, Clock::time_point start, const std::exception& error) {
    const double elapsed = seconds_since(start);
    const std::string detail = backend_message(error);
    // NCCL's watchdog aborts the communicators of a collective that made no progress
    // within --timeout; the next call fails at once ("... communicator was aborted"),
    // so the cause is the timeout, and that call's own time says nothing.
    const bool aborted = backend == Backend::nccl && detail.find("aborted") != std::string::npos;
    const bool timed_out = aborted || looks_like_timeout(detail) || elapsed >= rendezvous.timeout * 0.95;
    const std::string after = aborted ? std::string() : " after " + seconds_text(elapsed);
    std::string message;
    if (world() == 1 || !shares_store()) {
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

void ProcessGroupCollectives::finish() {
    if (impl_->finished) return;
    confirm();
    impl_->finished = true;
    impl_->stop_heartbeat();
    if (impl_->world() == 1 || impl_->failure) return;
    const std::string all_done = impl_->key("all_done");
    if (impl_->store->add(impl_->key("done"), 1) == impl_->world()) impl_->store->set(all_done, bytes_of("1"));
    // Every rank waits, not only the store's host: a rank that closed its
    // connections at once could close them under a peer still making them (a
    // group joined and finished with no collective between). A rank that
    // stopped (abort) will not say goodbye: its published reason ends the wait.
    const std::string failure = impl_->key("failure");
    const auto deadline = Clock::now() + to_ms(impl_->rendezvous.timeout);
    try {
        while (!impl_->store->check({all_done}) && !impl_->store->check({failure}) && Clock::now() < deadline)
            std::this_thread::sleep_for(milliseconds(10));
    } catch (const std::exception&) {
        // Everything was measured; a rank that never says goodbye is not an error here.
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
    if (impl_->world() > 1 && impl_->shares_store()) {
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
