// A step of the gradient exchange on the gradients' device: the device codecs (ATen
// operations), error memories, Q, DGC's momentum and the flat buffers all on that
// device, handed to the collectives there. NaN and infinity come back as flags on the
// device, read once per step, or on a GPU a step later (ExchangeOptions::check_timing),
// so that no step waits for the GPU. Each ATen operation costs a GPU a launch, so work is
// batched: PowerSGD multiplies all matrices of one shape and rank in one product per
// round and orthogonalizes all shapes in one padded batch; small tensors sent as their
// values go as one run.
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/torch_compat.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <map>
#include <thread>

namespace acc::exchange {

void GradientExchange::Impl::bind_device(const std::vector<at::Tensor>& grads) {
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        const at::Tensor& g = grads[i];
        s.original = g;
        s.staged = g.is_contiguous() ? at::Tensor() : g.detach().contiguous();
        // Gradients seldom require grad themselves; detach() would be one more operation each.
        s.device_grad = (s.staged.defined() ? s.staged : g.requires_grad() ? g.detach() : g).view({-1});
        s.input_finite = at::Tensor();
        s.encode_finite = at::Tensor();
    }
}

at::Tensor& GradientExchange::Impl::device_memory_of(Slot& s) {
    if (!s.device_memory.defined()) s.device_memory = at::zeros({s.n}, at::TensorOptions().dtype(at::kFloat).device(device));
    return s.device_memory;
}

// ------------------------------------------------------------ runs of small dense tensors

namespace {

// Tensors up to this many values join a run: above it one tensor's kernels cost more
// than their launches, and a run's temporaries stay small.
constexpr std::int64_t kRunTensorValues = std::int64_t{1} << 16;
constexpr std::int64_t kRunValues = std::int64_t{1} << 28;

}  // namespace

// Maximal runs (two tensors or more) of small slots that send their values, in the fp32
// buffer back to back, with the same error feedback; a run's memory adopts the slots'.
void GradientExchange::Impl::layout_runs_device() {
    world_divisor = at::scalar_tensor(static_cast<float>(world()), at::TensorOptions().dtype(at::kFloat).device(device));
    std::vector<DenseRun> found;
    DenseRun r;
    auto close = [&] {
        if (r.slots.size() >= 2) found.push_back(std::move(r));
        r = DenseRun();
    };
    for (size_t i = 0; i < slots.size(); ++i) {
        const Slot& s = slots[i];
        const bool fits = s.codec->channel() == Channel::fp32_sum && s.device_codec->sends_values() && s.n > 0 &&
                          s.n <= kRunTensorValues && s.codec->buffer_bytes() == 4 * s.n &&
                          !s.codec->encode_failure_fatal() && !s.device_compensator;
        if (!fits) {
            if (s.codec->channel() == Channel::fp32_sum) close();  // the buffer's next values are not the run's
            continue;
        }
        if (!r.slots.empty() && (s.offset != 4 * (r.offset + r.n) || s.error_feedback != r.error_feedback ||
                                 r.n + s.n > kRunValues))
            close();
        if (r.slots.empty()) {
            r.offset = s.offset / 4;
            r.error_feedback = s.error_feedback;
        }
        r.slots.push_back(i);
        r.sizes.push_back(s.n);
        r.n += s.n;
    }
    close();
    const auto on = at::TensorOptions().device(device);
    for (size_t k = 0; k < found.size(); ++k) {
        DenseRun& run = found[k];
        std::vector<std::int64_t> ends;
        std::int64_t end = 0;
        for (auto n : run.sizes) ends.push_back(end += n);
        for (auto& e : ends) e -= 1;
        run.ends = at::tensor(ends, at::kLong).to(device);
        if (run.error_feedback) run.memory = at::zeros({run.n}, on.dtype(at::kFloat));
        std::int64_t at = 0;
        for (size_t j = 0; j < run.slots.size(); ++j) {
            Slot& s = slots[run.slots[j]];
            s.run = static_cast<int>(k);
            if (run.memory.defined()) adopt(s.device_memory, s.memory_used, run.memory.narrow(0, at, s.n));
            at += s.n;
        }
    }
    runs = std::move(found);
}

// A run's values into the fp32 buffer: the gradients, or (error feedback) the memories
// plus the gradients; one flag per slot.
void GradientExchange::Impl::encode_run(DenseRun& r) {
    std::vector<at::Tensor> grads;
    for (size_t i : r.slots) grads.push_back(slots[i].device_grad);
    at::Tensor values = channel_buffer(Channel::fp32_sum).narrow(0, r.offset, r.n);
    if (r.error_feedback) {
        std::vector<at::Tensor> memories;
        for (size_t i : r.slots) {
            Slot& s = slots[i];
            memories.push_back(s.device_memory);
            s.memory_used = true;
            s.t_in_memory = true;
        }
        at::_foreach_add_(memories, grads);
        values.copy_(r.memory);
    } else {
        at::cat_out(values, grads);
    }
    if (options.check_finite)
        step_batched_checks.push_back(
            {r.slots, DeviceCheck::Kind::input_finite, compress::device::finite_parts(values, r.ends)});
}

// The mean from the sum, into the gradients (and out of the memories).
void GradientExchange::Impl::decode_run(DenseRun& r) {
    at::Tensor values = channel_buffer(Channel::fp32_sum).narrow(0, r.offset, r.n);
    at::div_out(values, values, world_divisor);
    if (r.error_feedback) r.memory.sub_(values);
    std::vector<at::Tensor> grads;
    for (size_t i : r.slots) grads.push_back(slots[i].device_grad);
    comm::compat::copy_each(grads, values.split_with_sizes(r.sizes));
}

// ------------------------------------------------------------ a step

// The device form of compensate(): where the step's input lives, and whether it is finite.
void GradientExchange::Impl::compensate_device(size_t i, Slot& s) {
    DeviceCodec& codec = *s.device_codec;
    s.device_t = s.device_grad;
    s.t_in_memory = false;
    if (s.n == 0 || codec.channel() == Channel::low_rank) return;  // PowerSGD: in its group
    if (s.device_compensator) {
        // A dense step within DGC's family: the momentum-corrected memory, sent whole.
        s.device_t = device_memory_of(s);
        s.t_in_memory = true;
        const bool zero = !s.memory_used;
        s.memory_used = true;
        s.input_finite = s.device_compensator->compensate(s.device_grad, s.device_t, zero);
    } else if (s.error_feedback) {
        s.device_t = device_memory_of(s);
        s.t_in_memory = true;
        const bool zero = !s.memory_used;
        s.memory_used = true;
        s.input_finite = codec.compensate(s.device_grad, s.device_t, zero);
    } else if (s.memory_used) {
        s.device_t = s.device_memory;
        s.t_in_memory = true;
        s.device_t.add_(s.device_grad);
        if (!codec.finite_in_encode()) s.input_finite = compress::device::all_finite(s.device_t);
    } else if (!codec.checks_finite() && !codec.finite_in_encode()) {
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
    settle_checks(false);  // earlier steps' flags, where copied: no wait for the GPU's last step
    step_checks.clear();
    bind_device(grads);
    if (layout_dirty) layout();
    current = StepStats();
    timer.begin_step(device, options.time_device_work);
    auto t0 = timer.start();
    // A run without error feedback goes one by one while a slot's memory still holds values.
    for (auto& r : runs) {
        r.active = true;
        for (size_t i : r.slots) r.active = r.active && (r.error_feedback || !slots[i].memory_used);
    }
    step_batched_checks.clear();
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if ((s.run >= 0 && runs[static_cast<size_t>(s.run)].active) || s.topk_batch >= 0) continue;
        compensate_device(i, s);
    }
    for (auto& r : runs)
        if (r.active) encode_run(r);
    for (auto& b : topk_batches) encode_topk_batch(b);
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
        if (slots[i].input_finite.defined())
            checks.push_back({{i}, DeviceCheck::Kind::input_finite, slots[i].input_finite});
        if (slots[i].encode_finite.defined())
            checks.push_back({{i}, DeviceCheck::Kind::encode_finite, slots[i].encode_finite});
    }
    checks.insert(checks.end(), step_batched_checks.begin(), step_batched_checks.end());
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
    for (const DeviceCheck& c : checks) flags.push_back(c.flag.view({-1}));
    return at::cat(flags).all();
}

}  // namespace

void GradientExchange::Impl::check_now(const std::vector<DeviceCheck>& checks, std::int64_t at_step) {
    if (checks.empty() || all_true(checks).item<bool>()) return;
    for (const DeviceCheck& c : checks) {
        at::Tensor flags = c.flag.view({-1}).to(at::kCPU);
        for (size_t k = 0; k < c.slots.size(); ++k) {
            if (flags[static_cast<std::int64_t>(k)].item<bool>()) continue;
            const Slot& s = slots[c.slots[k]];
            switch (c.kind) {
            case DeviceCheck::Kind::input_finite: not_finite_at(s, at_step, "");
            case DeviceCheck::Kind::encode_finite: not_finite_at(s, at_step, s.codec->encode_failure_detail());
            case DeviceCheck::Kind::well_formed: malformed_at(s, at_step);
            }
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
// step would have reported it. Where the host runs a step ahead of the GPU, the last
// step's copy has not happened yet at the next step's start: it is read a step later.
void GradientExchange::Impl::settle_checks(bool all) {
    std::vector<PendingChecks> steps = std::move(pending);
    pending.clear();
    for (size_t i = 0; i < steps.size(); ++i) {
        PendingChecks& p = steps[i];
        const bool newest = i + 1 == steps.size();
        if (p.copied && !p.copied->query()) {
            if (!all && newest) {
                pending.push_back(std::move(p));
                return;
            }
            // The copy follows the step's collectives on the stream: where one never
            // completes (a peer lost or stuck, and NCCL's watchdog has not aborted it), the
            // wait ends after the run's timeout instead of holding a core forever.
            const double timeout = comm.timeout_seconds();
            if (!wait_until([&] { return p.copied->query(); }, timeout))
                throw Error("rank " + std::to_string(comm.rank()) + ": step " + std::to_string(p.step) +
                            ": the step's collectives have not completed on " + device.str() + " after " +
                            short_number(timeout) + " s" +
                            " (--timeout): a peer is lost or stuck, and the backend did not abort the collective");
        }
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
        powersgd_decode_device();
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
    // Every worker's buffer as one [W, bytes] tensor for the sparse batches.
    const at::Tensor rows = sparse_batches.empty() ? at::Tensor() : at::stack(received);
    for (size_t i = 0; i < slots.size(); ++i) {
        Slot& s = slots[i];
        if (s.codec->channel() != Channel::gather) continue;
        if (s.sparse_batch >= 0) {
            // The batch at its first slot, so that flags keep the slots' order where they can.
            const SparseDecodeBatch& b = sparse_batches[static_cast<size_t>(s.sparse_batch)];
            if (b.slots.front() == i) decode_sparse_batch(b, rows, checks);
            continue;
        }
        for (size_t w = 0; w < received.size(); ++w) payloads[w] = received[w].narrow(0, s.offset, s.bytes);
        checks.push_back({{i}, DeviceCheck::Kind::well_formed, s.device_codec->decode(payloads, s.device_grad)});
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
        if (s.run >= 0 && runs[static_cast<size_t>(s.run)].active) continue;
        s.device_codec->decode_sum(slice_of(s), W, s.device_grad, s.error_feedback ? &s.device_memory : nullptr);
        settle_memory_device(s);
    }
    for (auto& r : runs)
        if (r.active) decode_run(r);
    timer.stop(t0, current.decode_seconds);
}

// ------------------------------------------------------------ PowerSGD, batched

namespace {

// Orthogonalization batches of the groups' matrices in one flat buffer (P: `rows` rows
// each, Q: `cols`): per rank, the longest matrices first, each batch as long as its
// longest matrix; a batch takes the next group while its padding stays within the real
// values plus 1 Mi floats (one batch for every rank in common networks).
std::vector<PaddedBatch> padded_batches(const std::vector<PowerGroup>& groups, bool columns, const at::Device& device) {
    struct Part {
        std::int64_t length, offset, count;
    };
    std::map<int, std::vector<Part>> by_rank;
    std::int64_t total = 0;
    for (const PowerGroup& g : groups) {
        const auto count = static_cast<std::int64_t>(g.slots.size());
        const std::int64_t length = columns ? g.cols : g.rows;
        by_rank[g.rank].push_back({length, columns ? g.q_offset : g.p_offset, count});
        total += count * length * g.rank;
    }
    std::vector<PaddedBatch> batches;
    for (auto& [rank, parts] : by_rank) {
        std::stable_sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.length > b.length; });
        for (size_t first = 0; first < parts.size();) {
            const std::int64_t longest = parts[first].length;
            std::int64_t matrices = 0, values = 0;
            size_t end = first;
            for (; end < parts.size(); ++end) {
                const std::int64_t m = matrices + parts[end].count;
                const std::int64_t v = values + parts[end].count * parts[end].length * rank;
                if (end > first && m * longest * rank > 2 * v + (std::int64_t{1} << 20)) break;
                matrices = m;
                values = v;
            }
            std::vector<std::int64_t> to, from;
            std::int64_t matrix = 0;
            for (size_t k = first; k < end; ++k) {
                const Part& part = parts[k];
                for (std::int64_t b = 0; b < part.count; ++b, ++matrix)
                    for (std::int64_t e = 0; e < part.length * rank; ++e) {
                        from.push_back(part.offset + b * part.length * rank + e);
                        to.push_back(matrix * longest * rank + e);
                    }
            }
            PaddedBatch batch;
            batch.rank = rank;
            const auto on = at::TensorOptions().device(device);
            batch.padded = at::zeros({matrices, longest, rank}, on.dtype(at::kFloat));
            batch.to = at::tensor(to, at::kLong).to(device);
            // All of the buffer, in order: no gather needed on the way in or out.
            bool whole = static_cast<std::int64_t>(from.size()) == total;
            for (size_t e = 0; whole && e < from.size(); ++e) whole = from[e] == static_cast<std::int64_t>(e);
            if (!whole) batch.from = at::tensor(from, at::kLong).to(device);
            batches.push_back(std::move(batch));
            first = end;
        }
    }
    return batches;
}

}  // namespace

// The groups' views of P, Q and the warm-start Q, the error memories (each slot's a view
// of its group's, keeping what it held), and the orthogonalization batches.
void GradientExchange::Impl::layout_powersgd_device() {
    if (groups.empty()) return;
    const auto on = at::TensorOptions().dtype(at::kFloat).device(device);
    q_state = at::zeros({q.numel()}, on);
    powersgd_memory = at::Tensor();
    powersgd_memory_slots.clear();
    std::vector<std::int64_t> ends;
    std::int64_t memory_n = 0;
    for (auto& g : groups) memory_n += static_cast<std::int64_t>(g.slots.size()) * g.rows * g.cols;
    if (options.error_feedback) powersgd_memory = at::zeros({memory_n}, on);
    std::int64_t memory_at = 0;
    for (auto& g : groups) {
        const auto B = static_cast<std::int64_t>(g.slots.size());
        g.p_view = p.narrow(0, g.p_offset, B * g.rows * g.rank).view({B, g.rows, g.rank});
        g.q_view = q.narrow(0, g.q_offset, B * g.cols * g.rank).view({B, g.cols, g.rank});
        g.q_warm = q_state.narrow(0, g.q_offset, B * g.cols * g.rank).view({B, g.cols, g.rank});
        if (options.error_feedback) {
            g.memory = powersgd_memory.narrow(0, memory_at, B * g.rows * g.cols).view({B, g.rows, g.cols});
            for (size_t i : g.slots) {
                memory_at += g.rows * g.cols;
                ends.push_back(memory_at - 1);
                powersgd_memory_slots.push_back(i);
            }
        }
        for (std::int64_t b = 0; b < B; ++b) {
            Slot& s = slots[g.slots[static_cast<size_t>(b)]];
            at::Tensor q_of = g.q_warm[b];
            if (s.powersgd.device_q.defined()) q_of.copy_(s.powersgd.device_q.view({g.cols, g.rank}));
            s.powersgd.device_q = q_of;
            if (!g.memory.defined()) continue;
            adopt(s.device_memory, true, g.memory[b].view({-1}));
        }
    }
    if (!ends.empty()) powersgd_memory_ends = at::tensor(ends, at::kLong).to(device);
    p_batches = padded_batches(groups, false, device);
    q_batches = padded_batches(groups, true, device);
    layout_powersgd_kernels();
}

// The table of PowerSGD's CUDA kernels: every matrix in M's order (the memories), with
// its place in P and Q. Only with error feedback (M is then one buffer) and where every
// group's rank is one the kernels take and orthogonalizes by Gram-Schmidt.
void GradientExchange::Impl::layout_powersgd_kernels() {
    powersgd_kernels.reset();
    powersgd_memory_sizes.clear();
    if (!device.is_cuda() || !options.error_feedback || !compress::device::LowRankKernels::available()) return;
    compress::cuda::powersgd::Layout layout;
    for (const auto& g : groups) {
        if (g.rank > compress::device::LowRankKernels::max_rank || !gram_schmidt_at(g.rank)) return;
        for (std::int64_t b = 0; b < static_cast<std::int64_t>(g.slots.size()); ++b)
            layout.append(g.p_offset + b * g.rows * g.rank, g.q_offset + b * g.cols * g.rank, g.rows, g.cols, g.rank);
    }
    for (const auto& a : layout.matrices) powersgd_memory_sizes.push_back(a.rows * a.cols);
    powersgd_kernels = std::make_unique<compress::device::LowRankKernels>(std::move(layout), device);
}

// Orthogonalizes every matrix in the flat buffer (P or Q) through the padded batches.
void GradientExchange::Impl::orthogonalize_device(std::vector<PaddedBatch>& batches, at::Tensor& flat) {
    for (PaddedBatch& b : batches) {
        at::Tensor padded = b.padded.view({-1});
        padded.zero_();  // a NaN orthogonalized into the padding would stay there
        padded.index_copy_(0, b.to, b.from.defined() ? flat.index_select(0, b.from) : flat);
        compress::device::orthogonalize(b.padded, gram_schmidt_at(b.rank), options.compressors.powersgd.orthogonalization_epsilon);
        if (b.from.defined())
            flat.index_copy_(0, b.from, padded.index_select(0, b.to));
        else
            at::index_select_out(flat, padded, 0, b.to);
    }
}

void GradientExchange::Impl::powersgd_first_round_device() {
    // Q drawn on the host as the host path draws them, orthogonalized with the others
    // below (the hook orthogonalizes drawn and warm-started Q alike).
    prepare_qs();
    if (options.error_feedback) {
        // M: the memories (one [B, rows, cols] tensor per group) plus the gradients, all
        // added in one multi-tensor operation.
        std::vector<at::Tensor> memories, grads;
        for (auto& g : groups) {
            for (size_t i : g.slots) {
                Slot& s = slots[i];
                memories.push_back(s.device_memory);
                grads.push_back(s.device_grad);
                s.memory_used = true;
                s.t_in_memory = true;
            }
            g.m = g.memory;
        }
        at::_foreach_add_(memories, grads);
    } else {
        // Without error feedback the gradients stacked (plus what a memory still holds).
        for (auto& g : groups) {
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
            g.m = at::stack(inputs).view({static_cast<std::int64_t>(g.slots.size()), g.rows, g.cols});
        }
    }
    // Whether each input is finite: one pass over all memories, or one per group.
    if (options.check_finite && options.error_feedback)
        step_batched_checks.push_back({powersgd_memory_slots, DeviceCheck::Kind::input_finite,
                                       compress::device::finite_parts(powersgd_memory, powersgd_memory_ends)});
    else if (options.check_finite)
        for (auto& g : groups)
            step_batched_checks.push_back(
                {g.slots, DeviceCheck::Kind::input_finite, compress::device::finite_mask(g.m).flatten(1).all(1)});
    powersgd_kernels_now = powersgd_kernels && compress::device::cuda_unmeasured_kernels_for(device);
    if (powersgd_kernels_now) {
        if (options.compressors.powersgd.variant == PowerSgdVariant::pytorch_hook)
            powersgd_kernels->orthogonalize(q_state, true, options.compressors.powersgd.orthogonalization_epsilon);
        powersgd_kernels->project_rows(powersgd_memory, q_state, p);
        return;
    }
    if (options.compressors.powersgd.variant == PowerSgdVariant::pytorch_hook) orthogonalize_device(q_batches, q_state);
    for (auto& g : groups) at::bmm_out(g.p_view, g.m, g.q_warm);
}

// After P's allreduce: P orthogonalized, each group's Q = M^T P into the Q buffer.
void GradientExchange::Impl::powersgd_second_round_device() {
    if (powersgd_kernels_now) {
        powersgd_kernels->orthogonalize(p, false, options.compressors.powersgd.orthogonalization_epsilon);
        powersgd_kernels->project_columns(powersgd_memory, p, q);
        return;
    }
    orthogonalize_device(p_batches, p);
    for (auto& g : groups) at::bmm_out(g.q_view, g.m.transpose(1, 2), g.p_view);
}

// After Q's allreduce: each gradient becomes P Q^T (Q the mean), the memories lose it,
// and Q is the next step's warm start.
void GradientExchange::Impl::powersgd_decode_device() {
    at::div_out(q, q, world_divisor);  // exact, as the host divides
    std::vector<at::Tensor> grads, approximations;
    if (powersgd_kernels_now) {
        // P Q^T of every matrix into one buffer laid out as M, out of the memories in the
        // same pass, then into the gradients.
        at::Tensor approx = at::empty_like(powersgd_memory);
        powersgd_kernels->expand(p, q, &powersgd_memory, approx);
        approximations = approx.split_with_sizes(powersgd_memory_sizes);
        for (size_t i : powersgd_memory_slots) grads.push_back(slots[i].device_grad);
    } else {
        std::vector<at::Tensor> memories, outs;
        for (auto& g : groups) {
            at::Tensor out = at::bmm(g.p_view, g.q_view.transpose(1, 2));
            if (options.error_feedback) {
                memories.push_back(g.memory);
                outs.push_back(out);
            }
            std::vector<at::Tensor> parts = out.flatten(1).unbind(0);
            approximations.insert(approximations.end(), parts.begin(), parts.end());
            for (size_t i : g.slots) grads.push_back(slots[i].device_grad);
        }
        if (!memories.empty()) at::_foreach_sub_(memories, outs);
    }
    comm::compat::copy_each(grads, approximations);
    q_state.copy_(q);
    for (auto& g : groups)
        for (size_t i : g.slots) {
            Slot& s = slots[i];
            if (!options.compressors.powersgd.warm_start) s.powersgd.fresh = true;
            settle_memory_device(s);
        }
}

}  // namespace acc::exchange
