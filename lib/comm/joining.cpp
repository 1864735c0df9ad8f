// Joining ProcessGroupCollectives: every rank connects to the store (rank 0 or
// torchrun's agent hosts it), presents the run token, announces itself and waits
// for the others, naming any rank that never arrives; then the c10d process group
// (Gloo, or NCCL on a rank's GPU) is made over the store.
#include "comm/process_group_impl.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/run_store.hpp"

#include <c10/util/hash.h>

#ifdef ACC_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace acc::comm {

using namespace internal;

namespace {

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

namespace {

std::string token_hash(const std::string& purpose, const std::string& token) {
    return c10::sha1("accordion run token, " + purpose + ": " + token).str();
}

// torchrun's agent hosts the store (a TCPStore): every rank is its client.
void connect_agent_store(ProcessGroupCollectives::Impl& impl, milliseconds timeout) {
    const Rendezvous& rv = impl.rendezvous;
    const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
    const std::string hint = "; is torchrun's agent still running?";
    if (!wait_for_listener(rv.master_addr, rv.master_port, Clock::now() + timeout))
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + " cannot reach the store at " + where + " within " +
                    seconds_text(rv.timeout) + hint);
    try {
        auto tcp = c10::make_intrusive<c10d::TCPStore>(
            rv.master_addr, compat::store_options(static_cast<std::uint16_t>(rv.master_port), timeout));
        impl.tcp_store = tcp.get();
        impl.base_store = tcp;
    } catch (const std::exception& e) {
        const std::string detail = backend_message(e);
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + " cannot reach the store at " + where + " within " +
                    seconds_text(rv.timeout) + (looks_like_timeout(detail) ? "" : " (" + detail + ")") + hint);
    }
    impl.store = c10::make_intrusive<c10d::PrefixStore>(agent_store_prefix(rv.restart_count), impl.base_store);
}

// Rank 0 serves the run's store (run_store.hpp) and every rank, rank 0 too, is
// its client, presenting the run token as it connects: a store opened with
// another token turns it away at once.
void connect_store(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    const milliseconds timeout = to_ms(rv.timeout);
    if (rv.world_size == 1) {
        impl.base_store = c10::make_intrusive<c10d::HashStore>();
        impl.store = impl.base_store;
        return;
    }
    if (rv.agent_store) return connect_agent_store(impl, timeout);
    impl.hosts_store = rv.rank == 0;
    const std::string digest = token_hash("store", rv.run_token);
    if (impl.hosts_store) {
        const auto world = static_cast<std::size_t>(rv.world_size);
        RunStoreLimits limits;
        limits.max_connections = 2 * world + 16;  // a rank's own, and clones c10d may make
        limits.max_strangers = std::max<std::size_t>(limits.max_strangers, world + 16);  // ranks joining at once
        limits.max_stored_bytes += 4096 * world;
        impl.server = std::make_unique<RunStoreServer>(rv.master_addr, rv.master_port, digest, limits);
    }
    try {
        auto client = c10::make_intrusive<RunStoreClient>(rv.master_addr, rv.master_port, digest, timeout);
        impl.run_store = client.get();
        impl.base_store = client;
    } catch (const StoreUnavailable& e) {
        const std::string detail = e.what();
        const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
        if (detail.find("did not accept") != std::string::npos)
            throw Error("rendezvous: rank " + std::to_string(rv.rank) + " cannot reach the store at " + where +
                        " within " + seconds_text(rv.timeout) + "; did rank 0 start?");
        throw Error("rendezvous: rank " + std::to_string(rv.rank) + ": " + detail +
                    " (is rank 0 stopped, or is something else listening there?)");
    }
    impl.store = impl.base_store;
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

// Every rank announces itself and waits for the others, so that a rank that
// never arrives is named.
void meet(ProcessGroupCollectives::Impl& impl) {
    const Rendezvous& rv = impl.rendezvous;
    const std::string me = std::to_string(rv.rank);
    const std::string where = rv.master_addr + ":" + std::to_string(rv.master_port);
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
        if (rv.world_size > 1 && impl.shares_store()) {
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
    if (impl->shares_store()) impl->base_store->setTimeout(to_ms(rendezvous.timeout));
    return std::unique_ptr<ProcessGroupCollectives>(new ProcessGroupCollectives(std::move(impl)));
}

}  // namespace acc::comm
