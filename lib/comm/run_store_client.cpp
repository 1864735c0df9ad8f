// The rendezvous store's client: every call ends by its deadline.
#include "comm/run_store.hpp"

#include "base/error.hpp"
#include "comm/rendezvous.hpp"
#include "comm/run_store_wire.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace acc::comm {

using namespace wire;

RunStoreClient::RunStoreClient(std::string host, int port, std::string token_digest, std::chrono::milliseconds timeout)
    : c10d::Store(timeout),
      host_(std::move(host)),
      port_(port),
      token_digest_(std::move(token_digest)),
      where_(address_text(host_, port)) {
    std::lock_guard<std::mutex> lock(mutex_);
    connect(Clock::now() + timeout_);
}

RunStoreClient::~RunStoreClient() { disconnect(); }

c10::intrusive_ptr<c10d::Store> RunStoreClient::clone() {
    return c10::make_intrusive<RunStoreClient>(host_, port_, token_digest_, timeout_);
}

void RunStoreClient::disconnect() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

void RunStoreClient::timed_out(const char* what, Clock::time_point started) {
    disconnect();
    const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s", seconds);
    throw StoreUnavailable(std::string("timed out after ") + text + ": the rendezvous store at " + where_ + " " +
                           what);
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes; false then.
bool ready(int fd, short events, Clock::time_point deadline) {
    for (;;) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
        if (left <= 0) return false;
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left, 1 << 30)));
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return true;  // the next read or write says what is wrong
    }
}

}  // namespace

void RunStoreClient::connect(Clock::time_point deadline) {
    const auto started = Clock::now();
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0 || !found)
        throw Error("--master-addr " + host_ + ": cannot resolve this host name");
    // Until something listens: the store's rank may start later than this one.
    while (fd_ < 0) {
        for (const addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
            const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) continue;
            int error = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
            if (error == EINPROGRESS) {
                socklen_t length = sizeof error;
                error = ready(fd, POLLOUT, deadline) ? 0 : ETIMEDOUT;
                if (error == 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
            }
            if (error == 0) fd_ = fd;
            else ::close(fd);
        }
        if (fd_ >= 0) break;
        if (Clock::now() >= deadline) {
            ::freeaddrinfo(found);
            timed_out("did not accept a connection", started);
        }
        std::this_thread::sleep_for(milliseconds(20));
    }
    ::freeaddrinfo(found);
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    std::vector<std::uint8_t> hello{kHello};
    put_u32(hello, kMagic);
    put_bytes(hello, token_digest_);
    const std::vector<std::uint8_t> reply = call(hello, deadline);
    if (reply.size() == 1 && reply[0] == kWrongToken) {
        disconnect();
        throw Error("rendezvous at " + where_ +
                    ": the store there belongs to another run (it was opened with another run token); give every "
                    "rank the same " + std::string(kRunTokenVariable) + ", or none");
    }
    if (reply.size() != 1 || reply[0] != kOk) {
        disconnect();
        throw StoreUnavailable("the rendezvous store at " + where_ + " answered in an unknown way");
    }
}

std::vector<std::uint8_t> RunStoreClient::call(const std::vector<std::uint8_t>& request, Clock::time_point deadline) {
    const auto started = Clock::now();
    if (fd_ < 0) connect(deadline);
    const std::vector<std::uint8_t> message = framed(request);
    for (std::size_t sent = 0; sent < message.size();) {
        if (!ready(fd_, POLLOUT, deadline)) timed_out("did not take the request", started);
        const ssize_t n = ::send(fd_, message.data() + sent, message.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) {
            const std::string why = std::strerror(errno);
            disconnect();
            throw StoreUnavailable("the rendezvous store at " + where_ + " closed the connection (" + why + ")");
        }
        sent += static_cast<std::size_t>(n);
    }
    std::vector<std::uint8_t> reply;
    std::size_t expected = 4;
    while (reply.size() < expected) {
        if (!ready(fd_, POLLIN, deadline)) timed_out("did not answer", started);
        const std::size_t before = reply.size();
        reply.resize(expected);
        const ssize_t n = ::recv(fd_, reply.data() + before, expected - before, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            reply.resize(before);
            continue;
        }
        if (n <= 0) {
            disconnect();
            throw StoreUnavailable("the rendezvous store at " + where_ + " closed the connection");
        }
        reply.resize(before + static_cast<std::size_t>(n));
        if (expected == 4 && reply.size() == 4) {
            const std::uint32_t length = get_u32(reply.data());
            if (length == 0 || length > (1u << 20) * 2) {
                disconnect();
                throw StoreUnavailable("the rendezvous store at " + where_ + " answered in an unknown way");
            }
            expected = 4 + length;
        }
    }
    reply.erase(reply.begin(), reply.begin() + 4);
    if (!reply.empty() && reply[0] == kFailed) {
        Reader r(reply.data() + 1, reply.size() - 1);
        throw StoreUnavailable("the rendezvous store at " + where_ + " refused: " + r.text(1 << 20));
    }
    return reply;
}

void RunStoreClient::check_sizes(const std::string& key, std::size_t value_bytes) const {
    const RunStoreLimits limits;
    if (key.size() > limits.max_key_bytes || value_bytes > limits.max_value_bytes)
        throw StoreUnavailable("the rendezvous store at " + where_ + " takes keys of at most " +
                               std::to_string(limits.max_key_bytes) + " bytes and values of at most " +
                               std::to_string(limits.max_value_bytes) + "; key " + key.substr(0, 64) + " has " +
                               std::to_string(key.size()) + " and its value " + std::to_string(value_bytes));
}

void RunStoreClient::set(const std::string& key, const std::vector<std::uint8_t>& value) {
    check_sizes(key, value.size());
    std::vector<std::uint8_t> request{kSet};
    put_bytes(request, key);
    put_bytes(request, value);
    std::lock_guard<std::mutex> lock(mutex_);
    call(request, Clock::now() + timeout_);
}

std::vector<std::uint8_t> RunStoreClient::compareSet(const std::string& key, const std::vector<std::uint8_t>& expected,
                                                     const std::vector<std::uint8_t>& desired) {
    check_sizes(key, std::max(expected.size(), desired.size()));
    std::vector<std::uint8_t> request{kCompareSet};
    put_bytes(request, key);
    put_bytes(request, expected);
    put_bytes(request, desired);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call(request, Clock::now() + timeout_);
    Reader r(reply.data() + 1, reply.size() - 1);
    const std::string value = r.text(RunStoreLimits{}.max_value_bytes);
    return {value.begin(), value.end()};
}

std::vector<std::uint8_t> RunStoreClient::get(const std::string& key) {
    wait({key}, timeout_);
    std::vector<std::uint8_t> request{kGet};
    put_bytes(request, key);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call(request, Clock::now() + timeout_);
    Reader r(reply.data() + 1, reply.size() - 1);
    const bool found = r.u8() != 0;
    const std::string value = r.text(RunStoreLimits{}.max_value_bytes);
    if (!found) throw StoreUnavailable("the rendezvous store at " + where_ + " lost key " + key);
    return {value.begin(), value.end()};
}

std::int64_t RunStoreClient::add(const std::string& key, std::int64_t value) {
    check_sizes(key, 0);
    std::vector<std::uint8_t> request{kAdd};
    put_bytes(request, key);
    put_i64(request, value);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call(request, Clock::now() + timeout_);
    Reader r(reply.data() + 1, reply.size() - 1);
    return r.i64();
}

bool RunStoreClient::deleteKey(const std::string& key) {
    check_sizes(key, 0);
    std::vector<std::uint8_t> request{kDelete};
    put_bytes(request, key);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call(request, Clock::now() + timeout_);
    return reply.size() > 1 && reply[1] != 0;
}

bool RunStoreClient::check(const std::vector<std::string>& keys) { return check(keys, Clock::now() + timeout_); }

bool RunStoreClient::check(const std::vector<std::string>& keys, Clock::time_point deadline) {
    std::vector<std::uint8_t> request{kCheck};
    put_u32(request, static_cast<std::uint32_t>(keys.size()));
    for (const auto& key : keys) {
        check_sizes(key, 0);
        put_bytes(request, key);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call(request, deadline);
    return reply.size() > 1 && reply[1] != 0;
}

std::int64_t RunStoreClient::getNumKeys() {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::vector<std::uint8_t> reply = call({kNumKeys}, Clock::now() + timeout_);
    Reader r(reply.data() + 1, reply.size() - 1);
    return r.i64();
}

void RunStoreClient::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RunStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
    const auto started = Clock::now();
    const auto deadline = started + timeout;
    auto pause = milliseconds(1);
    while (!check(keys, deadline)) {
        if (Clock::now() + pause >= deadline) {
            char text[32];
            std::snprintf(text, sizeof text, "%.1f s",
                          std::chrono::duration<double>(Clock::now() - started).count());
            // The store answers; what it holds does not come.
            throw StoreUnavailable(std::string("timed out after ") + text + " waiting for " +
                                   (keys.size() == 1 ? "key " : "keys ") + (keys.empty() ? "" : keys.front()) +
                                   (keys.size() > 1 ? ", ..." : "") + " in the rendezvous store at " + where_);
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, milliseconds(20));
    }
}

}  // namespace acc::comm
