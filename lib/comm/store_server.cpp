#include "comm/store_server.hpp"

#include "base/error.hpp"
#include "comm/torch_compat.hpp"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace acc::comm {
namespace {

struct ListenAddress {
    sockaddr_storage address{};
    socklen_t length = 0;
    std::string text;  // "127.0.0.1"
};

ListenAddress resolve_listen_address(const std::string& host, int port) {
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
    ListenAddress result;
    std::memcpy(&result.address, pick->ai_addr, pick->ai_addrlen);
    result.length = pick->ai_addrlen;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw = pick->ai_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(pick->ai_addr)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(pick->ai_addr)->sin6_addr);
    if (::inet_ntop(pick->ai_family, raw, text, sizeof text)) result.text = text;
    ::freeaddrinfo(found);
    return result;
}

// A socket bound to `where`, listening when `listen` is set. Bound alone it
// still proves the address this machine's and the port free of listeners.
int bind_to(const ListenAddress& where, const std::string& host, int port, bool listen) {
    const int fd = ::socket(where.address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw Error(std::string("rendezvous: cannot open a socket for the store: ") + std::strerror(errno));
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&where.address), where.length) != 0 ||
        (listen && ::listen(fd, SOMAXCONN) != 0)) {
        const int error = errno;
        ::close(fd);
        if (error == EADDRNOTAVAIL)
            throw Error("--master-addr " + host + ": " + where.text +
                        " is not an address of this machine; rank 0 hosts the rendezvous store and must run on the "
                        "machine --master-addr names");
        throw Error("--master-port " + std::to_string(port) + ": rank 0 cannot open the rendezvous store there (" +
                    std::strerror(error) + ")");
    }
    return fd;
}

#if !ACC_TORCH_STORE_TAKES_LISTEN_FD
// Where the store being constructed on this thread is to listen; null otherwise.
thread_local const ListenAddress* t_store_address = nullptr;

bool is_wildcard(const sockaddr* address) {
    if (address->sa_family == AF_INET)
        return reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (address->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr);
    return false;
}
#endif

}  // namespace

c10::intrusive_ptr<c10d::TCPStore> start_store_server(const std::string& host, int port,
                                                      std::chrono::milliseconds timeout) {
    const ListenAddress where = resolve_listen_address(host, port);
#if ACC_TORCH_STORE_TAKES_LISTEN_FD
    return compat::start_store(host, static_cast<std::uint16_t>(port), timeout,
                               bind_to(where, host, port, /*listen=*/true));
#else
    // The store binds by itself; this only checks the address ours and the port
    // free. Not by listening: another rank's store client connecting meanwhile
    // would be reset when the check's socket closed, and LibTorch 1.13's client
    // thread then ends the whole process ("Connection reset by peer").
    ::close(bind_to(where, host, port, /*listen=*/false));
    struct Redirect {
        explicit Redirect(const ListenAddress& where) { t_store_address = &where; }
        ~Redirect() { t_store_address = nullptr; }
    } redirect(where);
    return compat::start_store(host, static_cast<std::uint16_t>(port), timeout, -1);
#endif
}

}  // namespace acc::comm

#if !ACC_TORCH_STORE_TAKES_LISTEN_FD
// LibTorch before 2.1 lets nobody choose the store's address: TCPStore's
// constructor binds its listening socket to the wildcard address (IPv6 first,
// dual-stack). This definition takes precedence over the C library's for the
// whole program; it changes only wildcard binds made while
// start_store_server() constructs a store on the same thread, and passes
// every other call on unchanged.
extern "C" int bind(int fd, const sockaddr* address, socklen_t length) noexcept {
    using Bind = int (*)(int, const sockaddr*, socklen_t);
    static const Bind next = reinterpret_cast<Bind>(::dlsym(RTLD_NEXT, "bind"));
    if (!next) {
        errno = ENOSYS;
        return -1;
    }
    const acc::comm::ListenAddress* target = acc::comm::t_store_address;
    if (!target || !address || !acc::comm::is_wildcard(address)) return next(fd, address, length);
    if (address->sa_family == target->address.ss_family) {
        sockaddr_storage narrowed = target->address;
        if (address->sa_family == AF_INET)
            reinterpret_cast<sockaddr_in*>(&narrowed)->sin_port = reinterpret_cast<const sockaddr_in*>(address)->sin_port;
        else
            reinterpret_cast<sockaddr_in6*>(&narrowed)->sin6_port =
                reinterpret_cast<const sockaddr_in6*>(address)->sin6_port;
        return next(fd, reinterpret_cast<const sockaddr*>(&narrowed), target->length);
    }
    if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
        // A dual-stack socket takes the IPv4 address in its mapped form ::ffff:a.b.c.d.
        sockaddr_in6 mapped = *reinterpret_cast<const sockaddr_in6*>(address);
        std::memset(&mapped.sin6_addr, 0, sizeof mapped.sin6_addr);
        mapped.sin6_addr.s6_addr[10] = 0xff;
        mapped.sin6_addr.s6_addr[11] = 0xff;
        std::memcpy(&mapped.sin6_addr.s6_addr[12],
                    &reinterpret_cast<const sockaddr_in*>(&target->address)->sin_addr, 4);
        return next(fd, reinterpret_cast<const sockaddr*>(&mapped), sizeof mapped);
    }
    // An IPv4 socket cannot take an IPv6 address; c10d then tries its next one.
    errno = EADDRNOTAVAIL;
    return -1;
}
#endif
