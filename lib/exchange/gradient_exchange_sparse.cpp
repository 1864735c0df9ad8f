// The device path's batches for sparse codecs (top-k, DGC): their payloads decoded as
// one, and top-k's selection of small tensors made as one, since on a GPU each of their
// ATen operations costs a launch.
#include "comm/torch_compat.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <algorithm>

namespace acc::exchange {

// ------------------------------------------------------------ sparse payloads decoded as one

namespace {

// Tensors up to this many values join a sparse batch, whose means go through a scratch
// tensor: a zeroing and a copy of their values, where alone each is zeroed and takes
// about 25 operations. On a GPU those launches cost more than the copy up to millions of
// values; on a CPU (measured on ResNet-18's shapes) only for small tensors. A batch holds
// at most kSparseBatchValues values, so that the scratch stays within 64 MiB.
constexpr std::int64_t kSparseBatchTensorValuesGpu = std::int64_t{1} << 22;
constexpr std::int64_t kSparseBatchTensorValuesCpu = std::int64_t{1} << 16;
constexpr std::int64_t kSparseBatchValues = std::int64_t{1} << 24;

}  // namespace

void GradientExchange::Impl::layout_sparse_device() {
    const std::int64_t largest_member = device.is_cpu() ? kSparseBatchTensorValuesCpu : kSparseBatchTensorValuesGpu;
    std::vector<std::vector<size_t>> found(1);
    std::int64_t values = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        const Slot& s = slots[i];
        if (s.codec->channel() != Channel::gather || s.device_codec->sparse_pairs() < 1 || s.offset % 4 != 0 ||
            s.n > largest_member)
            continue;
        if (values + s.n > kSparseBatchValues) {
            found.emplace_back();
            values = 0;
        }
        found.back().push_back(i);
        values += s.n;
    }
    std::int64_t largest = 0;
    for (auto& members : found) {
        if (members.size() < 2) continue;  // one tensor decodes as well alone
        std::vector<compress::device::SparseBatch::Part> parts;
        for (size_t i : members) {
            const Slot& s = slots[i];
            parts.push_back({s.offset, s.device_codec->sparse_pairs(), s.n});
            slots[i].sparse_batch = static_cast<int>(sparse_batches.size());
        }
        sparse_batches.push_back({members, compress::device::SparseBatch(parts, device)});
        largest = std::max(largest, sparse_batches.back().batch.numel());
    }
    if (largest > 0) sparse_means = at::empty({largest}, at::TensorOptions().dtype(at::kFloat).device(device));
}

// The batch's means into its slots' gradients; its flag (one per slot) into `checks`.
void GradientExchange::Impl::decode_sparse_batch(const SparseDecodeBatch& b, const at::Tensor& rows,
                                                 std::vector<DeviceCheck>& checks) {
    at::Tensor means = sparse_means.narrow(0, 0, b.batch.numel());
    checks.push_back({b.slots, DeviceCheck::Kind::well_formed, b.batch.decode(rows, means)});
    std::vector<at::Tensor> grads;
    for (size_t i : b.slots) grads.push_back(slots[i].device_grad);
    comm::compat::copy_each(grads, means.split_with_sizes(b.batch.sizes()));
    for (size_t i : b.slots) settle_memory_device(slots[i]);
}

// ------------------------------------------------------------ small top-k and DGC tensors encoded as one

namespace {

// Tensors up to this many values join a top-k batch: above it one tensor's top k costs
// more than its launches. A batch's padding stays within its values plus 1 Mi floats on
// a GPU, where a row's top k costs little more than its launch; on a CPU, whose top k
// costs the length of its row, within its values.
constexpr std::int64_t kTopkBatchTensorValues = std::int64_t{1} << 16;
constexpr std::int64_t kTopkBatchPaddingGpu = std::int64_t{1} << 20;

}  // namespace

// Batches of top-k (or DGC, with one momentum factor) slots of similar sizes, the longest
// first; a batch's error memories (and momenta) are one tensor, the slots' views of it.
void GradientExchange::Impl::layout_topk_device() {
    struct Candidate {
        size_t slot;
        float factor;         // DGC's momentum factor, -1 for none
        at::Tensor* momentum;  // DGC's momentum, nullptr for none
    };
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if (s.codec->channel() != Channel::gather || !s.device_codec->sends_largest() || !s.error_feedback ||
            s.offset % 4 != 0 || s.n > kTopkBatchTensorValues)
            continue;
        float factor = -1;
        at::Tensor* momentum = s.device_codec->momentum(&factor);
        candidates.push_back({i, factor, momentum});
    }
    std::stable_sort(candidates.begin(), candidates.end(), [&](const Candidate& a, const Candidate& b) {
        return a.factor != b.factor ? a.factor < b.factor : slots[a.slot].n > slots[b.slot].n;
    });
    const auto floats = at::TensorOptions().dtype(at::kFloat).device(device);
    const bool on_cpu = device.is_cpu();
    for (size_t first = 0; first < candidates.size();) {
        const std::int64_t longest = slots[candidates[first].slot].n;
        const float factor = candidates[first].factor;
        std::int64_t values = 0;
        size_t end = first;
        for (; end < candidates.size() && candidates[end].factor == factor; ++end) {
            const std::int64_t v = values + slots[candidates[end].slot].n;
            const auto rows = static_cast<std::int64_t>(end - first + 1);
            if (end > first && rows * longest > (on_cpu ? 2 * v : v + kTopkBatchPaddingGpu)) break;
            values = v;
        }
        if (end - first >= 2) {
            std::vector<size_t> members;
            std::vector<compress::device::TopkBatch::Part> parts;
            for (size_t c = first; c < end; ++c) {
                const Slot& s = slots[candidates[c].slot];
                members.push_back(candidates[c].slot);
                parts.push_back({s.offset, s.device_codec->sparse_pairs(), s.n});
            }
            const bool dgc = factor >= 0;
            TopkEncodeBatch b{members, compress::device::TopkBatch(parts, device), at::zeros({values}, floats),
                              dgc ? at::zeros({values}, floats) : at::Tensor(), {}, dgc ? factor : 0.0f};
            std::int64_t start = 0;
            for (size_t c = first; c < end; ++c) {
                Slot& s = slots[candidates[c].slot];
                s.topk_batch = static_cast<int>(topk_batches.size());
                adopt(s.device_memory, s.memory_used, b.memory.narrow(0, start, s.n));
                if (at::Tensor* u = candidates[c].momentum) {
                    adopt(*u, true, b.momentum.narrow(0, start, s.n));
                    b.momenta.push_back(*u);
                }
                start += s.n;
            }
            topk_batches.push_back(std::move(b));
        }
        first = end;
    }
}

// The batch's gradients into its memories (through DGC's momenta), then its payloads and
// finite flags; DGC's momenta cleared where they sent.
void GradientExchange::Impl::encode_topk_batch(TopkEncodeBatch& b) {
    std::vector<at::Tensor> memories, grads;
    for (size_t i : b.slots) {
        Slot& s = slots[i];
        memories.push_back(s.device_memory);
        grads.push_back(s.device_grad);
        s.device_t = s.device_memory;
        s.memory_used = true;
        s.t_in_memory = true;
    }
    if (b.momentum.defined()) {
        // As each codec rounds it: u = factor u, u += g, memory += u.
        b.momentum.mul_(b.momentum_factor);
        at::_foreach_add_(b.momenta, grads);
        b.memory.add_(b.momentum);
    } else {
        at::_foreach_add_(memories, grads);
    }
    at::Tensor sent;
    at::Tensor finite = b.batch.encode(b.memory, true, channel_buffer(Channel::gather), &sent);
    if (b.momentum.defined()) b.momentum.index_fill_(0, sent, 0.0);
    if (options.check_finite) step_batched_checks.push_back({b.slots, DeviceCheck::Kind::encode_finite, finite});
}

}  // namespace acc::exchange
