#include "exchange/trainer/state.hpp"

#include "base/error.hpp"

#include <cstring>

namespace acc::exchange {
namespace {

// Layout: u64 count, then per tensor: u32 name length, name, i32 dtype, u32 ndim,
// i64 dims..., u64 byte count, bytes. Native byte order: ranks share one build.
class Writer {
public:
    template <class T>
    void put(T value) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    void put_bytes(const void* data, size_t n) {
        const auto* p = static_cast<const std::uint8_t*>(data);
        bytes.insert(bytes.end(), p, p + n);
    }
    std::vector<std::uint8_t> bytes;
};

class Reader {
public:
    Reader(const std::uint8_t* data, size_t size) : data_(data), size_(size) {}
    template <class T>
    T get() {
        T value;
        std::memcpy(&value, take(sizeof(T)), sizeof(T));
        return value;
    }
    const std::uint8_t* take(size_t n) {
        if (n > size_ - offset_) throw Error("exchange state: a rank sent truncated state (" + std::to_string(size_) + " bytes)");
        const std::uint8_t* p = data_ + offset_;
        offset_ += n;
        return p;
    }
    bool done() const { return offset_ == size_; }

private:
    const std::uint8_t* data_;
    size_t size_, offset_ = 0;
};

torch::Tensor bytes_tensor(const std::vector<std::uint8_t>& bytes) {
    torch::Tensor t = torch::empty({static_cast<std::int64_t>(bytes.size())}, torch::kUInt8);
    if (!bytes.empty()) std::memcpy(t.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
    return t;
}

}  // namespace

torch::Tensor pack(const train::TensorMap& tensors) {
    Writer w;
    w.put<std::uint64_t>(tensors.size());
    for (const auto& [name, tensor] : tensors) {
        torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
        w.put<std::uint32_t>(static_cast<std::uint32_t>(name.size()));
        w.put_bytes(name.data(), name.size());
        w.put<std::int32_t>(static_cast<std::int32_t>(t.scalar_type()));
        w.put<std::uint32_t>(static_cast<std::uint32_t>(t.dim()));
        for (auto d : t.sizes()) w.put<std::int64_t>(d);
        w.put<std::uint64_t>(t.nbytes());
        w.put_bytes(t.data_ptr(), t.nbytes());
    }
    return bytes_tensor(w.bytes);
}

train::TensorMap unpack(const torch::Tensor& bytes) {
    torch::Tensor b = bytes.to(torch::kCPU).contiguous();
    if (b.scalar_type() != torch::kUInt8) throw Error("exchange state: expected bytes");
    Reader r(b.data_ptr<std::uint8_t>(), static_cast<size_t>(b.numel()));
    train::TensorMap out;
    const auto count = r.get<std::uint64_t>();
    for (std::uint64_t i = 0; i < count; ++i) {
        const auto length = r.get<std::uint32_t>();
        std::string name(reinterpret_cast<const char*>(r.take(length)), length);
        const auto type = static_cast<torch::ScalarType>(r.get<std::int32_t>());
        const auto dims = r.get<std::uint32_t>();
        if (dims > 16) throw Error("exchange state: '" + name + "' has " + std::to_string(dims) + " dimensions");
        std::vector<std::int64_t> sizes;
        for (std::uint32_t d = 0; d < dims; ++d) sizes.push_back(r.get<std::int64_t>());
        const auto n = r.get<std::uint64_t>();
        torch::Tensor t = torch::empty(sizes, torch::TensorOptions().dtype(type));
        if (t.nbytes() != n) throw Error("exchange state: '" + name + "' holds " + std::to_string(n) + " bytes, its shape needs " + std::to_string(t.nbytes()));
        std::memcpy(t.data_ptr(), r.take(n), n);
        out[name] = t;
    }
    if (!r.done()) throw Error("exchange state: trailing bytes after " + std::to_string(count) + " tensors");
    return out;
}

std::vector<train::TensorMap> gather_maps(comm::Collectives& comm, const train::TensorMap& mine) {
    std::vector<train::TensorMap> out;
    for (const auto& part : comm.allgather_unequal(pack(mine))) out.push_back(unpack(part));
    return out;
}

std::vector<std::uint8_t> broadcast_bytes(comm::Collectives& comm, std::vector<std::uint8_t> bytes, int root) {
    torch::Tensor length = torch::tensor(std::vector<std::int64_t>{static_cast<std::int64_t>(bytes.size())}, torch::kLong);
    comm.broadcast(length, root);
    const std::int64_t n = length.item<std::int64_t>();
    if (n < 0) throw Error("broadcast: rank " + std::to_string(root) + " announced a negative length");
    if (n == 0) return {};
    torch::Tensor data = comm.rank() == root ? bytes_tensor(bytes) : torch::empty({n}, torch::kUInt8);
    comm.broadcast(data, root);
    const std::uint8_t* p = data.data_ptr<std::uint8_t>();
    return std::vector<std::uint8_t>(p, p + n);
}

}  // namespace acc::exchange
