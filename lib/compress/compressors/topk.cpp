// topk:FRACTION: the largest-magnitude entries with their indices, through the allgather;
// error feedback keeps the rest.
#include "compress/compressors/topk.hpp"

#include "base/error.hpp"
#include "compress/kernel_support.hpp"

#include <limits>

#ifndef ACC_COMPRESS_DEVICE  // ------------------------------------------ host section

namespace acc::compress {

// ---------------------------------------------------------------- kernels
// The loops of compress/kernels.hpp this compressor owns.

namespace kernels {
using namespace detail;
namespace {

// Indices (and magnitude keys) of the entries whose key is >= tau; counts past capacity.
std::int64_t scan_portable(const float* t, std::int64_t begin, std::int64_t n, std::uint32_t tau,
                           std::int32_t* out, std::uint32_t* keys, std::int64_t capacity, std::int64_t count) {
    for (std::int64_t i = begin; i < n; ++i) {
        std::uint32_t key = magnitude_key(t[i]);
        if (key >= tau) {
            if (count < capacity) {
                out[count] = static_cast<std::int32_t>(i);
                keys[count] = key;
            }
            ++count;
        }
    }
    return count;
}

#if ACC_X86
ACC_SIMD std::int64_t scan_simd(const float* t, std::int64_t n, std::uint32_t tau, std::int32_t* out,
                                std::uint32_t* keys, std::int64_t capacity) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    // Keys are below 2^31, so a signed comparison with tau - 1 is key >= tau.
    const __m256i below = _mm256_set1_epi32(static_cast<int>(tau) - 1);
    std::int64_t count = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i key = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + i)), abs_mask);
        unsigned mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below))));
        while (mask) {
            int j = __builtin_ctz(mask);
            if (count < capacity) {
                out[count] = static_cast<std::int32_t>(i + j);
                keys[count] = magnitude_key(t[i + j]);
            }
            ++count;
            mask &= mask - 1;
        }
    }
    return scan_portable(t, i, n, tau, out, keys, capacity, count);
}

#endif

}  // namespace

namespace {

// Indices i in [0, n) with magnitude key >= tau, ascending, into scratch.candidates.
std::int64_t scan(const float* t, std::int64_t n, std::uint32_t tau, SelectScratch& s) {
    auto& c = s.candidates;
    auto& k = s.candidate_keys;
    if (c.size() < 1024) c.resize(1024);
    k.resize(c.size());
    for (;;) {
        std::int64_t count = 0;
        auto capacity = static_cast<std::int64_t>(c.size());
#if ACC_X86
        if (simd())
            count = scan_simd(t, n, tau, c.data(), k.data(), capacity);
        else
#endif
            count = scan_portable(t, 0, n, tau, c.data(), k.data(), capacity, 0);
        if (count <= capacity) return count;
        c.resize(static_cast<size_t>(count + count / 4));
        k.resize(c.size());
    }
}

// The magnitude key of the r-th largest (0-based) of the keys in [first, last).
std::uint32_t rank_from_top(std::vector<std::uint32_t>& keys, std::int64_t count, std::int64_t r) {
    auto nth = keys.begin() + (count - 1 - r);
    std::nth_element(keys.begin(), nth, keys.begin() + count);
    return *nth;
}

// Keeps the k candidates of largest magnitude (ties: the first by position), in order.
void refine_exact(std::int64_t count, std::int64_t k, SelectScratch& s, std::int32_t* indices) {
    auto& keys = s.keys;
    const std::uint32_t* candidate_keys = s.candidate_keys.data();
    if (static_cast<std::int64_t>(keys.size()) < count) keys.resize(static_cast<size_t>(count));
    std::copy(candidate_keys, candidate_keys + count, keys.begin());
    const std::uint32_t kth = rank_from_top(keys, count, k - 1);
    std::int64_t greater = 0;
    for (std::int64_t j = 0; j < count; ++j) greater += candidate_keys[j] > kth;
    std::int64_t equal_quota = k - greater, out = 0;
    for (std::int64_t j = 0; j < count && out < k; ++j) {
        std::uint32_t key = candidate_keys[j];
        if (key > kth || (key == kth && equal_quota-- > 0)) indices[out++] = s.candidates[static_cast<size_t>(j)];
    }
}

// Magnitude keys of a strided sample with a random start; returns the sample size.
std::int64_t strided_sample(const float* t, std::int64_t n, std::int64_t wanted, std::uint64_t key,
                            std::vector<std::uint32_t>& keys) {
    const std::int64_t stride = std::max<std::int64_t>(1, n / wanted);
    Rng rng(key);
    const auto start = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(stride)));
    const std::int64_t count = (n - start + stride - 1) / stride;
    if (static_cast<std::int64_t>(keys.size()) < count) keys.resize(static_cast<size_t>(count));
    for (std::int64_t j = 0; j < count; ++j) keys[static_cast<size_t>(j)] = magnitude_key(t[start + j * stride]);
    return count;
}

}  // namespace

void top_k_exact(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key, std::int32_t* indices,
                 SelectScratch& s) {
    if (k >= n) {
        for (std::int64_t i = 0; i < n; ++i) indices[i] = static_cast<std::int32_t>(i);
        return;
    }
    std::uint32_t tau = 0;
    if (n > 8192) {
        // Aim a little below the k-th magnitude so that, with high probability, at
        // least k entries pass, but not many more. A sample of n / 16 (at most 32,768)
        // keeps its cost small against the scan.
        const std::int64_t wanted = std::min<std::int64_t>(32768, n / 16);
        std::int64_t m = strided_sample(t, n, wanted, key, s.keys);
        double expected = static_cast<double>(k) * static_cast<double>(m) / static_cast<double>(n);
        auto r = static_cast<std::int64_t>(expected + 4.0 * std::sqrt(expected) + 32.0);
        for (;;) {
            tau = r >= m ? 0 : rank_from_top(s.keys, m, r);
            if (tau == 0) break;
            std::int64_t count = scan(t, n, tau, s);
            if (count >= k) {
                refine_exact(count, k, s, indices);
                return;
            }
            // Unlucky sample: lower the threshold and scan again (the sample keys
            // are only permuted by the rank search, so they can be ranked again).
            r = 2 * r + 64;
        }
    }
    std::int64_t count = scan(t, n, 0, s);
    refine_exact(count, k, s, indices);
}

std::int64_t top_k_sampled(const float* t, std::int64_t n, std::int64_t k, std::uint64_t key, std::int32_t* indices,
                           SelectScratch& s) {
    const double fraction = static_cast<double>(k) / static_cast<double>(n);
    const auto wanted = std::max<std::int64_t>((n + 99) / 100, static_cast<std::int64_t>(std::ceil(2.0 / fraction)));
    if (k >= n || wanted >= n) {
        top_k_exact(t, n, k, key, indices, s);
        return std::min(k, n);
    }
    const std::int64_t m = strided_sample(t, n, wanted, key, s.keys);
    const auto top = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(static_cast<double>(m) * fraction)));
    std::uint32_t tau = rank_from_top(s.keys, m, std::min(top, m) - 1);
    std::int64_t count = scan(t, n, tau, s);
    for (int round = 0;; ++round) {
        if (static_cast<double>(count) > 1.3 * static_cast<double>(k)) {
            refine_exact(count, k, s, indices);
            return k;
        }
        if (static_cast<double>(count) >= 0.8 * static_cast<double>(k) || tau == 0 || round == 10) break;
        // Lower the threshold by 0.8x (a NaN or infinite threshold drops to the largest finite value).
        float lowered = std::min(float_of(tau), std::numeric_limits<float>::max()) * 0.8f;
        tau = magnitude_key(lowered);
        count = scan(t, n, tau, s);
    }
    count = std::min(count, k);
    std::copy(s.candidates.begin(), s.candidates.begin() + count, indices);
    return count;
}

bool scatter_add(const std::uint8_t* values, const std::uint8_t* indices, std::int64_t k, std::int64_t n,
                 float weight, float* out) {
    for (std::int64_t j = 0; j < k; ++j) {
        std::int32_t i = load_i32(indices + 4 * j);
        if (i < 0 || i >= n) return false;
        out[i] += weight * load_f32(values + 4 * j);
    }
    return true;
}

}  // namespace kernels

namespace k = kernels;

SparseCodec::SparseCodec(const Spec& spec, std::int64_t n, bool sampled)
    : TensorCodec(spec, n), k_(kept_entries(spec.parameter, n)), sampled_(sampled), indices_(static_cast<size_t>(k_)) {}

bool SparseCodec::encode(float* t, bool update_error, std::uint64_t key, std::uint8_t* payload) {
    std::int64_t chosen = k_;
    if (sampled_)
        chosen = k::top_k_sampled(t, numel_, k_, key, indices_.data(), scratch_);
    else
        k::top_k_exact(t, numel_, k_, key, indices_.data(), scratch_);
    // A sampled threshold may choose fewer than k: the rest is padding that adds 0 to entry 0.
    std::fill(indices_.begin() + chosen, indices_.end(), 0);
    std::uint8_t* values = payload;
    std::uint8_t* indices = payload + 4 * k_;
    for (std::int64_t j = 0; j < k_; ++j) {
        std::int32_t i = indices_[static_cast<size_t>(j)];
        k::store_f32(values + 4 * j, j < chosen ? t[i] : 0.0f);
        k::store_i32(indices + 4 * j, i);
    }
    if (update_error)
        for (std::int64_t j = 0; j < chosen; ++j) t[indices_[static_cast<size_t>(j)]] = 0.0f;
    chosen_ = chosen;
    return true;
}

bool SparseCodec::decode(const std::vector<const std::uint8_t*>& payloads, float* out) const {
    std::fill(out, out + numel_, 0.0f);
    const float weight = codec_util::inverse_world(payloads.size());
    for (const std::uint8_t* p : payloads)
        if (!k::scatter_add(p, p + 4 * k_, k_, numel_, weight, out)) return false;
    return true;
}

std::int64_t sparse_wire_bytes(double fraction, const std::vector<std::int64_t>& shape) {
    return 8 * kept_entries(fraction, shape_numel(shape));
}

namespace {

std::unique_ptr<TensorCodec> make(const Spec& spec, const std::vector<std::int64_t>& shape, const CodecOptions& o) {
    const std::int64_t n = shape_numel(shape);
    codec_util::check_int32_indices(spec, n);
    return std::make_unique<SparseCodec>(spec, n, o.topk.selection == TopkSelection::sampled);
}

}  // namespace

const CompressorInfo& topk_compressor() {
    static const CompressorInfo info = [] {
        CompressorInfo c;
        c.name = "topk";
        c.parameter_info = {"FRACTION", "F", false, 1, "0.01", {0.01}};
        c.summary = "largest-magnitude FRACTION of entries, error feedback (0 < FRACTION <= 1)";
        c.collective = Collective::allgather;
        c.error_feedback = true;
        c.wire_bytes = sparse_wire_bytes;
        c.gravac_family = true;
        c.make_codec = make;
        c.residual_model = ResidualModel::topk_tail;
        return c;
    }();
    return info;
}

}  // namespace acc::compress

#else  // -------------------------------------------------------------- device section
// Compiled into the LibTorch library only (acc_compress_device): the device codec.

#if ACC_CUDA_KERNELS
#include "compress/cuda/encoders.hpp"
#endif

namespace acc::compress {

SparseDeviceCodec::SparseDeviceCodec(std::unique_ptr<TensorCodec> host, std::int64_t k)
    : DeviceCodec(std::move(host)), k_(k) {}

at::Tensor SparseDeviceCodec::encode(at::Tensor& t, bool update_error, std::uint64_t, at::Tensor& payload) {
    if (k_ == 0) return device::flag(true, t.device());
#if ACC_CUDA_KERNELS
    if (device::cuda_unmeasured_kernels_for(t.device())) {
        // Radix selection: a few passes over t instead of torch.topk and a sort; values and
        // indices land next to each other, as in the payload, after the kernels' scratch.
        const std::int64_t scratch = cuda::top_k_scratch_bytes(numel()) / 4;
        at::Tensor words = at::empty({scratch + 2 * k_}, t.options().dtype(at::kInt));
        at::Tensor pairs = words.narrow(0, scratch, 2 * k_);
        indices_ = pairs.narrow(0, k_, k_);
        return device::kernel_flag(t, [&](bool* ok, void* stream) {
            auto* values = reinterpret_cast<float*>(pairs.data_ptr<std::int32_t>());
            cuda::top_k(t.data_ptr<float>(), numel(), k_, update_error, values, indices_.data_ptr<std::int32_t>(),
                        words.data_ptr(), ok, stream);
            payload.narrow(0, 0, 8 * k_).copy_(device::bytes_of(pairs));
        });
    }
#endif
    // The exact top k by magnitude (NaN counts as the largest, as on the host), in
    // ascending index order. Among equal magnitudes the choice may differ from the host's.
    // A NaN or an infinity in t is among them, so their magnitudes tell whether t is
    // finite: k values checked instead of a pass over all of t.
    auto [magnitudes, chosen] = at::topk(t.abs(), k_, 0, true, false);
    indices_ = std::get<0>(at::sort(chosen));
    payload.narrow(0, 0, 4 * k_).copy_(device::bytes_of(t.index_select(0, indices_)));
    payload.narrow(0, 4 * k_, 4 * k_).copy_(device::bytes_of(indices_.to(at::kInt)));
    if (update_error) t.index_fill_(0, indices_, 0.0);
    return magnitudes.lt(std::numeric_limits<double>::infinity()).all();
}

const at::Tensor& SparseDeviceCodec::last_indices() {
    if (indices_.defined() && indices_.scalar_type() != at::kLong) indices_ = indices_.to(at::kLong);
    return indices_;
}

namespace {

// out += the mean of W workers' pairs, worker after worker as the host adds them:
// values [W, K] float32 and indices [W, K] int32, each index counted from `base` ([K]
// int64, or undefined for 0) and valid below `limit` (a [K] int64 tensor, or a number).
// Returns [W, K] bool: which indices were valid. An invalid one (a malformed payload) adds
// nothing, at its tensor's first entry.
template <typename Limit>
at::Tensor scatter_mean(const at::Tensor& values, const at::Tensor& indices, const Limit& limit,
                        const at::Tensor& base, int workers, at::Tensor& out) {
    const float weight = codec_util::inverse_world(static_cast<size_t>(workers));
    at::Tensor local = indices.to(at::kLong);
    at::Tensor inside = local.ge(0).logical_and_(local.lt(limit));
    at::Tensor place = base.defined() ? at::where(inside, local.add_(base), base) : local.mul_(inside);
    at::Tensor terms = at::where(inside, values * weight, at::zeros({}, values.options()));
    // A worker's indices are distinct (padding adds 0 to entry 0), while several workers
    // often pick the same entry, whose terms a single scatter over all W would add in any
    // order (CUDA's atomics), so that ranks would round the sum differently and their
    // weights drift apart: one scatter per worker, in worker order.
    for (std::int64_t w = 0; w < place.size(0); ++w) out.index_add_(0, place[w], terms[w]);
    return inside;
}

}  // namespace

at::Tensor SparseDeviceCodec::decode(const std::vector<at::Tensor>& payloads, at::Tensor& out) {
    out.zero_();
    if (k_ == 0 || payloads.empty()) return device::flag(true, out.device());
    // The pairs of all workers at once ([W, k], no larger than what the allgather received).
    at::Tensor all = at::stack(payloads);
    at::Tensor values = device::columns_as(all, 0, k_, at::kFloat);
    at::Tensor indices = device::columns_as(all, 4 * k_, k_, at::kInt);
    return scatter_mean(values, indices, at::Scalar(numel()), at::Tensor(), static_cast<int>(payloads.size()), out)
        .all();
}

namespace device {

SparseBatch::SparseBatch(const std::vector<Part>& parts, const at::Device& device) {
    std::vector<std::int64_t> value_words, index_words, limit, base, ends;
    for (const Part& p : parts) {
        if (p.offset % 4 != 0 || p.pairs < 1 || p.numel < 1)
            throw Error("internal error: a sparse batch part at byte " + std::to_string(p.offset) + " with " +
                        std::to_string(p.pairs) + " pairs of " + std::to_string(p.numel) + " values");
        for (std::int64_t j = 0; j < p.pairs; ++j) {
            value_words.push_back(p.offset / 4 + j);
            index_words.push_back(p.offset / 4 + p.pairs + j);
            limit.push_back(p.numel);
            base.push_back(numel_);
        }
        ends.push_back(static_cast<std::int64_t>(value_words.size()) - 1);
        sizes_.push_back(p.numel);
        numel_ += p.numel;
        bytes_ = std::max(bytes_, p.offset + 8 * p.pairs);
    }
    auto on_device = [&](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
    value_words_ = on_device(value_words);
    index_words_ = on_device(index_words);
    limit_ = on_device(limit);
    base_ = on_device(base);
    ends_ = on_device(ends);
}

at::Tensor SparseBatch::decode(const at::Tensor& rows, at::Tensor& means) const {
    if (rows.dim() != 2 || rows.scalar_type() != at::kByte || rows.size(1) < bytes_ || means.numel() != numel_)
        throw Error("internal error: a sparse batch of " + std::to_string(numel_) + " values decoding into " +
                    std::to_string(means.numel()) + " from rows of " + std::to_string(rows.size(-1)) + " bytes");
    // 32-bit words of each worker's buffer (rows padded to whole words where needed).
    at::Tensor words = rows.is_contiguous() ? rows : rows.contiguous();
    if (words.size(1) % 4 != 0) words = at::constant_pad_nd(words, {0, 4 - words.size(1) % 4});
    at::Tensor values = words.view(at::kFloat).index_select(1, value_words_);
    at::Tensor indices = words.view(at::kInt).index_select(1, index_words_);
    means.zero_();
    at::Tensor inside = scatter_mean(values, indices, limit_, base_, static_cast<int>(rows.size(0)), means);
    return true_parts(inside.all(0), ends_);
}

TopkBatch::TopkBatch(const std::vector<Part>& parts, const at::Device& device) {
    for (const Part& p : parts) {
        if (p.offset % 4 != 0 || p.pairs < 1 || p.pairs > p.numel)
            throw Error("internal error: a top-k batch part at byte " + std::to_string(p.offset) + " with " +
                        std::to_string(p.pairs) + " pairs of " + std::to_string(p.numel) + " values");
        longest_ = std::max(longest_, p.numel);
        widest_ = std::max(widest_, p.pairs);
    }
    rows_ = static_cast<std::int64_t>(parts.size());
    std::vector<std::int64_t> to, chosen, start, value_words, index_words;
    std::vector<std::uint8_t> unused(static_cast<size_t>(rows_ * widest_), 0);
    for (std::int64_t b = 0; b < rows_; ++b) {
        const Part& p = parts[static_cast<size_t>(b)];
        for (std::int64_t i = 0; i < p.numel; ++i) to.push_back(b * longest_ + i);
        for (std::int64_t j = 0; j < widest_; ++j) unused[static_cast<size_t>(b * widest_ + j)] = j >= p.pairs;
        for (std::int64_t j = 0; j < p.pairs; ++j) {
            chosen.push_back(b * widest_ + j);
            start.push_back(numel_);
            value_words.push_back(p.offset / 4 + j);
            index_words.push_back(p.offset / 4 + p.pairs + j);
        }
        numel_ += p.numel;
        bytes_ = std::max(bytes_, p.offset + 8 * p.pairs);
    }
    auto on_device = [&](const std::vector<std::int64_t>& v) { return at::tensor(v, at::kLong).to(device); };
    to_ = on_device(to);
    chosen_ = on_device(chosen);
    start_ = on_device(start);
    value_words_ = on_device(value_words);
    index_words_ = on_device(index_words);
    unused_ = at::from_blob(unused.data(), {rows_, widest_}, at::kByte).to(at::kBool).to(device);
}

at::Tensor TopkBatch::encode(at::Tensor& t, bool update_error, at::Tensor& buffer, at::Tensor* sent) const {
    if (t.dim() != 1 || t.numel() != numel_ || buffer.scalar_type() != at::kByte || buffer.numel() < bytes_)
        throw Error("internal error: a top-k batch of " + std::to_string(numel_) + " values encoding " +
                    std::to_string(t.numel()) + " into a buffer of " + std::to_string(buffer.numel()) + " bytes");
    // Magnitudes row by row, -1 after each row's values so that padding is never chosen
    // (NaN counts as the largest, as in each tensor's own top k).
    at::Tensor padded = at::full({rows_, longest_}, -1.0f, t.options());
    padded.view({-1}).index_copy_(0, to_, t.abs());
    auto [magnitudes, places] = at::topk(padded, widest_, 1, true, true);
    // A row's k largest come first; in ascending order, the unused columns last.
    at::Tensor ascending = std::get<0>(at::sort(places.masked_fill(unused_, longest_), 1));
    at::Tensor local = ascending.view({-1}).index_select(0, chosen_);
    at::Tensor place = local + start_;
    at::Tensor words = buffer.narrow(0, 0, buffer.numel() / 4 * 4);
    words.view(at::kFloat).index_copy_(0, value_words_, t.index_select(0, place));
    words.view(at::kInt).index_copy_(0, index_words_, local.to(at::kInt));
    if (update_error) t.index_fill_(0, place, 0.0);
    if (sent) *sent = place;
    // Columns past a row's k hold smaller magnitudes: non-finite only where its k are too.
    return magnitudes.lt(std::numeric_limits<double>::infinity()).all(1);
}

}  // namespace device

namespace {

std::unique_ptr<DeviceCodec> make_device(std::unique_ptr<TensorCodec> host, const Spec&, const CodecOptions&) {
    const std::int64_t k = host->payload_bytes() / 8;
    return std::make_unique<SparseDeviceCodec>(std::move(host), k);
}

}  // namespace

std::unique_ptr<DeviceCodec> make_topk_device_codec(std::unique_ptr<TensorCodec> host, const Spec& spec,
                                                    const CodecOptions& options) {
    return make_device(std::move(host), spec, options);
}

}  // namespace acc::compress

#endif  // ACC_COMPRESS_DEVICE
