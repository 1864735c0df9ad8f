// Level changes within one compressor family (LevelChange::within_family), and the
// squared norms of what levels would send (squared_norms): what GraVAC needs to choose a
// level every step and send it through the one exchange.
#include "base/error.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace acc::exchange {
namespace {

// The sum of (a - b)^2 (b undefined: of a^2) in double. On the CPU one loop in order,
// so that the same values give the same sum bit for bit, whatever ATen's reductions do.
double squared_distance(const at::Tensor& a, const at::Tensor& b = {}) {
    if (!a.device().is_cpu()) {
        const at::Tensor d = b.defined() ? a.to(at::kDouble) - b.to(at::kDouble) : a.to(at::kDouble);
        return d.square().sum().item<double>();
    }
    const at::Tensor ac = a.contiguous(), bc = b.defined() ? b.contiguous() : at::Tensor();
    const float* x = ac.data_ptr<float>();
    const float* y = bc.defined() ? bc.data_ptr<float>() : nullptr;
    double sum = 0;
    for (std::int64_t i = 0; i < ac.numel(); ++i) {
        const double d = y ? static_cast<double>(x[i]) - static_cast<double>(y[i]) : static_cast<double>(x[i]);
        sum += d * d;
    }
    return sum;
}

}  // namespace

// The slot's warm-start Q now (CPU, cols x rank), or undefined where it has none.
at::Tensor GradientExchange::Impl::current_q(const Slot& s) const {
    if (s.codec->channel() != Channel::low_rank || s.powersgd.fresh) return {};
    if (device_path) return s.powersgd.device_q.defined() ? s.powersgd.device_q.detach().to(at::kCPU).view({s.cols, s.rank}).clone() : at::Tensor();
    if (s.powersgd.q.empty()) return {};
    return at::from_blob(const_cast<float*>(s.powersgd.q.data()), {s.cols, s.rank}, at::kFloat).clone();
}

// Q's first r columns (CPU, cols x r): the current Q followed by the columns kept beyond
// it, and columns drawn as PyTorch's hook draws a Q where there are fewer than r. A slot
// at a PowerSGD level gets its Q (the first columns) from them; the rest are kept.
at::Tensor GradientExchange::Impl::q_columns(Slot& s, int r, std::int64_t cols) {
    const bool low_rank = s.codec->channel() == Channel::low_rank;
    at::Tensor full = current_q(s);
    if (s.powersgd.spare.defined()) full = full.defined() ? at::cat({full, s.powersgd.spare}, 1) : s.powersgd.spare;
    const std::int64_t need = std::max<std::int64_t>(r, low_rank ? s.rank : 0);
    const std::int64_t have = full.defined() ? full.size(1) : 0;
    if (have < need) {
        // As the hook: one torch seed per randomization event, from RandomState(seed).
        auto seed = static_cast<std::uint64_t>(powersgd_rng->randint(1000000000));
        at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
        at::Tensor drawn = at::randn({full.defined() ? full.size(0) : cols, need - have}, generator,
                                     at::TensorOptions().dtype(at::kFloat));
        full = full.defined() ? at::cat({full, drawn}, 1) : drawn;
    }
    full = full.contiguous();
    if (low_rank) {
        if (s.powersgd.fresh) {
            at::Tensor q = full.narrow(1, 0, s.rank).contiguous();
            if (device_path) {
                if (s.powersgd.device_q.defined())
                    s.powersgd.device_q.copy_(q.view(s.powersgd.device_q.sizes()));
                else
                    s.powersgd.device_q = q.to(device);
            } else {
                s.powersgd.q.assign(q.data_ptr<float>(), q.data_ptr<float>() + q.numel());
            }
            s.powersgd.fresh = false;
        }
        s.powersgd.spare = full.size(1) > s.rank ? full.narrow(1, s.rank, full.size(1) - s.rank).contiguous() : at::Tensor();
    } else {
        s.powersgd.spare = full;
    }
    return full.narrow(1, 0, r);
}

void GradientExchange::Impl::change_within_family(size_t i, const Spec& level) {
    Slot& s = slots[i];
    // Every column of Q kept aside, to be taken up again by the new level.
    at::Tensor q = current_q(s);
    if (q.defined()) s.powersgd.spare = s.powersgd.spare.defined() ? at::cat({q, s.powersgd.spare}, 1) : q;
    s.powersgd.q.clear();
    s.powersgd.device_q = at::Tensor();
    s.powersgd.fresh = true;
    // The family's codec (its momentum) back in place of a dense level's.
    if (s.compensator) {
        s.codec = std::move(s.compensator);
        s.device_codec = std::move(s.device_compensator);
    }
    std::unique_ptr<TensorCodec> previous = std::move(s.codec);
    std::unique_ptr<DeviceCodec> previous_device = std::move(s.device_codec);
    s.level = level;
    s.effective = effective_of(level);
    configure(s, false);
    auto host_state = previous ? previous->state() : decltype(previous->state()){};
    auto device_state = previous_device ? previous_device->state() : decltype(previous_device->state()){};
    bool taken = false;
    for (auto& entry : s.codec->state())
        for (auto& old : host_state)
            if (old.first == entry.first && old.second->size() == entry.second->size()) {
                *entry.second = *old.second;
                taken = true;
            }
    if (s.device_codec)
        for (auto& entry : s.device_codec->state())
            for (auto& old : device_state)
                if (old.first == entry.first && old.second->numel() == entry.second->numel()) {
                    *entry.second = *old.second;
                    taken = true;
                }
    // A level without such state that sends values whole (a dense step): the family's
    // codec stays, to correct what is sent (DGC's momentum) and to be taken up again.
    const bool stateful = !host_state.empty() || !device_state.empty();
    if (!taken && stateful && !s.codec->error_feedback() && s.codec->channel() == Channel::fp32_sum) {
        s.compensator = std::move(previous);
        s.device_compensator = std::move(previous_device);
    }
    if (s.codec->channel() == Channel::low_rank) q_columns(s, s.rank, s.cols);
}

void GradientExchange::Impl::orthogonalize_tensor(at::Tensor& m, int r) const {
    if (m.device().is_cpu()) {
        orthogonalize(m.data_ptr<float>(), m.size(0), r);
        return;
    }
    at::Tensor batch = m.unsqueeze(0);
    compress::device::orthogonalize(batch, gram_schmidt_at(r), options.compressors.powersgd.orthogonalization_epsilon);
}

// What the next step would compress for this slot (its gradient, memory and DGC's
// momentum), in a new tensor, the slot's state untouched.
at::Tensor GradientExchange::Impl::compensated_copy(Slot& s, const at::Tensor& grad) {
    const at::Device on = device_path ? device : at::Device(at::kCPU);
    at::Tensor g = grad.detach().to(on, at::kFloat).contiguous().view({-1});
    at::Tensor t;
    if (!s.memory_used)
        t = at::zeros({s.n}, at::TensorOptions().dtype(at::kFloat).device(on));
    else if (device_path)
        t = s.device_memory.detach().reshape({-1}).clone();
    else
        t = at::from_blob(s.memory.data(), {s.n}, at::kFloat).clone();
    const bool low_rank = s.codec->channel() == Channel::low_rank;
    const bool by_codec = s.compensator || (s.error_feedback && !low_rank);
    if (!by_codec) {
        t.add_(g);
        return t;
    }
    if (device_path) {
        DeviceCodec& codec = *s.state_device_codec();
        std::vector<at::Tensor> saved;
        for (auto& entry : codec.state()) saved.push_back(entry.second->defined() ? entry.second->clone() : at::Tensor());
        (void)codec.compensate(g, t, !s.memory_used);
        size_t k = 0;
        for (auto& entry : codec.state()) {
            const at::Tensor& before = saved[k++];
            if (before.defined() && entry.second->defined())
                entry.second->copy_(before);
            else
                *entry.second = before;
        }
        return t;
    }
    TensorCodec& codec = *s.state_codec();
    std::vector<std::vector<float>> saved;
    for (auto& entry : codec.state()) saved.push_back(*entry.second);
    (void)codec.compensate(g.data_ptr<float>(), t.data_ptr<float>(), !s.memory_used);
    size_t k = 0;
    for (auto& entry : codec.state()) *entry.second = std::move(saved[k++]);
    return t;
}

TensorCodec& GradientExchange::Impl::measure_codec(Slot& s, const Spec& level) {
    auto& codec = s.measure_codecs[level.text()];
    if (!codec) codec = make_codec(level, s.info.shape, codec_options);
    return *codec;
}

DeviceCodec& GradientExchange::Impl::measure_device_codec(Slot& s, const Spec& level) {
    auto& codec = s.measure_device_codecs[level.text()];
    if (!codec) codec = make_device_codec(level, s.info.shape, codec_options);
    return *codec;
}

// PowerSGD on this worker alone at rank r: P = M Q orthogonalized, Q' = M^T P, and the
// Gram matrices P^T P and Q'^T Q' (r x r, double), from which the squared norm of the
// approximation P Q'^T at any rank k <= r is the sum of their leading k x k blocks'
// product: orthogonalization treats columns in order, so a lower rank's P and Q' are
// the first columns of these.
LowRankGrams GradientExchange::Impl::low_rank_grams(Slot& s, const LowRank& low, int r, const at::Tensor& t) {
    at::Tensor q = q_columns(s, r, low.cols).to(t.device()).contiguous();
    if (options.compressors.powersgd.variant == PowerSgdVariant::pytorch_hook) orthogonalize_tensor(q, r);
    const at::Tensor m = t.view({low.rows, low.cols});
    at::Tensor p = m.mm(q).contiguous();
    orthogonalize_tensor(p, r);
    const at::Tensor qn = m.t().mm(p).to(at::kDouble);
    const at::Tensor pd = p.to(at::kDouble);
    return {r, pd.t().mm(pd), qn.t().mm(qn)};
}

// ||C(t)||^2 of one level on this worker: t's local approximation as the step at that
// level would make it. `grams`: PowerSGD's at a rank at least this level's.
double GradientExchange::Impl::level_squared_norm(size_t i, Slot& s, const Spec& level, const at::Tensor& t,
                                                  const LowRankGrams& grams) {
    TensorCodec& codec = measure_codec(s, level);
    if (codec.channel() == Channel::low_rank) {
        // ||P Q'^T||^2 = trace((P^T P)(Q'^T Q')), exact for any P.
        const std::int64_t k = codec.low_rank().rank;
        return (grams.pp.narrow(0, 0, k).narrow(1, 0, k) * grams.qq.narrow(0, 0, k).narrow(1, 0, k)).sum().item<double>();
    }
    if (codec.channel() == Channel::fp32_sum && codec.buffer_bytes() == 4 * s.n)
        return squared_distance(t);  // sent whole
    if (!codec.error_feedback()) {
        throw UsageError(s.info.name + ": level " + level.text() +
                         " keeps no error memory; the exchange measures levels with one, or sending whole");
    }
    at::Tensor residual = t.clone();
    const std::uint64_t key = key_of(i, codec);
    if (device_path) {
        DeviceCodec& d = measure_device_codec(s, level);
        const Channel c = codec.channel();
        at::Tensor payload = at::empty({codec.buffer_bytes() / channel_element_bytes(c)},
                                       at::TensorOptions().dtype(channel_dtype(c)).device(t.device()));
        (void)d.encode(residual, true, key, payload);
    } else {
        std::vector<std::uint8_t> payload(static_cast<size_t>(codec.buffer_bytes()));
        (void)codec.encode(residual.data_ptr<float>(), true, key, payload.data());
    }
    return squared_distance(t, residual);
}

std::vector<double> GradientExchange::squared_norms(const std::vector<at::Tensor>& grads,
                                                    const std::vector<size_t>& tensors,
                                                    const std::vector<std::vector<Spec>>& level_sets) {
    Impl& x = *impl_;
    if (x.in_flight) throw UsageError("gradient exchange: squared_norms() during a step");
    for (const auto& set : level_sets)
        if (set.size() != x.slots.size())
            throw UsageError("gradient exchange: " + std::to_string(set.size()) + " levels for " +
                             std::to_string(x.slots.size()) + " tensors");
    at::NoGradGuard no_grad;
    x.settle_checks();
    x.choose_path(grads);
    std::vector<double> sums(1 + level_sets.size(), 0.0);
    for (size_t i : tensors) {
        Slot& s = x.slots.at(i);
        if (s.n == 0) continue;
        const at::Tensor t = x.compensated_copy(s, grads[i]);
        sums[0] += squared_distance(t);
        // PowerSGD's levels from one approximation at the largest of their ranks.
        LowRank largest;
        for (const auto& set : level_sets) {
            const LowRank low = x.measure_codec(s, x.effective_of(set[i])).low_rank();
            if (low.rank > largest.rank) largest = low;
        }
        const LowRankGrams grams = largest.rank > 0 ? x.low_rank_grams(s, largest, largest.rank, t) : LowRankGrams{};
        for (size_t k = 0; k < level_sets.size(); ++k)
            sums[k + 1] += x.level_squared_norm(i, s, x.effective_of(level_sets[k][i]), t, grams);
    }
    return sums;
}

}  // namespace acc::exchange
