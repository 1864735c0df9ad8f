// A step of the gradient exchange on host memory: the codecs' raw float loops over the
// gradients (or host copies of them), flat buffers in host memory.
#include "base/clock.hpp"
#include "base/error.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <algorithm>

namespace acc::exchange {

void GradientExchange::Impl::bind(const std::vector<at::Tensor>& grads) {
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        const at::Tensor& g = grads[i];
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

float* GradientExchange::Impl::memory_of(Slot& s) {
    if (s.memory.empty() && s.n > 0) s.memory.assign(static_cast<size_t>(s.n), 0.0f);
    return s.memory.data();
}

// Error feedback (or a leftover memory sent once): where the step's input t lives.
bool GradientExchange::Impl::compensate(Slot& s) {
    s.t = s.grad;
    s.t_in_memory = false;
    if (s.n == 0) return true;
    if (s.compensator) {
        // A dense step within DGC's family: the momentum-corrected memory, sent whole.
        s.t = memory_of(s);
        s.t_in_memory = true;
        const bool zero = !s.memory_used;
        s.memory_used = true;
        return s.compensator->compensate(s.grad, s.t, zero);
    }
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
void GradientExchange::Impl::settle_memory(Slot& s) {
    if (s.t_in_memory && !s.error_feedback) {
        std::fill(s.memory.begin(), s.memory.end(), 0.0f);
        s.memory_used = false;
    }
}

// Whether the fp32 sum channel can be allreduced where the gradients are: every tensor
// in it sent as it is (no error feedback, no memory to add), and the tensors, in the
// channel's order, back to back in one host buffer, as a DDP bucket's gradients are.
// That saves copying them into the channel's buffer and back.
bool GradientExchange::Impl::sums_in_place() const {
    const float* next = nullptr;
    const c10::StorageImpl* storage = nullptr;
    for (const Slot& s : slots) {
        if (s.codec->channel() != Channel::fp32_sum) continue;
        if (s.error_feedback || s.memory_used || s.compensator || s.staged.defined() || s.n == 0) return false;
        const c10::StorageImpl* own = s.original.storage().unsafeGetStorageImpl();
        if (storage && (s.grad != next || own != storage)) return false;
        storage = own;
        next = s.grad + s.n;
    }
    return storage != nullptr;
}

void GradientExchange::Impl::encode_slot(size_t i, Slot& s) {
    TensorCodec& codec = *s.codec;
    if (codec.channel() == Channel::low_rank) return;  // both rounds run over all matrices together
    if (codec.channel() == Channel::fp32_sum && sum_in_place.defined()) {
        if (options.check_finite && !k::all_finite(s.grad, s.n)) not_finite(s);
        return;
    }
    if (!s.t_in_memory && options.check_finite && !codec.checks_finite() && !k::all_finite(s.t, s.n))
        not_finite(s);
    at::Tensor& b = channel_buffer(codec.channel());
    std::uint8_t* payload = b.defined() ? static_cast<std::uint8_t*>(b.data_ptr()) + s.offset : nullptr;
    if (!codec.encode(s.t, s.error_feedback, key_of(i, codec), payload) &&
        (options.check_finite || codec.encode_failure_fatal()))
        not_finite(s, codec.encode_failure_detail());
}

void GradientExchange::Impl::start_host(const std::vector<at::Tensor>& grads) {
    bind(grads);
    if (layout_dirty) layout();
    current = StepStats();
    sum_in_place = at::Tensor();
    if (sums_in_place()) {
        std::int64_t n = 0;
        const Slot* first = nullptr;
        for (const Slot& s : slots)
            if (s.codec->channel() == Channel::fp32_sum) {
                if (!first) first = &s;
                n += s.n;
            }
        // A view of the first gradient's storage: the gradients (s.original) keep it alive.
        sum_in_place = first->original.detach().view({-1}).as_strided({n}, {1});
    }
    auto t0 = Clock::now();
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if (!compensate(s) && options.check_finite) not_finite(s);
        encode_slot(i, s);
    }
    if (!powersgd_order.empty()) powersgd_first_round();
    current.encode_seconds += seconds_since(t0);
    for (Channel c : kSumChannels)
        sum_work[static_cast<size_t>(c)] =
            launch(c == Channel::fp32_sum && sum_in_place.defined() ? sum_in_place : channel_buffer(c));
    p_work = launch(p);
    in_flight = true;
}

void GradientExchange::Impl::finish_host() {
    const int W = world();
    if (channel_buffer(Channel::gather).defined()) decode_gather_host();
    if (p_work) {
        wait(p_work);
        auto t0 = Clock::now();
        powersgd_second_round();
        current.encode_seconds += seconds_since(t0);
        q_work = launch(q);
    }
    decode_dense(W);
    if (q_work) {
        wait(q_work);
        auto t0 = Clock::now();
        powersgd_decode(W);
        current.decode_seconds += seconds_since(t0);
    }
}

void GradientExchange::Impl::decode_gather_host() {
    std::vector<at::Tensor> received = gather_payloads();
    for (auto& r : received)
        if (!r.device().is_cpu())
            throw Error("allgather returned a payload of " + std::to_string(r.numel()) + " bytes on " +
                        r.device().str() + ", expected host memory");
    std::vector<const std::uint8_t*> base;
    for (auto& r : received) base.push_back(r.data_ptr<std::uint8_t>());
    auto t1 = Clock::now();
    std::vector<const std::uint8_t*> payloads(base.size());
    for (auto& s : slots) {
        if (s.codec->channel() != Channel::gather) continue;
        for (size_t w = 0; w < base.size(); ++w) payloads[w] = base[w] + s.offset;
        if (!s.codec->decode(payloads, s.grad)) malformed(s);
        settle_memory(s);
    }
    current.decode_seconds += seconds_since(t1);
}

void GradientExchange::Impl::decode_dense(int W) {
    for (Channel c : kSumChannels) wait(sum_work[static_cast<size_t>(c)]);
    auto t0 = Clock::now();
    for (auto& s : slots) {
        const Channel c = s.codec->channel();
        if (c == Channel::low_rank || c == Channel::gather) continue;
        if (c == Channel::fp32_sum && sum_in_place.defined()) {
            k::divide(s.grad, s.n, static_cast<float>(W), s.grad);  // the sum is already there
            continue;
        }
        at::Tensor& b = channel_buffer(c);
        const std::uint8_t* sum = b.defined() ? static_cast<const std::uint8_t*>(b.data_ptr()) + s.offset : nullptr;
        s.codec->decode_sum(sum, W, s.grad, s.error_feedback ? s.memory.data() : nullptr);
        settle_memory(s);
    }
    sum_in_place = at::Tensor();
    current.decode_seconds += seconds_since(t0);
}

}  // namespace acc::exchange
