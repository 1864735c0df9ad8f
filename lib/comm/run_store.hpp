// The rendezvous store of a run that rank 0 hosts: a key-value server and its
// client (a c10d::Store, so that Gloo and NCCL use it as they would a TCPStore).
//
// Why not c10d's TCPStore: LibTorch 1.13's server answers every client on one
// thread, so one connection that sends a byte and waits stalls it for all ranks,
// and its clients read without a deadline, so a store that stopped answering
// holds a rank far beyond --timeout. This server never waits on one client:
// it serves every connection from one poll() loop, closes a connection that has
// not presented the run token within `hello_deadline`, reads at most a token's
// worth of bytes from it until then, and caps every value, the bytes it stores
// and its connections. Every call of the client ends within its timeout.
//
// The wire format (little-endian) is the toolkit's own, documented in
// docs/formats.md ("The rendezvous store's protocol").
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace acc::comm {

/// What the server accepts. Every figure bounds what a client can make it hold.
struct RunStoreLimits {
    std::size_t max_key_bytes = 4096;             ///< bytes in one key
    std::size_t max_value_bytes = 1 << 20;        ///< bytes in one value
    std::size_t max_stored_bytes = 64u << 20;     ///< bytes of all keys and values together (a run: + 4 KiB a rank)
    std::size_t max_connections = 64;             ///< connections that presented the token (a run: 2 a rank + 16)
    std::size_t max_strangers = 64;               ///< connections that have not (yet); a run: at least a rank's each + 16
    std::chrono::milliseconds hello_deadline{5000};  ///< to present the token after connecting
};

/// A call of the store that did not end in time, or a connection the store
/// closed; the message names the store's address.
class StoreUnavailable : public std::runtime_error {
   public:
    using std::runtime_error::runtime_error;
};

/// Serves the store on `host`:`port`, that address only. `token_digest`: what
/// every client must present (a digest of the run token, at most 64 bytes).
/// Throws acc::Error naming --master-addr when `host` is not an address of this
/// machine, and --master-port when the port is taken.
class RunStoreServer {
   public:
    RunStoreServer(const std::string& host, int port, std::string token_digest, RunStoreLimits limits = {});
    /// Stops at once, whatever the clients do.
    ~RunStoreServer();
    RunStoreServer(const RunStoreServer&) = delete;
    RunStoreServer& operator=(const RunStoreServer&) = delete;

    /// What the server did so far (for tests and the log).
    struct Counts {
        std::int64_t accepted = 0;          ///< connections
        std::int64_t authenticated = 0;     ///< connections that presented the token
        std::int64_t refused = 0;           ///< closed: another token, a malformed or oversized message, over a limit
        std::int64_t timed_out = 0;         ///< closed: no token within hello_deadline
        std::int64_t stored_bytes = 0;      ///< keys and values held now
        std::int64_t buffered_bytes = 0;    ///< bytes read from connections and not yet answered
    };
    Counts counts() const;

   private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

/// A client of a RunStoreServer. Every call, connecting included, ends within
/// the store's timeout (getTimeout(), milliseconds) or throws StoreUnavailable
/// naming the address. A client with another token gets acc::Error: "rendezvous
/// at HOST:PORT: the store there belongs to another run ...". Thread-safe.
class RunStoreClient : public c10d::Store {
   public:
    RunStoreClient(std::string host, int port, std::string token_digest, std::chrono::milliseconds timeout);
    ~RunStoreClient() override;

    using c10d::Store::set;
    void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
    std::vector<std::uint8_t> compareSet(const std::string& key, const std::vector<std::uint8_t>& expected,
                                         const std::vector<std::uint8_t>& desired) override;
    /// Waits for the key up to the timeout.
    std::vector<std::uint8_t> get(const std::string& key) override;
    std::int64_t add(const std::string& key, std::int64_t value) override;
    bool deleteKey(const std::string& key) override;
    bool check(const std::vector<std::string>& keys) override;
    std::int64_t getNumKeys() override;
    void wait(const std::vector<std::string>& keys) override;
    void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
    /// Another connection to the same store (c10d 2.x asks for one per thread).
    c10::intrusive_ptr<c10d::Store> clone();

    /// "host:port"
    const std::string& address() const { return where_; }

   private:
    using Clock = std::chrono::steady_clock;
    std::vector<std::uint8_t> call(const std::vector<std::uint8_t>& request, Clock::time_point deadline);
    void connect(Clock::time_point deadline);
    void disconnect() noexcept;
    void check_sizes(const std::string& key, std::size_t value_bytes) const;
    bool check(const std::vector<std::string>& keys, Clock::time_point deadline);
    [[noreturn]] void timed_out(const char* what, Clock::time_point started);

    std::string host_;
    int port_;
    std::string token_digest_;
    std::string where_;
    std::mutex mutex_;  // one call at a time on the connection
    int fd_ = -1;
};

}  // namespace acc::comm
