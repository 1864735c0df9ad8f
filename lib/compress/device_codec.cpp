// The device codecs' shared parts: the default protocol, the codec that stages through
// host memory, and the tensor forms of the host kernels' bit layouts and random numbers.
#include "compress/device_codec.hpp"

#include "base/error.hpp"
#include "compress/kernels.hpp"

#if ACC_CUDA_KERNELS
#include "compress/cuda/encoders.hpp"

#include <c10/cuda/CUDAStream.h>
#if ACC_WARN_WITH_SPDLOG
#include <spdlog/spdlog.h>
#else
#include <c10/util/Exception.h>
#endif

#include <map>
#include <mutex>
#include <string>
#endif

#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace acc::compress {

namespace device {
namespace {

constexpr std::int64_t kLow32 = 0xffffffffLL;

// The low 32 bits of h * c for h, c < 2^32, without overflowing int64: c in 16-bit halves.
at::Tensor mul_low32(const at::Tensor& h, std::uint32_t c) {
    const auto high = static_cast<std::int64_t>(c >> 16), low = static_cast<std::int64_t>(c & 0xffffu);
    return (at::bitwise_and(h * high, 0xffff).__lshift__(16) + h * low).bitwise_and(kLow32);
}

}  // namespace

at::Tensor flag(bool value, const at::Device& device) {
    return at::scalar_tensor(value, at::TensorOptions().dtype(at::kBool).device(device));
}

at::Tensor uniform(std::uint64_t key, std::int64_t begin, std::int64_t n, const at::Device& device) {
    // hash32(key32 + golden * index) >> 8, times 2^-24: detail::uniform_from in int64 lanes.
    const auto key32 = static_cast<std::int64_t>(static_cast<std::uint32_t>(key));
    at::Tensor index = at::arange(begin, begin + n, at::TensorOptions().dtype(at::kLong).device(device));
    at::Tensor h = (mul_low32(index.bitwise_and(kLow32), 0x9e3779b9u) + key32).bitwise_and(kLow32);
    h = h.bitwise_xor(h.__rshift__(16));
    h = mul_low32(h, 0x7feb352du);
    h = h.bitwise_xor(h.__rshift__(15));
    h = mul_low32(h, 0x846ca68bu);
    h = h.bitwise_xor(h.__rshift__(16));
    return h.__rshift__(8).to(at::kFloat) * (1.0f / 16777216.0f);
}

CudaKernels cuda_kernels_from(const char* value) {
    if (value != nullptr && std::strcmp(value, "0") == 0) return CudaKernels::none;
    if (value != nullptr && std::strcmp(value, "all") == 0) return CudaKernels::all;
    return CudaKernels::measured;
}

namespace {

// The choice as an int (atomic: compressors on several threads ask it); -1 until set or read.
std::atomic<int> kernels_choice{-1};

}  // namespace

CudaKernels cuda_kernels() {
    int choice = kernels_choice.load(std::memory_order_relaxed);
    if (choice < 0) {
        int unset = -1;
        const int from_environment = static_cast<int>(cuda_kernels_from(std::getenv("ACC_CUDA_KERNELS")));
        // A choice set meanwhile wins over the environment.
        choice = kernels_choice.compare_exchange_strong(unset, from_environment) ? from_environment : unset;
    }
    return static_cast<CudaKernels>(choice);
}

void set_cuda_kernels(CudaKernels choice) { kernels_choice.store(static_cast<int>(choice)); }

#if ACC_CUDA_KERNELS
namespace {

// Whether the kernels run on a CUDA device: asked once per device, and where they do not
// (a GPU whose architecture the build left out), said once; the ATen operations run there.
bool kernels_run_on(const at::Device& device) {
    static std::mutex mutex;
    static std::map<int, bool> known;
    const std::lock_guard<std::mutex> lock(mutex);
    const int index = device.has_index() ? device.index() : c10::cuda::current_device();
    const auto found = known.find(index);
    if (found != known.end()) return found->second;
    int major = 0, minor = 0;
    const bool runs = cuda::kernels_run_on(index, major, minor);
    if (!runs) {
        const std::string message =
            "CUDA device " + std::to_string(index) + " (compute capability " + std::to_string(major) + "." +
            std::to_string(minor) + "): the toolkit's CUDA kernels were built for " + cuda::built_architectures() +
            " only; the compressors use ATen operations there (add " + std::to_string(major) +
            std::to_string(minor) + "-real to ACC_CUDA_ARCHITECTURES when configuring, to build them for it)";
#if ACC_WARN_WITH_SPDLOG
        spdlog::warn("{}", message);
#else
        TORCH_WARN(message);
#endif
    }
    known.emplace(index, runs);
    return runs;
}

}  // namespace
#endif

bool cuda_kernels_for(const at::Tensor& x) {
#if ACC_CUDA_KERNELS
    return cuda_kernels() != CudaKernels::none && x.is_cuda() && kernels_run_on(x.device());
#else
    (void)x;
    return false;
#endif
}

bool cuda_unmeasured_kernels_for(const at::Device& device) {
#if ACC_CUDA_KERNELS
    return cuda_kernels() == CudaKernels::all && device.is_cuda() && kernels_run_on(device);
#else
    (void)device;
    return false;
#endif
}

std::string cuda_kernels_built() {
#if ACC_CUDA_KERNELS
    return cuda::built_architectures();
#else
    return {};
#endif
}

void* cuda_stream_of(const at::Tensor& x) {
#if ACC_CUDA_KERNELS
    return c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
#else
    (void)x;
    return nullptr;
#endif
}

at::Tensor kernel_flag(const at::Tensor& x, const std::function<void(bool* flag, void* stream)>& launch) {
    const c10::DeviceGuard guard(x.device());  // kernels launch on the current device, not x's
    at::Tensor flag = at::empty({}, x.options().dtype(at::kBool));
    launch(flag.data_ptr<bool>(), cuda_stream_of(x));
    return flag;
}

at::Tensor finite_mask(const at::Tensor& x) { return x.abs().lt(std::numeric_limits<double>::infinity()); }

namespace {

// Whether the finite check's kernel reads x, a float32 tensor in one piece on a GPU:
// one read of x, where the ATen operations take three passes and two temporaries.
bool finite_kernel_for(const at::Tensor& x) {
    return cuda_kernels_for(x) && x.scalar_type() == at::kFloat && x.is_contiguous();
}

// [parts] flags from the kernel (no ends: one part, a 0-dim flag).
at::Tensor finite_flags(const at::Tensor& x, const at::Tensor* ends) {
    at::Tensor flags = ends == nullptr ? at::empty({}, x.options().dtype(at::kBool))
                                       : at::empty({ends->numel()}, x.options().dtype(at::kBool));
#if ACC_CUDA_KERNELS
    const c10::DeviceGuard guard(x.device());
    cuda::finite_parts(x.data_ptr<float>(), x.numel(), ends == nullptr ? nullptr : ends->data_ptr<std::int64_t>(),
                       flags.numel(), flags.data_ptr<bool>(), cuda_stream_of(x));
#endif
    return flags;
}

}  // namespace

// On an H200 the fp16 encoder checked with these ATen operations ran at twice the rate it
// had with isfinite().all(); a sum in double, one pass without temporaries, was slower still.
at::Tensor all_finite(const at::Tensor& x) {
    if (finite_kernel_for(x)) return finite_flags(x, nullptr);
    return finite_mask(x).all();
}

at::Tensor bytes_of(const at::Tensor& x) { return x.contiguous().reshape({-1}).view(at::kByte); }

at::Tensor read_as(const at::Tensor& bytes, std::int64_t offset, std::int64_t count, at::ScalarType type) {
    const auto size = static_cast<std::int64_t>(c10::elementSize(type));
    at::Tensor slice = bytes.narrow(0, offset, count * size);
    // A view of a larger type needs an aligned start; payloads are packed back to back.
    if (slice.storage_offset() % size != 0) slice = slice.clone();
    return slice.view(type);
}

at::Tensor columns_as(const at::Tensor& rows, std::int64_t offset, std::int64_t count, at::ScalarType type) {
    const auto size = static_cast<std::int64_t>(c10::elementSize(type));
    at::Tensor part = rows.narrow(1, offset, count * size).contiguous();
    // One row counts as contiguous whatever its stride and offset; the view needs both aligned.
    if (part.stride(0) % size != 0 || part.storage_offset() % size != 0)
        part = at::empty(part.sizes(), part.options()).copy_(part);
    return part.view(type);
}

at::Tensor pack_bits(const at::Tensor& bits) {
    const std::int64_t n = bits.numel();
    const std::int64_t padded = 32 * ((n + 31) / 32);
    at::Tensor b = at::constant_pad_nd(bits.to(at::kByte), {0, padded - n}, 0).view({-1, 8});
    at::Tensor shifts = at::arange(8, at::TensorOptions().dtype(at::kByte).device(bits.device()));
    return b.__lshift__(shifts).sum(1, false, at::kByte);
}

at::Tensor unpack_bits(const at::Tensor& packed, std::int64_t n) {
    // Each byte against the masks 1, 2, ..., 128: two passes (mask, compare) give the bools.
    at::Tensor shifts = at::arange(8, at::TensorOptions().dtype(at::kByte).device(packed.device()));
    at::Tensor masks = at::ones_like(shifts).__lshift__(shifts);
    at::Tensor bits = packed.unsqueeze(-1).bitwise_and(masks).ne(0);
    return bits.reshape({packed.size(0), -1}).narrow(1, 0, n);
}

void for_worker_blocks(const std::vector<at::Tensor>& payloads, std::int64_t n,
                       const std::function<void(const at::Tensor& rows)>& f) {
    const auto workers = static_cast<std::int64_t>(payloads.size());
    const std::int64_t block = std::max<std::int64_t>(1, kDecodeBlockValues / std::max<std::int64_t>(1, n));
    for (std::int64_t first = 0; first < workers; first += block) {
        const std::int64_t count = std::min(block, workers - first);
        // One payload needs no copy: the allgather's slice itself, as a row.
        if (count == 1) {
            f(payloads[static_cast<size_t>(first)].unsqueeze(0));
            continue;
        }
        std::vector<at::Tensor> part(payloads.begin() + first, payloads.begin() + first + count);
        f(at::stack(part));
    }
}

void sum_over_workers(const std::vector<at::Tensor>& payloads, at::Tensor& out,
                      const std::function<at::Tensor(const at::Tensor& rows)>& terms) {
    if (payloads.empty()) {
        out.zero_();
        return;
    }
    bool first = true;
    for_worker_blocks(payloads, out.numel(), [&](const at::Tensor& rows) {
        at::Tensor v = terms(rows);
        for (std::int64_t w = 0; w < v.size(0); ++w) {
            // The host's first worker is copied, not added to 0 (which would turn -0 into +0).
            if (first)
                out.copy_(v[w]);
            else
                out.add_(v[w]);
            first = false;
        }
    });
}

at::Tensor stochastic_codes(const at::Tensor& x, const at::Tensor& divisor, int levels, std::uint64_t key,
                            std::int64_t begin) {
    // The level is (|x| / d) * m: d = 1 and m = levels / divisor (exactly the host's
    // |x| * scale), or where that quotient overflows d = divisor and m = levels, or for a
    // zero divisor d = 1 and m = 0. d and m are per divisor, so x is read in two passes.
    const auto top = static_cast<float>(levels);
    at::Tensor scale = at::scalar_tensor(top, divisor.options()) / divisor;
    at::Tensor zero = divisor.eq(0), finite = scale.isfinite();
    at::Tensor one = at::ones_like(divisor);
    at::Tensor d = at::where(finite.logical_or(zero), one, divisor);
    at::Tensor m = at::where(zero, at::zeros_like(divisor), at::where(finite, scale, one * top));
    at::Tensor l = (x.abs() / d).mul_(m);
    at::Tensor f = l.floor();
    at::Tensor u = uniform(key, begin, x.numel(), x.device()).view(x.sizes());
    at::Tensor q = at::clamp_max(f + u.lt(l - f).to(at::kFloat), static_cast<double>(levels));
    return at::where(x.lt(0), -q, q);
}

void orthogonalize(at::Tensor& m, bool gram_schmidt, float epsilon) {
    if (!gram_schmidt) {
        m.copy_(std::get<0>(at::linalg_qr(m)));
        return;
    }
    // The host's modified Gram-Schmidt, all matrices at once, in few operations (each is
    // a kernel launch on a GPU); norms and dot products summed in double as there. A zero
    // divisor becomes infinity: the column it divides is zero, and stays zero, as on the host.
    const std::int64_t r = m.size(2);
    for (std::int64_t i = 0; i < r; ++i) {
        at::Tensor column = m.select(2, i);
        at::Tensor divisor = at::linalg_vector_norm(column, 2, std::vector<std::int64_t>{1}, true, at::kDouble);
        if (epsilon > 0) divisor.add_(epsilon);
        column.div_(at::where(divisor.gt(0), divisor, std::numeric_limits<double>::infinity()));
        if (i + 1 == r) break;
        at::Tensor rest = m.narrow(2, i + 1, r - i - 1);
        at::Tensor dot = at::sum(column.unsqueeze(2) * rest, {1}, true, at::kDouble);
        rest.sub_(column.unsqueeze(2) * dot);
    }
}

at::Tensor finite_parts(const at::Tensor& values, const at::Tensor& ends) {
    if (finite_kernel_for(values) && ends.scalar_type() == at::kLong && ends.is_contiguous() &&
        ends.device() == values.device() && ends.numel() > 0)
        return finite_flags(values, &ends);
    return true_parts(finite_mask(values), ends);
}

at::Tensor true_parts(const at::Tensor& mask, const at::Tensor& ends) {
    // False values counted up to each part's end; a part's own count is the difference.
    at::Tensor counts = at::cumsum(mask.logical_not(), 0, at::kInt).index_select(0, ends);
    return at::diff(counts, 1, 0, at::zeros({1}, counts.options())).eq(0);
}

}  // namespace device

// ---------------------------------------------------------------- the default protocol

at::Tensor DeviceCodec::compensate(const at::Tensor& g, at::Tensor& memory, bool memory_zero) {
    if (memory_zero)
        memory.copy_(g);
    else
        memory.add_(g);
    return finite_in_encode() ? at::Tensor() : device::all_finite(memory);
}

at::Tensor DeviceCodec::decode(const std::vector<at::Tensor>&, at::Tensor&) {
    throw Error("internal error: " + host_->spec().text() + " has no allgather payload to decode");
}

void DeviceCodec::decode_sum(const at::Tensor&, int, at::Tensor&, at::Tensor*) {
    throw Error("internal error: " + host_->spec().text() + " has no allreduced sum to decode");
}

// ---------------------------------------------------------------- staging through the host

namespace {

at::Tensor on_host(const at::Tensor& x) { return x.to(at::kCPU).contiguous(); }

// Copies a host copy back unless it is the tensor itself.
void write_back(at::Tensor& target, const at::Tensor& host_copy) {
    if (!target.is_same(host_copy) && target.numel() > 0) target.copy_(host_copy.view(target.sizes()));
}

float* floats(at::Tensor& t) { return t.numel() > 0 ? t.data_ptr<float>() : nullptr; }

class StagingCodec : public DeviceCodec {
public:
    explicit StagingCodec(std::unique_ptr<TensorCodec> host) : DeviceCodec(std::move(host)) {}

    at::Tensor compensate(const at::Tensor& g, at::Tensor& memory, bool memory_zero) override {
        at::Tensor gh = on_host(g), mh = on_host(memory);
        const bool ok = host_->compensate(floats(gh), floats(mh), memory_zero);
        write_back(memory, mh);
        return device::flag(ok, memory.device());
    }

    at::Tensor encode(at::Tensor& t, bool update_error, std::uint64_t key, at::Tensor& payload) override {
        at::Tensor th = on_host(t);
        at::Tensor bytes = at::zeros({host_->buffer_bytes()}, at::kByte);
        const bool ok = host_->encode(floats(th), update_error, key, bytes.data_ptr<std::uint8_t>());
        if (payload.numel() > 0) device::bytes_of(payload).copy_(bytes);
        write_back(t, th);
        return device::flag(ok, t.device());
    }

    at::Tensor decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) override {
        std::vector<at::Tensor> held;
        std::vector<const std::uint8_t*> pointers;
        for (const auto& p : payloads) {
            held.push_back(on_host(p));
            pointers.push_back(held.back().data_ptr<std::uint8_t>());
        }
        at::Tensor oh = on_host(out);
        const bool ok = host_->decode(pointers, floats(oh));
        write_back(out, oh);
        return device::flag(ok, out.device());
    }

    void decode_sum(const at::Tensor& sum, int world, at::Tensor& out, at::Tensor* memory) override {
        at::Tensor sh = on_host(device::bytes_of(sum)), oh = on_host(out);
        at::Tensor mh = memory ? on_host(*memory) : at::Tensor();
        host_->decode_sum(sh.data_ptr<std::uint8_t>(), world, floats(oh), memory ? floats(mh) : nullptr);
        write_back(out, oh);
        if (memory) write_back(*memory, mh);
    }

    std::vector<std::pair<std::string, at::Tensor*>> state() override {
        // Views of the host codec's vectors, so that writing them writes the state.
        views_.clear();
        auto entries = host_->state();
        views_.reserve(entries.size());
        std::vector<std::pair<std::string, at::Tensor*>> out;
        for (auto& [name, values] : entries) {
            views_.push_back(at::from_blob(values->data(), {static_cast<std::int64_t>(values->size())}, at::kFloat));
            out.emplace_back(name, &views_.back());
        }
        return out;
    }

private:
    std::vector<at::Tensor> views_;
};

}  // namespace

std::unique_ptr<DeviceCodec> make_staging_codec(std::unique_ptr<TensorCodec> host) {
    return std::make_unique<StagingCodec>(std::move(host));
}

}  // namespace acc::compress
