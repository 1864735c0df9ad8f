// PowerSGD's two rounds on the host, matrix by matrix, and its Q matrices: drawn as
// PyTorch's hook draws them (both paths), orthogonalized as the variant says.
#include "exchange/gradient_exchange_impl.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace acc::exchange {

// Gram-Schmidt at rank <= 2 (as the hook) and always in the Accordion reference; QR otherwise.
bool GradientExchange::Impl::gram_schmidt_at(int r) const { return r <= 2 || options.compressors.powersgd.variant == PowerSgdVariant::accordion; }

void GradientExchange::Impl::orthogonalize(float* m, std::int64_t n, int r) const {
    if (gram_schmidt_at(r)) {
        k::gram_schmidt(m, n, r, options.compressors.powersgd.orthogonalization_epsilon);
        return;
    }
    at::Tensor a = at::from_blob(m, {n, r}, at::kFloat);
    a.copy_(std::get<0>(at::linalg_qr(a)));
}

// Q for every compressed tensor: drawn (first step, new level, or no warm start) or
// the warm-started one, orthogonalized as the variant says.
void GradientExchange::Impl::prepare_qs() {
    const bool hook = options.compressors.powersgd.variant == PowerSgdVariant::pytorch_hook;
    bool any_fresh = false;
    for (size_t i : powersgd_order) any_fresh = any_fresh || slots[i].powersgd.fresh || !options.compressors.powersgd.warm_start;
    at::Generator generator;
    if (any_fresh) {
        // As the hook: one torch seed per randomization event, from RandomState(seed).
        auto seed = static_cast<std::uint64_t>(powersgd_rng->randint(1000000000));
        generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    }
    for (size_t i : powersgd_order) {
        Slot& s = slots[i];
        const bool draw = s.powersgd.fresh || !options.compressors.powersgd.warm_start;
        if (draw) {
            // Drawn on the host on both paths, so that both draw the same numbers.
            at::Tensor drawn = at::randn({s.cols, s.rank}, generator, at::TensorOptions().dtype(at::kFloat));
            s.powersgd.fresh = false;
            if (device_path) {
                // Into the slot's view of the warm-start Q (exchange_device.cpp). Through
                // pinned memory the copy is queued instead of making the host wait for
                // the GPU (a new Q every step without warm start).
                at::Tensor source = drawn;
                if (device.is_cuda()) {
                    source = at::empty_like(drawn, at::TensorOptions().pinned_memory(true));
                    source.copy_(drawn);
                }
                s.powersgd.device_q.copy_(source, /*non_blocking=*/device.is_cuda());
                continue;  // orthogonalized with the others
            }
            s.powersgd.q.assign(drawn.data_ptr<float>(), drawn.data_ptr<float>() + drawn.numel());
        }
        if (hook && !device_path) orthogonalize(s.powersgd.q.data(), s.cols, s.rank);
    }
}

// qt = transpose of the cols x r matrix src.
void GradientExchange::Impl::transpose_into(const float* src, std::int64_t cols, int r) {
    qt.resize(static_cast<size_t>(cols * r));
    for (std::int64_t j = 0; j < cols; ++j)
        for (int c = 0; c < r; ++c) qt[static_cast<size_t>(c * cols + j)] = src[j * r + c];
}

// P = M Q for every matrix, M the error memory plus the gradient (or the gradient).
void GradientExchange::Impl::powersgd_first_round() {
    prepare_qs();
    for (size_t i : powersgd_order) {
        Slot& s = slots[i];
        transpose_into(s.powersgd.q.data(), s.cols, s.rank);
        const float* add = s.error_feedback ? s.grad : nullptr;
        bool finite = k::project_rows(s.t, add, s.rows, s.cols, qt.data(), s.rank, p.data_ptr<float>() + s.p_offset);
        if (s.error_feedback) s.memory_used = true;
        if (options.check_finite && !(add ? finite : k::all_finite(s.t, s.n))) not_finite(s);
    }
}

// After P's allreduce: P orthogonalized, Q = M^T P into the Q buffer.
void GradientExchange::Impl::powersgd_second_round() {
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
}

// After Q's allreduce: the gradient becomes P Q^T (Q the mean), the memory loses it.
void GradientExchange::Impl::powersgd_decode(int W) {
    float* qm = q.data_ptr<float>();
    k::divide(qm, q.numel(), static_cast<float>(W), qm);
    for (size_t i : powersgd_order) {
        Slot& s = slots[i];
        const float* qs = qm + s.q_offset;
        transpose_into(qs, s.cols, s.rank);
        k::expand_low_rank(p.data_ptr<float>() + s.p_offset, qt.data(), s.rows, s.cols, s.rank, s.grad,
                           s.error_feedback ? s.memory.data() : nullptr);
        s.powersgd.q.assign(qs, qs + s.cols * s.rank);
        if (!options.compressors.powersgd.warm_start) s.powersgd.fresh = true;
        settle_memory(s);
    }
}

// A saved Q ("<tensor>/powersgd_q", cols x rank): the warm start of the next step.
// Within a family Q may hold more columns than the level's rank: they are kept.
void GradientExchange::Impl::load_powersgd_q(Slot& s, const std::string& name, const at::Tensor& tensor) {
    const bool family = options.level_change == LevelChange::within_family;
    const bool low_rank = s.codec->channel() == Channel::low_rank;
    if (!low_rank && !(family && s.info.is_matrix()))
        state_error(name, "is a PowerSGD Q, but level " + s.effective.text() + " compresses no matrix here");
    const std::int64_t cols = low_rank ? s.cols : compress::matrix_view(s.info.shape).cols;
    const std::int64_t rank = low_rank ? s.rank : 1;
    const std::int64_t most = std::min(cols, compress::matrix_view(s.info.shape).rows);
    if (tensor.dim() != 2 || tensor.size(0) != cols || tensor.size(1) < rank || tensor.size(1) > (family ? most : rank))
        state_error(name, "must be " + std::to_string(cols) + "x" +
                              (family ? std::to_string(rank) + " to " + std::to_string(cols) + "x" + std::to_string(most)
                                      : std::to_string(rank)) +
                              " for level " + s.effective.text());
    const std::int64_t width = tensor.size(1);
    at::Tensor c = checked_floats(name, tensor, cols * width).view({cols, width});
    if (!low_rank) {
        s.powersgd.spare = c.clone();
        return;
    }
    at::Tensor first = c.narrow(1, 0, s.rank).contiguous();
    if (width > s.rank) s.powersgd.spare = c.narrow(1, s.rank, width - s.rank).contiguous();
    if (device_path)
        s.powersgd.device_q = first.to(state_options()).clone();
    else
        s.powersgd.q = to_vector(first.view({-1}));
    s.powersgd.fresh = false;
}

}  // namespace acc::exchange
