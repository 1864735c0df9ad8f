// A step of the gradient exchange on the gradients' device: the device codecs (ATen
// operations), error memories, Q, DGC's momentum and the flat buffers all on that
// device, handed to the collectives there. NaN and infinity come back as flags on the
// device, read once per step, or on a GPU a step later (ExchangeOptions::check_timing),
// so that no step waits for the GPU. PowerSGD multiplies all matrices of one shape and rank
// in one batched product per round.
#include "base/clock.hpp"
#include "base/error.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <thread>

namespace acc::exchange {

void GradientExchange::Impl::bind_device(const std::vector<at::Tensor>& grads) {
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        const at::Tensor& g = grads[i];
        s.original = g;
        s.staged = g.is_contiguous() ? at::Tensor() : g.detach().contiguous();
        s.device_grad = (s.staged.defined() ? s.staged : g.detach()).view({-1});
        s.input_finite = at::Tensor();
        s.encode_finite = at::Tensor();
    }
}

at::Tensor& GradientExchange::Impl::device_memory_of(Slot& s) {
    if (!s.device_memory.defined()) s.device_memory = at::zeros({s.n}, at::TensorOptions().dtype(at::kFloat).device(device));
    return s.device_memory;
}

// The device form of compensate(): where the step's input lives, and whether it is finite.
void GradientExchange::Impl::compensate_device(size_t i, Slot& s) {
    DeviceCodec& codec = *s.device_codec;
    s.device_t = s.device_grad;
    s.t_in_memory = false;
    if (s.n == 0 || codec.channel() == Channel::low_rank) return;  // PowerSGD: in its group
    if (s.error_feedback) {
        s.device_t = device_memory_of(s);
        s.t_in_memory = true;
        const bool zero = !s.memory_used;
        s.memory_used = true;
        s.input_finite = codec.compensate(s.device_grad, s.device_t, zero);
    } else if (s.memory_used) {
        s.device_t = s.device_memory;
        s.t_in_memory = true;
        s.device_t.add_(s.device_grad);
        s.input_finite = compress::device::all_finite(s.device_t);
    } else if (!codec.checks_finite()) {
        s.input_finite = compress::device::all_finite(s.device_t);
    }
    if (!options.check_finite) s.input_finite = at::Tensor();
    at::Tensor payload = slice_of(s);
    at::Tensor ok = codec.encode(s.device_t, s.error_feedback, key_of(i, *s.codec), payload);
    if (options.check_finite || s.codec->encode_failure_fatal()) s.encode_finite = ok;
}

// The slot's payload in its channel's buffer, in the buffer's element type.
at::Tensor GradientExchange::Impl::slice_of(Slot& s) {
    const Channel c = s.codec->channel();
    at::Tensor& b = channel_buffer(c);
    if (!b.defined()) return at::empty({0}, at::TensorOptions().dtype(channel_dtype(c)).device(device));
    const std::int64_t size = channel_element_bytes(c);
    return b.narrow(0, s.offset / size, s.codec->buffer_bytes() / size);
}

void GradientExchange::Impl::settle_memory_device(Slot& s) {
    if (s.t_in_memory && !s.error_feedback) {
        s.device_memory.zero_();
        s.memory_used = false;
    }
}

void GradientExchange::Impl::start_device(const std::vector<at::Tensor>& grads) {
    at::NoGradGuard no_grad;
    settle_checks();  // the last step's flags: copied long ago, read without waiting
    step_checks.clear();
    bind_device(grads);
    if (layout_dirty) layout();
    current = StepStats();
    timer.begin_step(device, options.time_device_work);
    auto t0 = timer.start();
    for (size_t i = 0; i < slots.size(); ++i) compensate_device(i, slots[i]);
    if (!groups.empty()) powersgd_first_round_device();
    check_flags_device();
    timer.stop(t0, current.encode_seconds);
    for (Channel c : kSumChannels) sum_work[static_cast<size_t>(c)] = launch(channel_buffer(c));
    p_work = launch(p);
    in_flight = true;
}

// The step's flags, in the host path's order: read now (one read of all at once, and
// only when one is false the slot to name), or kept for defer_checks().
void GradientExchange::Impl::check_flags_device() {
    std::vector<DeviceCheck> checks;
    for (size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].input_finite.defined()) checks.push_back({i, DeviceCheck::Kind::input_finite, slots[i].input_finite});
        if (slots[i].encode_finite.defined())
            checks.push_back({i, DeviceCheck::Kind::encode_finite, slots[i].encode_finite});
    }
    for (auto& g : groups)
        if (g.finite.defined())
            for (size_t b = 0; b < g.slots.size(); ++b)
                checks.push_back({g.slots[b], DeviceCheck::Kind::input_finite, g.finite[static_cast<std::int64_t>(b)]});
    if (deferring_checks())
        step_checks.insert(step_checks.end(), checks.begin(), checks.end());
    else
        check_now(checks, step);
}

bool GradientExchange::Impl::deferring_checks() const {
    switch (options.check_timing) {
    case ExchangeOptions::CheckTiming::immediate: return false;
    case ExchangeOptions::CheckTiming::deferred: return true;
    case ExchangeOptions::CheckTiming::deferred_on_gpu: return device.is_cuda();
    }
    return false;
}

namespace {

// Whether every flag is true, as a 0-dim bool on their device (no read).
at::Tensor all_true(const std::vector<DeviceCheck>& checks) {
    std::vector<at::Tensor> flags;
    for (const DeviceCheck& c : checks) flags.push_back(c.flag.view({1}));
    return at::cat(flags).all();
}

}  // namespace

void GradientExchange::Impl::check_now(const std::vector<DeviceCheck>& checks, std::int64_t at_step) {
    if (checks.empty() || all_true(checks).item<bool>()) return;
    for (const DeviceCheck& c : checks) {
        if (c.flag.item<bool>()) continue;
        const Slot& s = slots[c.slot];
        switch (c.kind) {
        case DeviceCheck::Kind::input_finite: not_finite_at(s, at_step, "");
        case DeviceCheck::Kind::encode_finite: not_finite_at(s, at_step, s.codec->encode_failure_detail());
        case DeviceCheck::Kind::well_formed: malformed_at(s, at_step);
        }
    }
}

// The step's flags on their way to the host: their AND copied without waiting (into
// pinned memory), and on a GPU an event after the copy to tell when it has arrived.
void GradientExchange::Impl::defer_checks() {
    if (step_checks.empty()) return;
    PendingChecks p;
    p.step = step;
    p.checks = std::move(step_checks);
    step_checks.clear();
    p.all_ok = all_true(p.checks).to(at::TensorOptions().device(at::kCPU), /*non_blocking=*/true);
    if (device.is_cuda()) {
        p.copied = std::make_unique<c10::Event>(device.type());
        p.copied->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
    }
    pending.push_back(std::move(p));
}

// Reads the deferred flags, oldest step first; the first false one is reported as its
// step would have reported it.
void GradientExchange::Impl::settle_checks() {
    std::vector<PendingChecks> steps = std::move(pending);
    pending.clear();
    for (PendingChecks& p : steps) {
        if (p.copied)
            while (!p.copied->query()) std::this_thread::yield();
        if (!p.all_ok.item<bool>()) check_now(p.checks, p.step);
    }
}

void GradientExchange::Impl::finish_device() {
    at::NoGradGuard no_grad;
    const int W = world();
    if (channel_buffer(Channel::gather).defined()) decode_gather_device();
    if (p_work) {
        wait(p_work);
        auto t0 = timer.start();
        powersgd_second_round_device();
        timer.stop(t0, current.encode_seconds);
        q_work = launch(q);
    }
    decode_dense_device(W);
    if (q_work) {
        wait(q_work);
        auto t0 = timer.start();
        powersgd_decode_device(W);
        timer.stop(t0, current.decode_seconds);
    }
    for (auto& g : groups) g.m = at::Tensor();
    if (deferring_checks()) defer_checks();
    timer.finish_step();
}

void GradientExchange::Impl::decode_gather_device() {
    std::vector<at::Tensor> received = gather_payloads();
    auto t1 = timer.start();
    std::vector<at::Tensor> payloads(received.size());
    std::vector<DeviceCheck> checks;
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if (s.codec->channel() != Channel::gather) continue;
        for (size_t w = 0; w < received.size(); ++w) payloads[w] = received[w].narrow(0, s.offset, s.bytes);
        checks.push_back({i, DeviceCheck::Kind::well_formed, s.device_codec->decode(payloads, s.device_grad)});
        settle_memory_device(s);
    }
    if (deferring_checks())
        step_checks.insert(step_checks.end(), checks.begin(), checks.end());
    else
        check_now(checks, step);
    timer.stop(t1, current.decode_seconds);
}

void GradientExchange::Impl::decode_dense_device(int W) {
    for (Channel c : kSumChannels) wait(sum_work[static_cast<size_t>(c)]);
    auto t0 = timer.start();
    for (auto& s : slots) {
        const Channel c = s.codec->channel();
        if (c == Channel::low_rank || c == Channel::gather) continue;
        s.device_codec->decode_sum(slice_of(s), W, s.device_grad, s.error_feedback ? &s.device_memory : nullptr);
        settle_memory_device(s);
    }
    timer.stop(t0, current.decode_seconds);
}

// ------------------------------------------------------------ PowerSGD, batched

void GradientExchange::Impl::powersgd_first_round_device() {
    // Q drawn on the host as the host path draws them, orthogonalized a group at a time
    // below (the hook orthogonalizes drawn and warm-started Q alike).
    prepare_qs();
    const bool hook = options.powersgd_variant == PowerSgdVariant::pytorch_hook;
    for (auto& g : groups) {
        const auto B = static_cast<std::int64_t>(g.slots.size());
        // M: the memories (kept as one [B, rows, cols] tensor, so that M needs no copy)
        // plus the gradients; without error feedback the gradients stacked.
        const bool in_memory = options.error_feedback;
        if (in_memory) {
            if (!g.memory.defined()) {
                g.memory = at::zeros({B, g.rows, g.cols}, at::TensorOptions().dtype(at::kFloat).device(device));
                for (std::int64_t b = 0; b < B; ++b) {
                    Slot& s = slots[g.slots[static_cast<size_t>(b)]];
                    if (s.device_memory.defined()) g.memory[b].view({-1}).copy_(s.device_memory);
                    s.device_memory = g.memory[b].view({-1});
                }
            }
            for (size_t b = 0; b < g.slots.size(); ++b) {
                Slot& s = slots[g.slots[b]];
                s.device_memory.add_(s.device_grad);
                s.memory_used = true;
                s.t_in_memory = true;
            }
            g.m = g.memory;
        } else {
            std::vector<at::Tensor> inputs;
            for (size_t i : g.slots) {
                Slot& s = slots[i];
                if (s.memory_used) {
                    s.device_memory.add_(s.device_grad);
                    s.t_in_memory = true;
                    inputs.push_back(s.device_memory);
                } else {
                    inputs.push_back(s.device_grad);
                }
            }
            g.m = at::stack(inputs).view({B, g.rows, g.cols});
        }
        if (options.check_finite) g.finite = at::isfinite(g.m).view({B, -1}).all(1);
        std::vector<at::Tensor> qs;
        for (size_t i : g.slots) qs.push_back(slots[i].device_q);
        at::Tensor qg = at::stack(qs);
        if (hook) compress::device::orthogonalize(qg, gram_schmidt_at(g.rank), options.orthogonalization_epsilon);
        at::Tensor pg = p.narrow(0, g.p_offset, B * g.rows * g.rank).view({B, g.rows, g.rank});
        at::bmm_out(pg, g.m, qg);
    }
}

// After P's allreduce: each group's P orthogonalized, Q = M^T P into the Q buffer.
void GradientExchange::Impl::powersgd_second_round_device() {
    for (auto& g : groups) {
        const auto B = static_cast<std::int64_t>(g.slots.size());
        at::Tensor pg = p.narrow(0, g.p_offset, B * g.rows * g.rank).view({B, g.rows, g.rank});
        compress::device::orthogonalize(pg, gram_schmidt_at(g.rank), options.orthogonalization_epsilon);
        at::Tensor qg = q.narrow(0, g.q_offset, B * g.cols * g.rank).view({B, g.cols, g.rank});
        at::bmm_out(qg, g.m.transpose(1, 2), pg);
    }
}

// After Q's allreduce: each gradient becomes P Q^T (Q the mean), the memories lose it.
void GradientExchange::Impl::powersgd_decode_device(int W) {
    q.div_(at::scalar_tensor(static_cast<float>(W), q.options()));
    for (auto& g : groups) {
        const auto B = static_cast<std::int64_t>(g.slots.size());
        at::Tensor pg = p.narrow(0, g.p_offset, B * g.rows * g.rank).view({B, g.rows, g.rank});
        at::Tensor qg = q.narrow(0, g.q_offset, B * g.cols * g.rank).view({B, g.cols, g.rank});
        at::Tensor out = at::bmm(pg, qg.transpose(1, 2));
        if (options.error_feedback && g.memory.defined()) g.memory.sub_(out);
        for (std::int64_t b = 0; b < B; ++b) {
            Slot& s = slots[g.slots[static_cast<size_t>(b)]];
            s.device_grad.copy_(out[b].view({-1}));
            s.device_q = qg[b].clone();
            if (!options.warm_start) s.fresh_q = true;
            settle_memory_device(s);
        }
    }
}

}  // namespace acc::exchange
