// The rendezvous store's wire format, shared by its server
// (run_store_server.cpp) and client (run_store_client.cpp); only they include
// it. Little-endian; docs/formats.md ("The rendezvous store's protocol").
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace acc::comm::wire {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Requests (the first byte of a message's body).
enum Op : std::uint8_t {
    kHello = 1,       // token digest -> status
    kSet = 2,         // key, value -> -
    kGet = 3,         // key -> found (u8), value
    kAdd = 4,         // key, i64 -> i64
    kCheck = 5,       // count (u32), keys -> all present (u8)
    kDelete = 6,      // key -> existed (u8)
    kNumKeys = 7,     // - -> i64
    kCompareSet = 8,  // key, expected, desired -> value
};
// Replies begin with a status byte.
enum Status : std::uint8_t { kOk = 0, kFailed = 1, kWrongToken = 2 };

inline constexpr std::uint32_t kMagic = 0x31434341;  // "ACC1"
inline constexpr std::size_t kMaxDigestBytes = 64;
// A hello: length, op, magic, digest's length and bytes.
inline constexpr std::size_t kMaxHelloBytes = 4 + 1 + 4 + 4 + kMaxDigestBytes;

inline void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
inline void put_i64(std::vector<std::uint8_t>& out, std::int64_t value) {
    const auto v = static_cast<std::uint64_t>(value);
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
template <class Bytes>
inline void put_bytes(std::vector<std::uint8_t>& out, const Bytes& bytes) {
    put_u32(out, static_cast<std::uint32_t>(bytes.size()));
    out.insert(out.end(), bytes.begin(), bytes.end());
}
// A message: its body's length, then the body.
inline std::vector<std::uint8_t> framed(const std::vector<std::uint8_t>& body) {
    std::vector<std::uint8_t> out;
    out.reserve(body.size() + 4);
    put_u32(out, static_cast<std::uint32_t>(body.size()));
    out.insert(out.end(), body.begin(), body.end());
    return out;
}
inline std::uint32_t get_u32(const std::uint8_t* p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
    return v;
}

// Reads fields off a message body; any read past its end marks it malformed.
class Reader {
   public:
    Reader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
    bool ok() const { return ok_; }
    bool done() const { return ok_ && p_ == end_; }
    std::uint8_t u8() {
        if (!need(1)) return 0;
        return *p_++;
    }
    std::uint32_t u32() {
        if (!need(4)) return 0;
        const std::uint32_t v = get_u32(p_);
        p_ += 4;
        return v;
    }
    std::int64_t i64() {
        if (!need(8)) return 0;
        std::uint64_t v = 0;
        for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p_[i]) << (8 * i);
        p_ += 8;
        return static_cast<std::int64_t>(v);
    }
    std::string text(std::size_t limit) {
        const std::uint32_t n = u32();
        if (n > limit || !need(n)) {
            ok_ = false;
            return {};
        }
        std::string s(reinterpret_cast<const char*>(p_), n);
        p_ += n;
        return s;
    }

   private:
    bool need(std::size_t n) {
        if (!ok_ || static_cast<std::size_t>(end_ - p_) < n) ok_ = false;
        return ok_;
    }
    const std::uint8_t* p_;
    const std::uint8_t* end_;
    bool ok_ = true;
};

inline std::string address_text(const std::string& host, int port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace acc::comm::wire
