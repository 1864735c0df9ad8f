#include "compress/exchange.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "compress/kernels.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace acc::compress {
namespace k = kernels;

namespace {

using Clock = std::chrono::steady_clock;


// The channels with a flat buffer of their own, in the order a step launches them:
// the summed ones (before PowerSGD's P), then the allgather. PowerSGD's low_rank channel
// has its P and Q buffers instead.
constexpr std::array<Channel, 3> kSumChannels = {Channel::fp32_sum, Channel::fp16_sum, Channel::sparse_sum};
constexpr size_t kChannels = 5;

at::ScalarType channel_dtype(Channel c) {
    switch (c) {
    case Channel::fp16_sum: return at::kHalf;
    case Channel::gather: return at::kByte;
    default: return at::kFloat;
    }
}

// The stream every worker shares (randomk's indices), as opposed to one per rank.
constexpr std::uint64_t kSharedStream = ~0ull;

}  // namespace

StepStats& StepStats::operator+=(const StepStats& o) {
    bytes += o.bytes;
    collectives += o.collectives;
    encode_seconds += o.encode_seconds;
    communication_seconds += o.communication_seconds;
    decode_seconds += o.decode_seconds;
    return *this;
}

double dgc_warmup_fraction(double fraction, std::int64_t epoch, std::int64_t warmup_epochs) {
    if (warmup_epochs <= 0 || epoch >= warmup_epochs || epoch < 0) return fraction;
    // DGC's default schedule: coefficient fraction^(1 / (E + 1)), raised to e + 1.
    double warm = std::pow(fraction, static_cast<double>(epoch + 1) / static_cast<double>(warmup_epochs + 1));
    return std::min(1.0, std::max(fraction, warm));
}

struct Slot {
    TensorInfo info;
    std::int64_t n = 0;
    Spec level, effective;
    bool error_feedback = false;   // keeps an error memory at this level
    std::vector<float> memory;     // allocated on first use
    bool memory_used = false;      // memory may hold values that still have to be sent
    std::unique_ptr<TensorCodec> codec;  // the effective level's, for this tensor
    // PowerSGD: the matrix view and the warm-start Q (cols x rank, row-major).
    std::int64_t rows = 0, cols = 0;
    int rank = 0;
    std::vector<float> q;
    bool fresh_q = true;
    // Place in its channel's flat buffer (bytes), and in P and Q (elements).
    std::int64_t offset = 0, p_offset = 0, q_offset = 0;
    std::int64_t bytes = 0;
    // During a step.
    float* grad = nullptr;  // read at start, overwritten with the aggregate at finish
    float* t = nullptr;     // the compensated input: memory, or grad itself
    bool t_in_memory = false;
    at::Tensor staged;      // host copy of a gradient that is not a contiguous CPU tensor
    at::Tensor original;
};

struct GradientExchange::Impl {
    comm::Collectives& comm;
    ExchangeOptions options;
    CodecOptions codec_options;
    std::vector<TensorInfo> tensors;
    std::vector<Spec> levels;
    std::vector<Slot> slots;
    std::int64_t epoch = 0;
    std::int64_t step = 0;
    k::NumpyRandomState powersgd_rng;
    bool layout_dirty = true;

    // Flat buffers of one step (by channel; P and Q apart) and the order of PowerSGD's
    // matrices in P and Q.
    std::array<at::Tensor, kChannels> buffer;
    at::Tensor p, q;
    std::vector<size_t> powersgd_order;
    std::array<std::unique_ptr<comm::Work>, kChannels> sum_work;
    std::unique_ptr<comm::Work> p_work, q_work;
    bool in_flight = false;
    std::vector<float> qt;  // scratch: one Q transposed

    StepStats current, last, total;
    std::vector<std::int64_t> tensor_bytes;

    Impl(comm::Collectives& c, ExchangeOptions o) : comm(c), options(o), powersgd_rng(o.seed) {
        codec_options.topk_selection = o.topk_selection;
        codec_options.dgc_momentum = o.dgc_momentum;
        codec_options.world = c.world_size();
        codec_options.uncompressed_error_feedback = o.powersgd_variant == PowerSgdVariant::pytorch_hook;
    }

    at::Tensor& channel_buffer(Channel c) { return buffer[static_cast<size_t>(c)]; }
    // Where the slot's payload lives in its channel's buffer (none when the buffer is empty).
    std::uint8_t* payload_of(Slot& s) {
        at::Tensor& b = channel_buffer(s.codec->channel());
        return b.defined() ? static_cast<std::uint8_t*>(b.data_ptr()) + s.offset : nullptr;
    }

    int world() const { return comm.world_size(); }

    // ------------------------------------------------------------ levels

    Spec effective_of(const Spec& level) const {
        if (level.name != "dgc" || options.dgc_warmup_epochs <= 0) return level;
        Spec s = level;
        s.parameter = dgc_warmup_fraction(level.parameter, epoch, options.dgc_warmup_epochs);
        return s;
    }

    void validate(const Spec& level, const TensorInfo& t) const {
        level.info();  // an unknown name throws
        for (auto d : t.shape)
            if (d < 0) throw UsageError(t.name + ": negative dimension in its shape");
    }

    // Makes the codec of the slot's effective level, and PowerSGD's shape.
    void configure(Slot& s, bool keep_codec_state) {
        const Spec& e = s.effective;
        std::vector<float> kept_momentum;
        if (keep_codec_state && s.codec)
            for (auto& entry : s.codec->state()) kept_momentum = std::move(*entry.second);
        s.codec.reset();
        s.codec = make_codec(e, s.info.shape, codec_options);
        s.error_feedback = options.error_feedback && s.codec->error_feedback();
        const LowRank low = s.codec->low_rank();
        s.rows = low.rows;
        s.cols = low.cols;
        s.rank = low.rank;
        if (s.codec->channel() == Channel::low_rank && static_cast<std::int64_t>(s.q.size()) != s.cols * s.rank) {
            s.q.clear();
            s.fresh_q = true;
        }
        if (!kept_momentum.empty())
            for (auto& entry : s.codec->state())
                if (entry.second->size() == kept_momentum.size()) *entry.second = std::move(kept_momentum);
        layout_dirty = true;
    }

    void apply_level(size_t i, const Spec& level, bool initial) {
        Slot& s = slots[i];
        validate(level, s.info);
        if (!initial && level == s.level) return;
        const bool same_compressor = !initial && level.name == s.level.name;
        s.level = level;
        // A new level starts fresh compressor state: PowerSGD draws a new Q. The error
        // memory stays. DGC keeps its momentum when only its fraction changes.
        s.q.clear();
        s.fresh_q = true;
        s.effective = effective_of(level);
        configure(s, same_compressor);
    }

    void refresh_effective() {
        for (auto& s : slots) {
            Spec e = effective_of(s.level);
            if (e == s.effective) continue;
            s.effective = e;
            configure(s, true);
        }
    }

    // Every worker must run the same levels: compare a hash of them across workers.
    void check_agreement() {
        if (world() <= 1) return;
        // Each text ends with a byte no text holds, so that ("ab", "c") and ("a", "bc") differ.
        std::uint64_t h = kFnv1aStart;
        auto feed = [&](const std::string& text) { h = fnv1a(text + '\xff', h); };
        for (const auto& s : slots) {
            feed(s.info.name);
            feed(s.level.text());
            for (auto d : s.info.shape) feed(std::to_string(d));
        }
        const auto hi = static_cast<std::int64_t>(h >> 32), lo = static_cast<std::int64_t>(h & 0xffffffffull);
        at::Tensor t = at::tensor(std::vector<std::int64_t>{hi, lo, -hi, -lo}, at::kLong);
        comm.allreduce(t, comm::ReduceOp::max);
        auto v = t.accessor<std::int64_t, 1>();
        if (v[0] != hi || v[1] != lo || v[2] != -hi || v[3] != -lo)
            throw Error("workers disagree on the tensors or their compression levels (rank " +
                        std::to_string(comm.rank()) + "); every worker must pass the same ones");
    }

    // ------------------------------------------------------------ layout

    void layout() {
        std::array<std::int64_t, kChannels> used{};  // bytes
        std::int64_t p_n = 0, q_n = 0;
        powersgd_order.clear();
        std::vector<std::pair<std::int64_t, std::int64_t>> shapes;  // first-appearance order
        std::map<std::pair<std::int64_t, std::int64_t>, std::vector<size_t>> by_shape;
        tensor_bytes.assign(slots.size(), 0);
        for (size_t i = 0; i < slots.size(); ++i) {
            Slot& s = slots[i];
            s.bytes = s.codec->payload_bytes();
            const Channel c = s.codec->channel();
            if (c == Channel::low_rank) {
                auto key = std::make_pair(s.rows, s.cols);
                if (!by_shape.count(key)) shapes.push_back(key);
                by_shape[key].push_back(i);
            } else {
                s.offset = used[static_cast<size_t>(c)];
                used[static_cast<size_t>(c)] += s.codec->buffer_bytes();
            }
            tensor_bytes[i] = s.bytes;
        }
        // PyTorch's hook walks the compressed tensors grouped by matrix shape, in order of
        // first appearance; so do P, Q and the random draws of Q here.
        for (const auto& key : shapes)
            for (size_t i : by_shape[key]) {
                Slot& s = slots[i];
                s.p_offset = p_n;
                s.q_offset = q_n;
                p_n += s.rows * s.rank;
                q_n += s.cols * s.rank;
                powersgd_order.push_back(i);
            }
        auto make = [](std::int64_t n, at::ScalarType type) {
            return n > 0 ? at::empty({n}, at::TensorOptions().dtype(type)) : at::Tensor();
        };
        for (Channel c : {Channel::fp32_sum, Channel::fp16_sum, Channel::sparse_sum, Channel::gather})
            channel_buffer(c) = make(used[static_cast<size_t>(c)] / channel_element_bytes(c), channel_dtype(c));
        p = make(p_n, at::kFloat);
        q = make(q_n, at::kFloat);
        layout_dirty = false;
    }

    // ------------------------------------------------------------ PowerSGD

    void orthogonalize(float* m, std::int64_t n, int r) const {
        if (r <= 2 || options.powersgd_variant == PowerSgdVariant::accordion) {
            k::gram_schmidt(m, n, r, options.orthogonalization_epsilon);
            return;
        }
        at::Tensor a = at::from_blob(m, {n, r}, at::kFloat);
        a.copy_(std::get<0>(at::linalg_qr(a)));
    }

    // Q for every compressed tensor: drawn (first step, new level, or no warm start) or
    // the warm-started one, orthogonalized as the variant says.
    void prepare_qs() {
        const bool hook = options.powersgd_variant == PowerSgdVariant::pytorch_hook;
        bool any_fresh = false;
        for (size_t i : powersgd_order) any_fresh = any_fresh || slots[i].fresh_q || !options.warm_start;
        at::Generator generator;
        if (any_fresh) {
            // As the hook: one torch seed per randomization event, from RandomState(seed).
            auto seed = static_cast<std::uint64_t>(powersgd_rng.randint(1000000000));
            generator = at::make_generator<at::CPUGeneratorImpl>(seed);
        }
        for (size_t i : powersgd_order) {
            Slot& s = slots[i];
            if (s.fresh_q || !options.warm_start) {
                at::Tensor drawn = at::randn({s.cols, s.rank}, generator, at::TensorOptions().dtype(at::kFloat));
                s.q.assign(drawn.data_ptr<float>(), drawn.data_ptr<float>() + drawn.numel());
                s.fresh_q = false;
                if (hook) orthogonalize(s.q.data(), s.cols, s.rank);
            } else if (hook) {
                orthogonalize(s.q.data(), s.cols, s.rank);
            }
        }
    }

    // qt = transpose of the cols x r matrix src.
    void transpose_into(const float* src, std::int64_t cols, int r) {
        qt.resize(static_cast<size_t>(cols * r));
        for (std::int64_t j = 0; j < cols; ++j)
            for (int c = 0; c < r; ++c) qt[static_cast<size_t>(c * cols + j)] = src[j * r + c];
    }

    // ------------------------------------------------------------ one step

    [[noreturn]] void not_finite(const Slot& s, const std::string& detail = "") const {
        throw Error(s.info.name + ": gradient holds NaN or infinity at step " + std::to_string(step) + detail);
    }

    void bind(const std::vector<at::Tensor>& grads) {
        if (grads.size() != slots.size())
            throw UsageError("gradient exchange: got " + std::to_string(grads.size()) + " gradients for " +
                             std::to_string(slots.size()) + " tensors");
        for (size_t i = 0; i < slots.size(); ++i) {
            Slot& s = slots[i];
            const at::Tensor& g = grads[i];
            if (!g.defined()) throw UsageError(s.info.name + ": gradient is missing (undefined tensor)");
            if (g.scalar_type() != at::kFloat)
                throw UsageError(s.info.name + ": gradient has dtype " + std::string(c10::toString(g.scalar_type())) +
                                 "; the exchange takes float32 gradients");
            if (g.numel() != s.n)
                throw UsageError(s.info.name + ": gradient has " + std::to_string(g.numel()) + " values, expected " +
                                 std::to_string(s.n));
            s.original = g;
            if (g.device().is_cpu() && g.is_contiguous()) {
                s.staged = at::Tensor();
                s.grad = g.data_ptr<float>();
            } else {
                s.staged = g.detach().to(at::kCPU).contiguous();
                s.grad = s.staged.data_ptr<float>();
            }
        }
    }

    float* memory_of(Slot& s) {
        if (s.memory.empty() && s.n > 0) s.memory.assign(static_cast<size_t>(s.n), 0.0f);
        return s.memory.data();
    }

    // Error feedback (or a leftover memory sent once): where the step's input t lives.
    bool compensate(Slot& s) {
        s.t = s.grad;
        s.t_in_memory = false;
        if (s.n == 0) return true;
        if (s.error_feedback) {
            s.t = memory_of(s);
            s.t_in_memory = true;
            if (s.codec->channel() == Channel::low_rank) return true;  // added while projecting
            const bool zero = !s.memory_used;
            s.memory_used = true;
            return s.codec->compensate(s.grad, s.t, zero);
        }
        if (s.memory_used) {
            s.t = s.memory.data();
            s.t_in_memory = true;
            return k::add_into(s.t, s.grad, s.n);
        }
        return true;  // checked while encoding
    }

    // After decoding: a level without error feedback has sent what the memory held.
    void settle_memory(Slot& s) {
        if (s.t_in_memory && !s.error_feedback) {
            std::fill(s.memory.begin(), s.memory.end(), 0.0f);
            s.memory_used = false;
        }
    }

    void encode_slot(size_t i, Slot& s) {
        TensorCodec& codec = *s.codec;
        if (codec.channel() == Channel::low_rank) return;  // both rounds run over all matrices together
        if (!s.t_in_memory && options.check_finite && !codec.checks_finite() && !k::all_finite(s.t, s.n))
            not_finite(s);
        const std::uint64_t stream = codec.shared_stream() ? kSharedStream : static_cast<std::uint64_t>(comm.rank());
        const auto key = k::stream_key(options.seed, static_cast<std::uint64_t>(step), i, stream);
        if (!codec.encode(s.t, s.error_feedback, key, payload_of(s)) &&
            (options.check_finite || codec.encode_failure_fatal()))
            not_finite(s, codec.encode_failure_detail());
    }

    std::unique_ptr<comm::Work> launch(at::Tensor& buffer) {
        if (!buffer.defined()) return nullptr;
        auto t0 = Clock::now();
        auto work = comm.allreduce_async(buffer, comm::ReduceOp::sum);
        current.communication_seconds += seconds_since(t0);
        current.collectives += 1;
        current.bytes += static_cast<std::int64_t>(buffer.nbytes());
        return work;
    }

    void wait(std::unique_ptr<comm::Work>& work) {
        if (!work) return;
        auto t0 = Clock::now();
        work->wait();
        current.communication_seconds += seconds_since(t0);
        work.reset();
    }

    void start(const std::vector<at::Tensor>& grads) {
        if (in_flight) throw UsageError("gradient exchange: start() called again before finish()");
        bind(grads);
        if (layout_dirty) layout();
        current = StepStats();
        auto t0 = Clock::now();
        for (size_t i = 0; i < slots.size(); ++i) {
            Slot& s = slots[i];
            if (!compensate(s) && options.check_finite) not_finite(s);
            encode_slot(i, s);
        }
        if (!powersgd_order.empty()) {
            prepare_qs();
            for (size_t i : powersgd_order) {
                Slot& s = slots[i];
                transpose_into(s.q.data(), s.cols, s.rank);
                const float* add = s.error_feedback ? s.grad : nullptr;
                bool finite = k::project_rows(s.t, add, s.rows, s.cols, qt.data(), s.rank, p.data_ptr<float>() + s.p_offset);
                if (s.error_feedback) s.memory_used = true;
                if (options.check_finite && !(add ? finite : k::all_finite(s.t, s.n))) not_finite(s);
            }
        }
        current.encode_seconds += seconds_since(t0);
        for (Channel c : kSumChannels) sum_work[static_cast<size_t>(c)] = launch(channel_buffer(c));
        p_work = launch(p);
        in_flight = true;
    }

    void finish() {
        if (!in_flight) throw UsageError("gradient exchange: finish() called without start()");
        in_flight = false;
        const int W = world();
        const at::Tensor& gather = channel_buffer(Channel::gather);
        if (gather.defined()) {
            auto t0 = Clock::now();
            std::vector<at::Tensor> received = comm.allgather(gather);
            current.communication_seconds += seconds_since(t0);
            current.collectives += 1;
            current.bytes += static_cast<std::int64_t>(gather.nbytes());
            if (static_cast<int>(received.size()) != W)
                throw Error("allgather returned " + std::to_string(received.size()) + " payloads for " +
                            std::to_string(W) + " workers");
            std::vector<const std::uint8_t*> base;
            for (auto& r : received) {
                if (r.scalar_type() != at::kByte || r.numel() != gather.numel() || !r.is_contiguous() || !r.device().is_cpu())
                    throw Error("allgather returned a payload of " + std::to_string(r.numel()) + " bytes, expected " +
                                std::to_string(gather.numel()));
                base.push_back(r.data_ptr<std::uint8_t>());
            }
            auto t1 = Clock::now();
            std::vector<const std::uint8_t*> payloads(base.size());
            for (size_t i = 0; i < slots.size(); ++i) {
                Slot& s = slots[i];
                if (s.codec->channel() != Channel::gather) continue;
                for (size_t w = 0; w < base.size(); ++w) payloads[w] = base[w] + s.offset;
                if (!s.codec->decode(payloads, s.grad))
                    throw Error(s.info.name + ": a worker's " + s.effective.name + " payload is malformed at step " +
                                std::to_string(step));
                settle_memory(s);
            }
            current.decode_seconds += seconds_since(t1);
        }
        if (p_work) {
            wait(p_work);
            auto t0 = Clock::now();
            for (size_t i : powersgd_order) {
                Slot& s = slots[i];
                float* pm = p.data_ptr<float>() + s.p_offset;
                orthogonalize(pm, s.rows, s.rank);
                qt.resize(static_cast<size_t>(s.cols * s.rank));
                k::project_columns(s.t, s.rows, s.cols, pm, s.rank, qt.data());
                float* qm = q.data_ptr<float>() + s.q_offset;
                for (std::int64_t j = 0; j < s.cols; ++j)
                    for (int c = 0; c < s.rank; ++c) qm[j * s.rank + c] = qt[static_cast<size_t>(c * s.cols + j)];
            }
            current.encode_seconds += seconds_since(t0);
            q_work = launch(q);
        }
        decode_dense(W);
        if (q_work) {
            wait(q_work);
            auto t0 = Clock::now();
            float* qm = q.data_ptr<float>();
            k::divide(qm, q.numel(), static_cast<float>(W), qm);
            for (size_t i : powersgd_order) {
                Slot& s = slots[i];
                const float* qs = qm + s.q_offset;
                transpose_into(qs, s.cols, s.rank);
                k::expand_low_rank(p.data_ptr<float>() + s.p_offset, qt.data(), s.rows, s.cols, s.rank, s.grad,
                                   s.error_feedback ? s.memory.data() : nullptr);
                s.q.assign(qs, qs + s.cols * s.rank);
                if (!options.warm_start) s.fresh_q = true;
                settle_memory(s);
            }
            current.decode_seconds += seconds_since(t0);
        }
        at::NoGradGuard no_grad;  // writing back into gradients is no part of any graph
        for (auto& s : slots)
            if (s.staged.defined()) {
                s.original.copy_(s.staged);
                s.staged = at::Tensor();
            }
        for (auto& s : slots) s.original = at::Tensor();
        last = current;
        total += current;
        ++step;
    }

    void decode_dense(int W) {
        for (Channel c : kSumChannels) wait(sum_work[static_cast<size_t>(c)]);
        auto t0 = Clock::now();
        for (auto& s : slots) {
            const Channel c = s.codec->channel();
            if (c == Channel::low_rank || c == Channel::gather) continue;
            s.codec->decode_sum(payload_of(s), W, s.grad, s.error_feedback ? s.memory.data() : nullptr);
            settle_memory(s);
        }
        current.decode_seconds += seconds_since(t0);
    }
};

GradientExchange::GradientExchange(std::vector<TensorInfo> tensors, std::vector<Spec> levels,
                                   comm::Collectives& comm, ExchangeOptions options)
    : impl_(std::make_unique<Impl>(comm, options)) {
    if (tensors.size() != levels.size())
        throw UsageError("gradient exchange: " + std::to_string(levels.size()) + " levels for " +
                         std::to_string(tensors.size()) + " tensors");
    std::set<std::string> names;
    for (const auto& t : tensors)
        if (!names.insert(t.name).second) throw UsageError("gradient exchange: tensor name '" + t.name + "' appears twice");
    impl_->tensors = tensors;
    impl_->levels = levels;
    impl_->slots.resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
        Slot& s = impl_->slots[i];
        s.info = tensors[i];
        s.n = tensors[i].numel();
        impl_->apply_level(i, levels[i], true);
    }
    impl_->check_agreement();
}

GradientExchange::~GradientExchange() = default;

size_t GradientExchange::size() const { return impl_->slots.size(); }
const std::vector<TensorInfo>& GradientExchange::tensors() const { return impl_->tensors; }
const std::vector<Spec>& GradientExchange::levels() const { return impl_->levels; }
Spec GradientExchange::effective_level(size_t tensor) const { return impl_->slots.at(tensor).effective; }

void GradientExchange::set_levels(const std::vector<Spec>& levels) {
    if (impl_->in_flight) throw UsageError("gradient exchange: set_levels() during a step");
    if (levels.size() != impl_->slots.size())
        throw UsageError("gradient exchange: " + std::to_string(levels.size()) + " levels for " +
                         std::to_string(impl_->slots.size()) + " tensors");
    for (size_t i = 0; i < levels.size(); ++i) impl_->apply_level(i, levels[i], false);
    impl_->levels = levels;
    impl_->check_agreement();
}

void GradientExchange::set_epoch(std::int64_t epoch) {
    if (impl_->in_flight) throw UsageError("gradient exchange: set_epoch() during a step");
    impl_->epoch = epoch;
    impl_->refresh_effective();
}

void GradientExchange::start(const std::vector<at::Tensor>& grads) { impl_->start(grads); }
void GradientExchange::finish() { impl_->finish(); }
void GradientExchange::step(const std::vector<at::Tensor>& grads) {
    impl_->start(grads);
    impl_->finish();
}
bool GradientExchange::in_flight() const { return impl_->in_flight; }

const std::vector<std::int64_t>& GradientExchange::last_tensor_bytes() const {
    if (impl_->layout_dirty) impl_->layout();
    return impl_->tensor_bytes;
}
std::vector<PlannedCollective> GradientExchange::planned_collectives() const {
    if (impl_->layout_dirty) impl_->layout();
    std::vector<PlannedCollective> out;
    auto add = [&](const at::Tensor& buffer, Collective kind) {
        if (buffer.defined()) out.push_back({kind, static_cast<std::int64_t>(buffer.nbytes())});
    };
    for (Channel c : kSumChannels) add(impl_->channel_buffer(c), Collective::allreduce);
    add(impl_->p, Collective::allreduce);
    add(impl_->channel_buffer(Channel::gather), Collective::allgather);
    add(impl_->q, Collective::allreduce);
    return out;
}

const StepStats& GradientExchange::last_step() const { return impl_->last; }
const StepStats& GradientExchange::total() const { return impl_->total; }
std::int64_t GradientExchange::steps() const { return impl_->step; }

std::vector<std::pair<std::string, at::Tensor>> GradientExchange::state() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    auto floats = [](const std::vector<float>& v, std::vector<std::int64_t> shape) {
        return at::from_blob(const_cast<float*>(v.data()), shape, at::kFloat).clone();
    };
    for (auto& s : impl_->slots) {
        if (s.memory_used) out.emplace_back(s.info.name + "/error", floats(s.memory, s.info.shape));
        if (!s.q.empty() && !s.fresh_q) out.emplace_back(s.info.name + "/powersgd_q", floats(s.q, {s.cols, s.rank}));
        if (s.codec)
            for (auto& entry : s.codec->state())
                out.emplace_back(s.info.name + "/" + entry.first,
                                 floats(*entry.second, {static_cast<std::int64_t>(entry.second->size())}));
    }
    auto words = impl_->powersgd_rng.state();
    out.emplace_back("exchange/powersgd_rng", at::tensor(words, at::kLong));
    out.emplace_back("exchange/step", at::tensor(std::vector<std::int64_t>{impl_->step}, at::kLong));
    return out;
}

void GradientExchange::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
    if (impl_->in_flight) throw UsageError("gradient exchange: load_state() during a step");
    std::map<std::string, Slot*> by_name;
    for (auto& s : impl_->slots) {
        by_name[s.info.name] = &s;
        s.memory.clear();
        s.memory_used = false;
        s.q.clear();
        s.fresh_q = true;
        if (s.codec)
            for (auto& entry : s.codec->state()) std::fill(entry.second->begin(), entry.second->end(), 0.0f);
    }
    auto fail = [](const std::string& name, const std::string& problem) {
        throw Error("exchange state '" + name + "': " + problem);
    };
    auto read_floats = [&](const std::string& name, const at::Tensor& t, std::int64_t expected) {
        if (t.scalar_type() != at::kFloat) fail(name, "is not float32");
        if (t.numel() != expected)
            fail(name, "has " + std::to_string(t.numel()) + " values, expected " + std::to_string(expected));
        at::Tensor c = t.to(at::kCPU).contiguous();
        return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    };
    for (const auto& [name, tensor] : state) {
        if (name == "exchange/powersgd_rng") {
            at::Tensor c = tensor.to(at::kCPU).to(at::kLong).contiguous();
            std::vector<std::int64_t> words(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
            if (!impl_->powersgd_rng.set_state(words)) fail(name, "is not a RandomState");
            continue;
        }
        if (name == "exchange/step") {
            if (tensor.numel() != 1) fail(name, "must hold one number");
            impl_->step = tensor.to(at::kCPU).to(at::kLong).item<std::int64_t>();
            continue;
        }
        auto slash = name.rfind('/');
        auto it = slash == std::string::npos ? by_name.end() : by_name.find(name.substr(0, slash));
        if (it == by_name.end()) fail(name, "names no tensor of this exchange");
        Slot& s = *it->second;
        std::string what = name.substr(slash + 1);
        if (what == "error") {
            s.memory = read_floats(name, tensor, s.n);
            s.memory_used = true;
        } else if (what == "powersgd_q") {
            if (s.codec->channel() != Channel::low_rank)
                fail(name, "is a PowerSGD Q, but level " + s.effective.text() + " compresses no matrix here");
            if (tensor.dim() != 2 || tensor.size(0) != s.cols || tensor.size(1) != s.rank)
                fail(name, "must be " + std::to_string(s.cols) + "x" + std::to_string(s.rank) + " for level " +
                               s.effective.text());
            s.q = read_floats(name, tensor, s.cols * s.rank);
            s.fresh_q = false;
        } else {
            bool found = false;
            if (s.codec)
                for (auto& entry : s.codec->state())
                    if (entry.first == what) {
                        *entry.second = read_floats(name, tensor, static_cast<std::int64_t>(entry.second->size()));
                        found = true;
                    }
            if (!found) fail(name, "is not state of level " + s.effective.text());
        }
    }
}

}  // namespace acc::compress
