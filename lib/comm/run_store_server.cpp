// The rendezvous store's server: one poll() loop over every connection, so
// that no client, with or without the run token, can hold it up.
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
#include <list>
#include <thread>
#include <unordered_map>

namespace acc::comm {

using namespace wire;

namespace {

int listen_on(const std::string& host, int port) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (status != 0 || !found)
        throw Error("--master-addr " + host + ": cannot resolve this host name (" + ::gai_strerror(status) + ")");
    // IPv4 first: the other ranks and Gloo prefer it too.
    const addrinfo* pick = found;
    for (const addrinfo* a = found; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = pick->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr);
    ::inet_ntop(pick->ai_family, raw, text, sizeof text);
    const int fd = ::socket(pick->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ::freeaddrinfo(found);
        throw Error(std::string("rendezvous: cannot open a socket for the store: ") + std::strerror(errno));
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const bool bound = ::bind(fd, pick->ai_addr, pick->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0;
    const int error = errno;
    ::freeaddrinfo(found);
    if (bound) return fd;
    ::close(fd);
    if (error == EADDRNOTAVAIL)
        throw Error("--master-addr " + host + ": " + text +
                    " is not an address of this machine; rank 0 hosts the rendezvous store and must run on the "
                    "machine --master-addr names");
    throw Error("--master-port " + std::to_string(port) + ": rank 0 cannot open the rendezvous store there (" +
                std::strerror(error) + ")");
}

}  // namespace

struct RunStoreServer::Impl {
    struct Connection {
        int fd = -1;
        bool authenticated = false;
        Clock::time_point hello_deadline;
        std::vector<std::uint8_t> in;   // read, not yet a whole message
        std::vector<std::uint8_t> out;  // a reply not yet sent
        bool closing = false;           // close once `out` is sent
    };

    std::string token_digest;
    RunStoreLimits limits;
    int listen_fd = -1;
    int wake[2] = {-1, -1};
    std::unordered_map<std::string, std::vector<std::uint8_t>> data;
    std::list<Connection> connections;
    mutable std::mutex counts_mutex;
    Counts counts;
    std::thread thread;

    std::size_t max_message(const Connection& c) const {
        return c.authenticated ? 1 + 4 + limits.max_key_bytes + 3 * (4 + limits.max_value_bytes) : kMaxHelloBytes - 4;
    }

    void serve();
    void accept_all();
    void read_from(Connection& c);
    void answer(Connection& c, const std::vector<std::uint8_t>& body);
    std::vector<std::uint8_t> execute(Reader& request, std::uint8_t op, bool& malformed);
    void flush(Connection& c);
    void close(std::list<Connection>::iterator it, std::int64_t Counts::*why);
    bool store(const std::string& key, std::vector<std::uint8_t> value);
    void update_buffered();
};

RunStoreServer::RunStoreServer(const std::string& host, int port, std::string token_digest, RunStoreLimits limits)
    : impl_(std::make_unique<Impl>()) {
    if (token_digest.size() > kMaxDigestBytes) throw Error("rendezvous: the store's token digest is too long");
    impl_->token_digest = std::move(token_digest);
    impl_->limits = limits;
    impl_->listen_fd = listen_on(host, port);
    if (::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        ::close(impl_->listen_fd);
        throw Error(std::string("rendezvous: cannot start the store: ") + std::strerror(errno));
    }
    impl_->thread = std::thread([impl = impl_.get()] { impl->serve(); });
}

RunStoreServer::~RunStoreServer() {
    const char stop = 1;
    [[maybe_unused]] const ssize_t written = ::write(impl_->wake[1], &stop, 1);
    if (impl_->thread.joinable()) impl_->thread.join();
    for (auto& c : impl_->connections) ::close(c.fd);
    ::close(impl_->listen_fd);
    ::close(impl_->wake[0]);
    ::close(impl_->wake[1]);
}

RunStoreServer::Counts RunStoreServer::counts() const {
    std::lock_guard<std::mutex> lock(impl_->counts_mutex);
    return impl_->counts;
}

void RunStoreServer::Impl::serve() {
    std::vector<pollfd> fds;
    std::vector<std::list<Connection>::iterator> owners;
    for (;;) {
        const auto now = Clock::now();
        int wait_ms = 1000;
        for (auto it = connections.begin(); it != connections.end();) {
            auto next = std::next(it);
            if (!it->authenticated && now >= it->hello_deadline) {
                close(it, &Counts::timed_out);
            } else if (!it->authenticated) {
                const auto left =
                    std::chrono::duration_cast<milliseconds>(it->hello_deadline - now).count() + 1;
                wait_ms = static_cast<int>(std::min<std::int64_t>(wait_ms, left));
            }
            it = next;
        }
        fds.assign({{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}});
        owners.clear();
        for (auto it = connections.begin(); it != connections.end(); ++it) {
            // One request at a time: a client that does not read its answer is not read from.
            fds.push_back({it->fd, static_cast<short>(it->out.empty() ? POLLIN : POLLOUT), 0});
            owners.push_back(it);
        }
        if (::poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) return;
        if (fds[0].revents) return;
        for (std::size_t i = 2; i < fds.size(); ++i) {
            auto it = owners[i - 2];
            if (fds[i].revents & POLLOUT) flush(*it);
            else if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_from(*it);
            if (it->fd < 0) connections.erase(it);
        }
        if (fds[1].revents & POLLIN) accept_all();
        update_buffered();
    }
}

void RunStoreServer::Impl::accept_all() {
    for (;;) {
        const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;
        std::size_t strangers = 0;
        for (const auto& c : connections) strangers += !c.authenticated;
        {
            std::lock_guard<std::mutex> lock(counts_mutex);
            ++counts.accepted;
        }
        if (strangers >= limits.max_strangers) {
            // The oldest connection without the token goes: a rank presents it at once.
            for (auto it = connections.begin(); it != connections.end(); ++it)
                if (!it->authenticated) {
                    close(it, &Counts::refused);
                    break;
                }
        }
        const int on = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        Connection c;
        c.fd = fd;
        c.hello_deadline = Clock::now() + limits.hello_deadline;
        connections.push_back(std::move(c));
    }
}

void RunStoreServer::Impl::close(std::list<Connection>::iterator it, std::int64_t Counts::*why) {
    {
        std::lock_guard<std::mutex> lock(counts_mutex);
        ++(counts.*why);
    }
    ::close(it->fd);
    connections.erase(it);
}

void RunStoreServer::Impl::update_buffered() {
    std::int64_t buffered = 0;
    for (const auto& c : connections) buffered += static_cast<std::int64_t>(c.in.size() + c.out.size());
    std::lock_guard<std::mutex> lock(counts_mutex);
    counts.buffered_bytes = buffered;
}

void RunStoreServer::Impl::read_from(Connection& c) {
    auto refuse = [&](std::int64_t Counts::*why) {
        {
            std::lock_guard<std::mutex> lock(counts_mutex);
            ++(counts.*why);
        }
        ::close(c.fd);
        c.fd = -1;
    };
    // Never more than the message being read can hold: a stranger's bytes
    // beyond a hello are not even read.
    std::size_t want = 4 - std::min<std::size_t>(c.in.size(), 4);
    if (c.in.size() >= 4) {
        const std::uint32_t length = get_u32(c.in.data());
        if (length == 0 || length > max_message(c)) return refuse(&Counts::refused);
        want = std::min<std::size_t>(4 + length - c.in.size(), 1 << 16);
    }
    const std::size_t before = c.in.size();
    c.in.resize(before + want);
    const ssize_t got = ::recv(c.fd, c.in.data() + before, want, 0);
    if (got <= 0) {
        c.in.resize(before);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        ::close(c.fd);  // the client went away
        c.fd = -1;
        return;
    }
    c.in.resize(before + static_cast<std::size_t>(got));
    if (c.in.size() < 4) return;
    const std::uint32_t length = get_u32(c.in.data());
    if (length == 0 || length > max_message(c)) return refuse(&Counts::refused);
    if (c.in.size() < 4 + length) return;
    Reader request(c.in.data() + 4, length);
    const std::uint8_t op = request.u8();
    std::vector<std::uint8_t> reply;
    if (!c.authenticated) {
        const std::uint32_t magic = request.u32();
        const std::string digest = request.text(kMaxDigestBytes);
        if (op != kHello || magic != kMagic || !request.done()) return refuse(&Counts::refused);
        if (digest != token_digest) {
            answer(c, {kWrongToken});
            c.closing = true;
            std::lock_guard<std::mutex> lock(counts_mutex);
            ++counts.refused;
            return;
        }
        std::size_t members = 0;
        for (const auto& other : connections) members += other.authenticated;
        if (members >= limits.max_connections) return refuse(&Counts::refused);
        c.authenticated = true;
        {
            std::lock_guard<std::mutex> lock(counts_mutex);
            ++counts.authenticated;
        }
        return answer(c, {kOk});
    }
    bool malformed = false;
    reply = execute(request, op, malformed);
    if (malformed) return refuse(&Counts::refused);
    answer(c, reply);
}

std::vector<std::uint8_t> RunStoreServer::Impl::execute(Reader& request, std::uint8_t op, bool& malformed) {
    std::vector<std::uint8_t> reply{kOk};
    auto failed = [](const std::string& why) {
        std::vector<std::uint8_t> r{kFailed};
        put_bytes(r, why);
        return r;
    };
    const std::size_t key_limit = limits.max_key_bytes, value_limit = limits.max_value_bytes;
    switch (op) {
        case kSet: {
            std::string key = request.text(key_limit);
            std::string value = request.text(value_limit);
            if (!request.done()) break;
            if (!store(key, {value.begin(), value.end()})) return failed("the store is full");
            return reply;
        }
        case kGet: {
            const std::string key = request.text(key_limit);
            if (!request.done()) break;
            auto it = data.find(key);
            reply.push_back(it != data.end());
            put_bytes(reply, it != data.end() ? it->second : std::vector<std::uint8_t>{});
            return reply;
        }
        case kAdd: {
            const std::string key = request.text(key_limit);
            const std::int64_t amount = request.i64();
            if (!request.done()) break;
            std::int64_t value = 0;
            auto it = data.find(key);
            if (it != data.end()) {
                const std::string text(it->second.begin(), it->second.end());
                char* end = nullptr;
                errno = 0;
                value = std::strtoll(text.c_str(), &end, 10);
                if (text.empty() || *end != '\0' || errno == ERANGE) return failed("key " + key + " holds no number");
            }
            if ((amount > 0 && value > INT64_MAX - amount) || (amount < 0 && value < INT64_MIN - amount))
                return failed("key " + key + " would overflow");
            value += amount;
            const std::string text = std::to_string(value);
            if (!store(key, {text.begin(), text.end()})) return failed("the store is full");
            put_i64(reply, value);
            return reply;
        }
        case kCheck: {
            const std::uint32_t n = request.u32();
            bool all = true;
            for (std::uint32_t i = 0; i < n && request.ok(); ++i)
                all = data.count(request.text(key_limit)) > 0 && all;
            if (!request.done()) break;
            reply.push_back(all);
            return reply;
        }
        case kDelete: {
            const std::string key = request.text(key_limit);
            if (!request.done()) break;
            auto it = data.find(key);
            reply.push_back(it != data.end());
            if (it != data.end()) {
                std::lock_guard<std::mutex> lock(counts_mutex);
                counts.stored_bytes -= static_cast<std::int64_t>(it->first.size() + it->second.size());
                data.erase(it);
            }
            return reply;
        }
        case kNumKeys:
            if (!request.done()) break;
            put_i64(reply, static_cast<std::int64_t>(data.size()));
            return reply;
        case kCompareSet: {
            const std::string key = request.text(key_limit);
            const std::string expected = request.text(value_limit);
            const std::string desired = request.text(value_limit);
            if (!request.done()) break;
            auto it = data.find(key);
            const bool absent = it == data.end();
            if ((absent && expected.empty()) ||
                (!absent && std::string(it->second.begin(), it->second.end()) == expected)) {
                if (!store(key, {desired.begin(), desired.end()})) return failed("the store is full");
                put_bytes(reply, desired);
            } else {
                put_bytes(reply, absent ? expected : std::string(it->second.begin(), it->second.end()));
            }
            return reply;
        }
        default:
            break;
    }
    malformed = true;
    return {};
}

bool RunStoreServer::Impl::store(const std::string& key, std::vector<std::uint8_t> value) {
    auto it = data.find(key);
    const std::int64_t old = it == data.end() ? 0 : static_cast<std::int64_t>(key.size() + it->second.size());
    const std::int64_t now = static_cast<std::int64_t>(key.size() + value.size());
    std::lock_guard<std::mutex> lock(counts_mutex);
    if (counts.stored_bytes - old + now > static_cast<std::int64_t>(limits.max_stored_bytes)) return false;
    counts.stored_bytes += now - old;
    data[key] = std::move(value);
    return true;
}

void RunStoreServer::Impl::answer(Connection& c, const std::vector<std::uint8_t>& body) {
    c.in.clear();
    c.out = framed(body);
    flush(c);
}

void RunStoreServer::Impl::flush(Connection& c) {
    while (!c.out.empty()) {
        const ssize_t sent = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            ::close(c.fd);
            c.fd = -1;
            return;
        }
        c.out.erase(c.out.begin(), c.out.begin() + sent);
    }
    if (c.closing) {
        ::close(c.fd);
        c.fd = -1;
    }
}

}  // namespace acc::comm
