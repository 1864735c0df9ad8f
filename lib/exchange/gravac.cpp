#include "exchange/gravac.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/c10d_allreduce.hpp"
#include "compress/device_codec.hpp"
#include "compress/kernels.hpp"
#include "compress/spec.hpp"
#include "exchange/staging.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

namespace acc::exchange {
namespace {

using compress::kernels::kSharedStream;

double now_seconds() {
    return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
}

double squared_norm(const std::vector<float>& v) {
    double sum = 0;
    for (float x : v) sum += static_cast<double>(x) * static_cast<double>(x);
    return sum;
}

torch::Tensor host_floats(const std::vector<float>& v, const std::vector<std::int64_t>& shape) {
    return torch::from_blob(const_cast<float*>(v.data()), shape, torch::kFloat32).clone();
}

void load_floats(const torch::Tensor& t, std::vector<float>& out, const std::string& name, std::int64_t n) {
    if (t.numel() != n)
        throw Error("exchange state '" + name + "' has " + std::to_string(t.numel()) + " values, expected " +
                    std::to_string(n));
    torch::Tensor c = t.to(torch::kCPU, torch::kFloat32).contiguous();
    out.assign(c.data_ptr<float>(), c.data_ptr<float>() + n);
}

// The codec's state entry of this name, or nullptr.
std::vector<float>* codec_state(compress::TensorCodec* codec, const std::string& what) {
    if (codec)
        for (auto& [name, values] : codec->state())
            if (name == what) return values;
    return nullptr;
}

}  // namespace

struct GravacExchange::Level {
    std::unique_ptr<compress::TensorCodec> codec;
    std::unique_ptr<compress::DeviceCodec> device;
};

struct GravacExchange::Slot {
    size_t index = 0;  // tensor index
    std::int64_t n = 0;
    std::vector<std::int64_t> shape;
    std::vector<float> memory;  // error memory
    // The family's codec that compensates (error feedback) and keeps the state beyond the
    // memory (DGC's momentum); the levels' codecs only encode and decode.
    std::unique_ptr<compress::TensorCodec> feedback;
    std::unique_ptr<compress::DeviceCodec> d_feedback;
    std::vector<float> grad, go, rmin, rcand;
    std::vector<std::uint8_t> payload_min, payload_cand;
    std::map<std::string, Level> levels;  // codecs by spec text
    // powersgd, on the gradients' device: the matrix view, the error memory (rows x cols),
    // the warm-start Q (cols x the largest rank used) and this step's g_o Q (rows x rank).
    std::int64_t rows = 0, cols = 0;
    torch::Tensor error, q, p;
    // The sparsifiers' device path: memory (and d_feedback's state) where the gradients are (taken
    // from the host vectors when undefined), g_o, the residuals and the payloads.
    torch::Tensor d_memory, d_go, d_rmin, d_rcand, d_payload_min, d_payload_cand;
};

GravacExchange::GravacExchange(std::vector<compress::TensorInfo> tensors, comm::Collectives& comm, torch::Device device,
                               GravacExchangeOptions options)
    : tensors_(std::move(tensors)),
      staged_(device.is_cpu() ? nullptr : staged_collectives(comm, device)),
      comm_(staged_ ? *staged_ : comm),
      options_(std::move(options)) {
    const auto& families = regime::gravac_family_names();
    const auto index = static_cast<size_t>(options_.family);
    if (index >= families.size())
        throw UsageError("--gravac: no family number " + std::to_string(static_cast<int>(options_.family)) +
                         "; the families are " + join(families, ", "));
    family_ = compress::find_compressor(families[index]);
    controller_ = std::make_unique<regime::GravacController>(options_.settings);
    for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!tensors_[i].is_matrix()) {
            vectors_.push_back(i);
            continue;
        }
        Slot s;
        s.index = i;
        s.n = tensors_[i].numel();
        s.shape = tensors_[i].shape;
        if (powersgd()) {
            const compress::MatrixView m = compress::matrix_view(s.shape);
            s.rows = m.rows;
            s.cols = m.cols;
            s.error = torch::zeros({s.rows, s.cols}, torch::kFloat32);
        } else {
            s.memory.assign(static_cast<size_t>(s.n), 0.0f);
            s.feedback = compress::make_codec(feedback_spec(), s.shape, codec_options());
        }
        slots_.push_back(std::move(s));
    }
}

GravacExchange::~GravacExchange() = default;

std::vector<bool> GravacExchange::momentum_in_gradient() const {
    std::vector<bool> out(tensors_.size(), false);
    if (family_->momentum_in_gradient)
        for (const auto& s : slots_) out[s.index] = true;
    return out;
}

// The codec of one level: the family's at theta_min; the candidate is the registry's
// gravac_candidate, over C_min(g_o) (multi-level: topk, dgc) or over g_o (randomk).
GravacExchange::Level& GravacExchange::level(Slot& s, double factor, bool candidate) {
    compress::Spec spec;
    spec.name = candidate ? family_->gravac_candidate : family_->name;
    spec.parameter = regime::keep_fraction_for_factor(factor);
    Level& l = s.levels[spec.text() + (candidate ? "/candidate" : "")];
    if (!l.codec) l.codec = compress::make_codec(spec, s.shape, codec_options());
    return l;
}

compress::CodecOptions GravacExchange::codec_options() const {
    compress::CodecOptions o;
    o.world = comm_.world_size();
    o.dgc_momentum = options_.dgc_momentum;
    return o;
}

// The compensating codec's level does not matter: it never encodes.
compress::Spec GravacExchange::feedback_spec() const {
    return {family_->name, regime::keep_fraction_for_factor(controller_->theta_min())};
}

// The state beyond the memory, from the host codec into the device codec (made on first use).
void GravacExchange::feedback_to_device(Slot& s, const torch::Device& device) {
    if (!s.d_feedback) s.d_feedback = compress::make_device_codec(feedback_spec(), s.shape, codec_options());
    for (auto& [name, tensor] : s.d_feedback->state())
        if (std::vector<float>* values = codec_state(s.feedback.get(), name))
            *tensor = host_floats(*values, {s.n}).to(device);
}

// The device path's memory and momentum back into the host vectors (the host path, or a
// state being loaded, takes over); the device path copies them out again.
void GravacExchange::sync_to_host(Slot& s) {
    if (!s.d_memory.defined()) return;
    load_floats(s.d_memory, s.memory, "error", s.n);
    if (s.d_feedback)
        for (auto& [name, tensor] : s.d_feedback->state())
            if (std::vector<float>* values = codec_state(s.feedback.get(), name)) load_floats(*tensor, *values, name, s.n);
    s.d_memory = torch::Tensor();
}

std::uint64_t GravacExchange::level_key(const Slot& s, bool shared, bool candidate, std::int64_t step) const {
    const std::uint64_t stream = shared ? kSharedStream : static_cast<std::uint64_t>(comm_.rank());
    return compress::kernels::stream_key(options_.seed, static_cast<std::uint64_t>(step), 2 * s.index + (candidate ? 1 : 0),
                                         stream);
}

compress::DeviceCodec& GravacExchange::device_level(Slot& s, double factor, bool candidate) {
    Level& l = level(s, factor, candidate);
    if (!l.device) l.device = compress::make_device_codec(l.codec->spec(), s.shape, codec_options());
    return *l.device;
}

// residual (in: what to compress; out: what the level leaves out), payload (out).
void GravacExchange::encode_level(Slot& s, double factor, bool candidate, std::int64_t step,
                                  std::vector<float>& residual, std::vector<std::uint8_t>& payload) {
    compress::TensorCodec& codec = *level(s, factor, candidate).codec;
    payload.assign(static_cast<size_t>(codec.buffer_bytes()), 0);
    const std::uint64_t stream = codec.shared_stream() ? kSharedStream : static_cast<std::uint64_t>(comm_.rank());
    const std::uint64_t key = compress::kernels::stream_key(options_.seed, static_cast<std::uint64_t>(step),
                                                            2 * s.index + (candidate ? 1 : 0), stream);
    codec.encode(residual.data(), true, key, payload.data());
}

// Sends every slot's payload of one level and writes the mean into s.grad.
void GravacExchange::exchange_level(double factor, bool candidate, std::int64_t step,
                                    std::vector<std::vector<std::uint8_t>>& payloads) {
    (void)step;
    const int world = comm_.world_size();
    if (slots_.empty()) return;
    const bool gather = level(slots_.front(), factor, candidate).codec->channel() == compress::Channel::gather;
    std::int64_t total = 0;
    for (auto& p : payloads) total += static_cast<std::int64_t>(p.size());
    if (gather) {
        torch::Tensor buffer = torch::empty({total}, torch::kUInt8);
        std::int64_t at = 0;
        for (auto& p : payloads) {
            std::copy(p.begin(), p.end(), buffer.data_ptr<std::uint8_t>() + at);
            at += static_cast<std::int64_t>(p.size());
        }
        const double t0 = now_seconds();
        std::vector<at::Tensor> received = comm_.allgather(buffer);
        totals_.communication_seconds += now_seconds() - t0;
        totals_.bytes += total;
        const double t1 = now_seconds();
        at = 0;
        for (size_t j = 0; j < slots_.size(); ++j) {
            Slot& s = slots_[j];
            std::vector<const std::uint8_t*> from;
            for (auto& r : received) {
                if (r.numel() != total) throw Error("allgather returned a payload of the wrong size");
                from.push_back(r.data_ptr<std::uint8_t>() + at);
            }
            if (!level(s, factor, candidate).codec->decode(from, s.grad.data()))
                throw Error("a rank sent a malformed payload for '" + tensors_[s.index].name + "'");
            at += static_cast<std::int64_t>(payloads[j].size());
        }
        totals_.decode_seconds += now_seconds() - t1;
        return;
    }
    // randomk: the values at the indices every rank shares, summed.
    torch::Tensor buffer = torch::empty({total / 4}, torch::kFloat32);
    auto* bytes = reinterpret_cast<std::uint8_t*>(buffer.data_ptr<float>());
    std::int64_t at = 0;
    for (auto& p : payloads) {
        std::copy(p.begin(), p.end(), bytes + at);
        at += static_cast<std::int64_t>(p.size());
    }
    const double t0 = now_seconds();
    comm_.allreduce(buffer, comm::ReduceOp::sum);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += total;
    const double t1 = now_seconds();
    bytes = reinterpret_cast<std::uint8_t*>(buffer.data_ptr<float>());
    at = 0;
    for (size_t j = 0; j < slots_.size(); ++j) {
        Slot& s = slots_[j];
        level(s, factor, candidate).codec->decode_sum(bytes + at, world, s.grad.data(), nullptr);
        at += static_cast<std::int64_t>(payloads[j].size());
    }
    totals_.decode_seconds += now_seconds() - t1;
}

// Error feedback, C_min and the candidate of every matrix; returns this rank's three squared norms.
std::vector<double> GravacExchange::encode_sparse(std::vector<torch::Tensor>& gradients, std::int64_t step,
                                                  double theta_min, double candidate) {
    const bool of_go = !family_->gravac_candidate_of_min;
    std::vector<double> norms(3, 0.0);
    for (auto& s : slots_) {
        sync_to_host(s);
        torch::Tensor g = gradients[s.index].detach().to(torch::kCPU, torch::kFloat32).contiguous();
        // Its non-finite check is left out, as on the other paths: the decision sees the norms.
        (void)s.feedback->compensate(g.data_ptr<float>(), s.memory.data(), false);
        s.go = s.memory;
        s.rmin = s.go;
        encode_level(s, theta_min, false, step, s.rmin, s.payload_min);
        // rcand: first C_min = go - rmin (multi-level) or go (randomk), then its residual.
        s.rcand.resize(static_cast<size_t>(s.n));
        for (std::int64_t i = 0; i < s.n; ++i) s.rcand[i] = of_go ? s.go[i] : s.go[i] - s.rmin[i];
        std::vector<float> cmin_residual = s.rcand;
        encode_level(s, candidate, true, step, cmin_residual, s.payload_cand);
        double min_sq = 0, cand_sq = 0;
        for (std::int64_t i = 0; i < s.n; ++i) {
            const double cm = static_cast<double>(s.go[i]) - s.rmin[i];
            const double cc = static_cast<double>(s.rcand[i]) - cmin_residual[i];
            min_sq += cm * cm;
            cand_sq += cc * cc;
            // What the candidate leaves out of g_o.
            s.rcand[i] = of_go ? cmin_residual[i] : s.rmin[i] + cmin_residual[i];
        }
        norms[0] += squared_norm(s.go);
        norms[1] += min_sq;
        norms[2] += cand_sq;
    }

    return norms;
}

// One allreduce sums `norms` (this rank's three squared norms) and `samples` over
// the ranks: every rank decides from the same sums.
regime::GravacNorms GravacExchange::decide_from(std::vector<double> norms, double& samples,
                                                regime::GravacDecision& decision) {
    norms.push_back(samples);
    torch::Tensor sums = torch::tensor(norms, torch::kFloat64);
    const double t0 = now_seconds();
    comm_.allreduce(sums, comm::ReduceOp::sum);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += static_cast<std::int64_t>(sums.nbytes());
    const regime::GravacNorms all{sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
    samples = sums[3].item<double>();
    decision = controller_->decide(all);
    return all;
}

// The chosen level, vectors whole; the memory keeps what the level leaves out.
void GravacExchange::send_sparse(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision,
                                 std::int64_t step, double theta_min, double candidate) {
    const int world = comm_.world_size();
    std::vector<float> dense;
    const bool send_dense = decision.choice == regime::GravacChoice::dense;
    if (send_dense) {
        for (auto& s : slots_) dense.insert(dense.end(), s.go.begin(), s.go.end());
        for (auto& s : slots_) std::fill(s.memory.begin(), s.memory.end(), 0.0f);
    } else {
        const bool cand = decision.choice == regime::GravacChoice::candidate;
        std::vector<std::vector<std::uint8_t>> payloads;
        for (auto& s : slots_) {
            payloads.push_back(cand ? s.payload_cand : s.payload_min);
            s.grad.assign(static_cast<size_t>(s.n), 0.0f);
            const std::vector<float>& left = cand ? s.rcand : s.rmin;
            s.feedback->mark_sent(s.go.data(), left.data());
            s.memory = left;
        }
        exchange_level(cand ? candidate : theta_min, cand, step, payloads);
    }
    // Vectors (and, when dense, the matrices too): one summed allreduce.
    for (size_t i : vectors_) {
        torch::Tensor g = gradients[i].detach().to(torch::kCPU, torch::kFloat32).contiguous();
        dense.insert(dense.end(), g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
    if (!dense.empty()) {
        torch::Tensor buffer = torch::from_blob(dense.data(), {static_cast<std::int64_t>(dense.size())}, torch::kFloat32);
        const double t0 = now_seconds();
        comm_.allreduce(buffer, comm::ReduceOp::sum);
        totals_.communication_seconds += now_seconds() - t0;
        totals_.bytes += static_cast<std::int64_t>(buffer.nbytes());
        for (float& x : dense) x /= static_cast<float>(world);
    }
    std::int64_t at = 0;
    for (auto& s : slots_) {
        if (send_dense) {
            s.grad.assign(dense.begin() + at, dense.begin() + at + s.n);
            at += s.n;
        }
        torch::Tensor& out = gradients[s.index];
        out.copy_(host_floats(s.grad, s.shape).to(out.device()));
    }
    for (size_t i : vectors_) {
        torch::Tensor& out = gradients[i];
        const std::int64_t n = out.numel();
        std::vector<float> part(dense.begin() + at, dense.begin() + at + n);
        out.copy_(host_floats(part, out.sizes().vec()).to(out.device()));
        at += n;
    }
}

// ---------------------------------------------------------------- the sparsifiers on the device

// encode_sparse() in ATen ops where the gradients are, with the device codecs (same payloads).
std::vector<double> GravacExchange::encode_sparse_device(std::vector<torch::Tensor>& gradients, std::int64_t step,
                                                         double theta_min, double candidate) {
    const bool of_go = !family_->gravac_candidate_of_min;
    std::vector<torch::Tensor> go_sq, min_sq, cand_sq;
    for (auto& s : slots_) {
        const torch::Tensor g = gradients[s.index].detach().to(torch::kFloat32).reshape({-1});
        if (!s.d_memory.defined() || s.d_memory.device() != g.device()) {
            s.d_memory = host_floats(s.memory, {s.n}).to(g.device());
            feedback_to_device(s, g.device());
        }
        (void)s.d_feedback->compensate(g, s.d_memory, false);
        s.d_go = s.d_memory.clone();
        s.d_rmin = s.d_go.clone();
        auto payload = [&](compress::DeviceCodec& c) {
            const bool gather = c.channel() == compress::Channel::gather;
            return torch::empty({gather ? c.host().buffer_bytes() : c.host().buffer_bytes() / 4},
                                torch::TensorOptions().dtype(gather ? torch::kUInt8 : torch::kFloat32).device(g.device()));
        };
        compress::DeviceCodec& cmin = device_level(s, theta_min, false);
        s.d_payload_min = payload(cmin);
        cmin.encode(s.d_rmin, true, level_key(s, cmin.shared_stream(), false, step), s.d_payload_min);
        // d_rcand: first C_min = go - rmin (multi-level) or go (randomk), then its residual.
        s.d_rcand = of_go ? s.d_go.clone() : s.d_go - s.d_rmin;
        torch::Tensor cmin_residual = s.d_rcand.clone();
        compress::DeviceCodec& ccand = device_level(s, candidate, true);
        s.d_payload_cand = payload(ccand);
        ccand.encode(cmin_residual, true, level_key(s, ccand.shared_stream(), true, step), s.d_payload_cand);
        const torch::Tensor go = s.d_go.to(torch::kFloat64);
        go_sq.push_back(go.square().sum());
        min_sq.push_back((go - s.d_rmin.to(torch::kFloat64)).square().sum());
        cand_sq.push_back((s.d_rcand.to(torch::kFloat64) - cmin_residual.to(torch::kFloat64)).square().sum());
        // What the candidate leaves out of g_o.
        s.d_rcand = of_go ? cmin_residual : s.d_rmin + cmin_residual;
    }
    if (slots_.empty()) return {0.0, 0.0, 0.0};
    torch::Tensor sums = torch::stack({torch::stack(go_sq).sum(), torch::stack(min_sq).sum(), torch::stack(cand_sq).sum()})
                             .to(torch::kCPU);
    return {sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
}

// send_sparse() where the gradients are.
void GravacExchange::send_sparse_device(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision,
                                        double theta_min, double candidate) {
    const int world = comm_.world_size();
    std::vector<torch::Tensor> whole;
    const bool send_dense = decision.choice == regime::GravacChoice::dense;
    const bool cand = decision.choice == regime::GravacChoice::candidate;
    const double factor = cand ? candidate : theta_min;
    if (send_dense) {
        for (auto& s : slots_) {
            whole.push_back(s.d_go);
            s.d_memory.zero_();
        }
    } else if (!slots_.empty()) {
        std::vector<torch::Tensor> payloads;
        for (auto& s : slots_) {
            payloads.push_back(cand ? s.d_payload_cand : s.d_payload_min);
            const torch::Tensor& left = cand ? s.d_rcand : s.d_rmin;
            s.d_feedback->mark_sent(s.d_go, left);
            s.d_memory = left.clone();
        }
        torch::Tensor buffer = torch::cat(payloads);
        const bool gather = device_level(slots_.front(), factor, cand).channel() == compress::Channel::gather;
        double t0 = now_seconds();
        std::vector<at::Tensor> received;
        if (gather)
            received = comm_.allgather(buffer);
        else
            comm_.allreduce(buffer, comm::ReduceOp::sum);
        totals_.communication_seconds += now_seconds() - t0;
        totals_.bytes += static_cast<std::int64_t>(buffer.nbytes());
        t0 = now_seconds();
        std::int64_t at = 0;
        std::vector<torch::Tensor> well_formed;
        for (size_t j = 0; j < slots_.size(); ++j) {
            Slot& s = slots_[j];
            compress::DeviceCodec& codec = device_level(s, factor, cand);
            const std::int64_t n = payloads[j].numel();
            torch::Tensor out = torch::zeros({s.n}, torch::TensorOptions().dtype(torch::kFloat32).device(buffer.device()));
            if (gather) {
                std::vector<at::Tensor> from;
                for (auto& r : received) from.push_back(r.narrow(0, at, n));
                well_formed.push_back(codec.decode(from, out).view({1}));
            } else {
                codec.decode_sum(buffer.narrow(0, at, n), world, out, nullptr);
            }
            at += n;
            gradients[s.index].copy_(out.view(gradients[s.index].sizes()));
        }
        if (!well_formed.empty() && !torch::cat(well_formed).all().item<bool>())
            throw Error("a rank sent a malformed GraVAC payload");
        totals_.decode_seconds += now_seconds() - t0;
    }
    // Vectors (and, when dense, the matrices too): one summed allreduce.
    std::vector<torch::Tensor> into;
    if (send_dense)
        for (auto& s : slots_) into.push_back(gradients[s.index]);
    for (size_t i : vectors_) {
        whole.push_back(gradients[i].detach().to(torch::kFloat32).reshape({-1}));
        into.push_back(gradients[i]);
    }
    average_into(std::move(whole), into);
}

// ---------------------------------------------------------------- powersgd

namespace {

// PowerSGD's Gram-Schmidt on the columns of one matrix, in place. Column i depends on
// columns 0..i only, which makes the candidate's P the first columns of theta_min's.
void gram_schmidt(torch::Tensor& m) {
    torch::Tensor batch = m.unsqueeze(0);
    compress::device::orthogonalize(batch, true, 0.0f);
}

// ||P[:, :k] Q[:, :k]^T||^2 from the Gram matrices P^T P and Q^T Q (exact for any P):
// trace((P^T P)(Q^T Q)) over the first k columns.
torch::Tensor low_rank_squared_norm(const torch::Tensor& pp, const torch::Tensor& qq, std::int64_t k) {
    return (pp.narrow(0, 0, k).narrow(1, 0, k) * qq.narrow(0, 0, k).narrow(1, 0, k)).sum();
}

torch::Tensor gram(const torch::Tensor& m) {
    torch::Tensor d = m.to(torch::kFloat64);
    return d.t().mm(d);
}

}  // namespace

std::int64_t GravacExchange::powersgd_rank(const Slot& s, double factor) const {
    const std::int64_t r = std::min({regime::powersgd_rank_for_factor(s.rows, s.cols, factor), s.rows, s.cols});
    return compress::powersgd_compresses(s.shape, r) ? r : 0;
}

std::vector<std::int64_t> GravacExchange::powersgd_ranks(double factor) const {
    std::vector<std::int64_t> out;
    for (const auto& s : slots_) out.push_back(powersgd() ? powersgd_rank(s, factor) : 0);
    return out;
}

// g_o = g + error, and the squared norms of g_o, C_min(g_o) and C_cand(g_o) (this rank's):
// a level that sends a matrix whole keeps all of it. Keeps g_o Q in s.p for the exchange.
std::vector<double> GravacExchange::encode_powersgd(std::vector<torch::Tensor>& gradients, double theta_min,
                                                    double candidate) {
    std::vector<torch::Tensor> go_sq, min_sq, cand_sq;
    for (auto& s : slots_) {
        const torch::Tensor g = gradients[s.index].detach().to(torch::kFloat32).reshape({s.rows, s.cols});
        if (s.error.device() != g.device()) s.error = s.error.to(g.device());
        s.error.add_(g);
        const torch::Tensor whole = s.error.to(torch::kFloat64).square().sum();
        const std::int64_t r_min = powersgd_rank(s, theta_min), r_cand = powersgd_rank(s, candidate);
        const std::int64_t r = std::max(r_min, r_cand);
        go_sq.push_back(whole);
        if (r == 0) {
            min_sq.push_back(whole);
            cand_sq.push_back(whole);
            continue;
        }
        // Warm start: Q holds the columns of the largest rank used; missing ones are drawn
        // from a stream every rank shares (the same Q everywhere, as PowerSGD needs).
        const std::int64_t have = s.q.defined() ? s.q.size(1) : 0;
        if (have < r) {
            auto generator = at::make_generator<at::CPUGeneratorImpl>(
                compress::kernels::stream_key(options_.seed, static_cast<std::uint64_t>(have), s.index, kSharedStream));
            torch::Tensor drawn = at::randn({s.cols, r}, generator, at::TensorOptions().dtype(at::kFloat));
            gram_schmidt(drawn);
            if (have > 0) drawn.narrow(1, 0, have).copy_(s.q.to(torch::kCPU));
            s.q = drawn;
        }
        if (s.q.device() != g.device()) s.q = s.q.to(g.device());
        s.p = s.error.mm(s.q.narrow(1, 0, r));
        torch::Tensor p = s.p.clone();
        gram_schmidt(p);
        const torch::Tensor pp = gram(p), qq = gram(s.error.t().mm(p));
        min_sq.push_back(r_min > 0 ? low_rank_squared_norm(pp, qq, r_min) : whole);
        cand_sq.push_back(r_cand > 0 ? low_rank_squared_norm(pp, qq, r_cand) : whole);
    }
    if (slots_.empty()) return {0.0, 0.0, 0.0};
    torch::Tensor sums = torch::stack({torch::stack(go_sq).sum(), torch::stack(min_sq).sum(), torch::stack(cand_sq).sum()})
                             .to(torch::kCPU);
    return {sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
}

// `sent` (flat float32 parts) averaged over the ranks, copied into `into` in the same
// order, each taking as many values as its part.
void GravacExchange::average_into(std::vector<torch::Tensor> sent, const std::vector<torch::Tensor>& into) {
    if (sent.empty()) return;
    const torch::Tensor mean = allreduce_mean(std::move(sent));
    std::int64_t at = 0;
    for (const auto& out : into) {
        out.copy_(mean.narrow(0, at, out.numel()).view(out.sizes()));
        at += out.numel();
    }
}

// The concatenation of `parts`, summed over ranks and divided by the world size.
torch::Tensor GravacExchange::allreduce_mean(std::vector<torch::Tensor> parts) {
    torch::Tensor buffer = torch::cat(parts);
    const double t0 = now_seconds();
    comm_.allreduce(buffer, comm::ReduceOp::sum);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += static_cast<std::int64_t>(buffer.nbytes());
    comm::divide_by_world(buffer, comm_.world_size());
    return buffer;
}

// PowerSGD's exchange at the chosen level's rank of each matrix; matrices sent whole
// (dense steps, or PowerSGD would not compress them) go with the vectors, residual 0.
void GravacExchange::send_powersgd(std::vector<torch::Tensor>& gradients, const regime::GravacDecision& decision) {
    const bool send_dense = decision.choice == regime::GravacChoice::dense;
    std::vector<std::int64_t> rank(slots_.size(), 0);
    std::vector<torch::Tensor> ps;
    for (size_t j = 0; j < slots_.size(); ++j) {
        rank[j] = send_dense ? 0 : powersgd_rank(slots_[j], decision.factor);
        if (rank[j] > 0) ps.push_back(slots_[j].p.narrow(1, 0, rank[j]).reshape({-1}));
    }
    if (!ps.empty()) {
        // P summed (not averaged: it is orthogonalized next), then Q = g_o^T P averaged.
        torch::Tensor p = torch::cat(ps);
        double t0 = now_seconds();
        comm_.allreduce(p, comm::ReduceOp::sum);
        totals_.communication_seconds += now_seconds() - t0;
        totals_.bytes += static_cast<std::int64_t>(p.nbytes());
        t0 = now_seconds();
        std::vector<torch::Tensor> pm, qs;
        std::int64_t at = 0;
        for (size_t j = 0; j < slots_.size(); ++j) {
            if (rank[j] == 0) continue;
            Slot& s = slots_[j];
            torch::Tensor m = p.narrow(0, at, s.rows * rank[j]).view({s.rows, rank[j]});
            at += s.rows * rank[j];
            gram_schmidt(m);
            pm.push_back(m);
            qs.push_back(s.error.t().mm(m).reshape({-1}));
        }
        totals_.encode_seconds += now_seconds() - t0;
        torch::Tensor q = allreduce_mean(qs);
        t0 = now_seconds();
        at = 0;
        size_t k = 0;
        for (size_t j = 0; j < slots_.size(); ++j) {
            if (rank[j] == 0) continue;
            Slot& s = slots_[j];
            torch::Tensor qm = q.narrow(0, at, s.cols * rank[j]).view({s.cols, rank[j]});
            at += s.cols * rank[j];
            const torch::Tensor out = pm[k++].mm(qm.t());
            s.error.sub_(out);
            s.q.narrow(1, 0, rank[j]).copy_(qm);
            gradients[s.index].copy_(out.view(gradients[s.index].sizes()));
        }
        totals_.decode_seconds += now_seconds() - t0;
    }
    std::vector<torch::Tensor> whole, into;
    for (size_t j = 0; j < slots_.size(); ++j)
        if (rank[j] == 0) {
            whole.push_back(slots_[j].error.reshape({-1}));
            into.push_back(gradients[slots_[j].index]);
        }
    for (size_t i : vectors_) {
        whole.push_back(gradients[i].detach().to(torch::kFloat32).reshape({-1}));
        into.push_back(gradients[i]);
    }
    average_into(std::move(whole), into);  // copies the errors first: they may be cleared
    for (size_t j = 0; j < slots_.size(); ++j)
        if (rank[j] == 0) slots_[j].error.zero_();
}

SteadyClock::time_point GravacExchange::clock_now() const {
    return options_.clock ? options_.clock() : SteadyClock::now();
}

void GravacExchange::exchange(std::vector<torch::Tensor>& gradients, const GravacStepInfo& info) {
    torch::NoGradGuard no_grad;
    const double start = now_seconds();
    // The step is timed from its own start, so that whatever ran between steps
    // (the evaluation and checkpoint after an epoch) is not counted.
    const SteadyClock::time_point step_started =
        info.started != SteadyClock::time_point{} ? info.started : clock_now();
    const std::int64_t step = static_cast<std::int64_t>(inputs_.size());
    const double theta_min = controller_->theta_min(), candidate = controller_->candidate();

    // The sparsifiers' device codecs where the gradients are not on the host.
    const bool on_device = !powersgd() && !slots_.empty() &&
                           (options_.device_path_on_cpu || !gradients[slots_.front().index].device().is_cpu());
    const std::vector<double> norms = powersgd()   ? encode_powersgd(gradients, theta_min, candidate)
                                      : on_device ? encode_sparse_device(gradients, step, theta_min, candidate)
                                                  : encode_sparse(gradients, step, theta_min, candidate);
    totals_.encode_seconds += now_seconds() - start;
    regime::GravacDecision decision;
    // The samples the step processed, a short last batch's included; a caller that
    // does not say counts its share of N b.
    double samples = info.samples > 0 ? static_cast<double>(info.samples)
                                      : static_cast<double>(options_.samples_per_step) / comm_.world_size();
    const regime::GravacNorms all = decide_from(norms, samples, decision);
    if (powersgd())
        send_powersgd(gradients, decision);
    else if (on_device)
        send_sparse_device(gradients, decision, theta_min, candidate);
    else
        send_sparse(gradients, decision, step, theta_min, candidate);

    // The step's time, the slowest rank's, so that CheckGraVAC runs alike everywhere.
    // It includes the compression that measured the gains, dense steps too.
    double seconds = std::chrono::duration<double>(clock_now() - step_started).count();
    torch::Tensor slowest = torch::tensor(std::vector<double>{seconds}, torch::kFloat64);
    const double t0 = now_seconds();
    comm_.allreduce(slowest, comm::ReduceOp::max);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += static_cast<std::int64_t>(slowest.nbytes());
    seconds = std::max(slowest.item<double>(), 1e-9);
    const double samples_per_second = samples / seconds;

    const regime::GravacState before = controller_->state();
    GravacStepRecord record;
    record.epoch = info.epoch;
    record.factor = decision.factor;
    record.choice = static_cast<std::int8_t>(decision.choice);
    record.theta_min = theta_min;
    record.candidate = candidate;
    record.gain_min = before.gain_min;
    record.gain_candidate = before.gain_candidate;
    records_.push_back(record);
    controller_->end_step(samples_per_second);
    inputs_.push_back({all.grad_sq, all.min_sq, all.candidate_sq, samples_per_second});
    ++totals_.steps;
}

TensorMap GravacExchange::state() const {
    TensorMap out;
    for (const auto& s : slots_) {
        const std::string& name = tensors_[s.index].name;
        if (powersgd()) {
            out[name + "/error"] = s.error.to(torch::kCPU).reshape(s.shape).clone();
            if (s.q.defined()) out[name + "/powersgd_q"] = s.q.to(torch::kCPU).clone();
            continue;
        }
        if (s.d_memory.defined()) {
            out[name + "/error"] = s.d_memory.to(torch::kCPU).view(s.shape).clone();
            for (auto& [what, tensor] : s.d_feedback->state())
                out[name + "/" + what] = tensor->to(torch::kCPU).view(s.shape).clone();
            continue;
        }
        out[name + "/error"] = host_floats(s.memory, s.shape);
        for (auto& [what, values] : s.feedback->state()) out[name + "/" + what] = host_floats(*values, s.shape);
    }
    std::vector<double> flat;
    for (const auto& row : inputs_) flat.insert(flat.end(), row.begin(), row.end());
    out["gravac/inputs"] =
        torch::tensor(flat, torch::kFloat64).view({static_cast<std::int64_t>(inputs_.size()), 4});
    return out;
}

void GravacExchange::load_state(const TensorMap& state) {
    std::map<std::string, Slot*> by_name;
    for (auto& s : slots_) by_name[tensors_[s.index].name] = &s;
    for (const auto& [name, tensor] : state) {
        if (name == "gravac/inputs") {
            if (tensor.dim() != 2 || tensor.size(1) != 4)
                throw Error("exchange state 'gravac/inputs' must be a steps x 4 table");
            torch::Tensor t = tensor.to(torch::kCPU, torch::kFloat64).contiguous();
            // The controller is deterministic: replaying its inputs restores its state exactly.
            controller_ = std::make_unique<regime::GravacController>(options_.settings);
            inputs_.clear();
            const double* p = t.data_ptr<double>();
            for (std::int64_t r = 0; r < t.size(0); ++r, p += 4) {
                controller_->decide({p[0], p[1], p[2]});
                controller_->end_step(p[3]);
                inputs_.push_back({p[0], p[1], p[2], p[3]});
            }
            continue;
        }
        const auto slash = name.rfind('/');
        auto it = slash == std::string::npos ? by_name.end() : by_name.find(name.substr(0, slash));
        if (it == by_name.end()) throw Error("exchange state '" + name + "' names no matrix parameter of this model");
        Slot& s = *it->second;
        const std::string what = name.substr(slash + 1);
        sync_to_host(s);  // the loaded values replace what the device path holds
        if (what == "error" && powersgd()) {
            std::vector<float> values;
            load_floats(tensor, values, name, s.n);
            s.error = host_floats(values, {s.rows, s.cols});
        } else if (what == "powersgd_q" && powersgd()) {
            if (tensor.dim() != 2 || tensor.size(0) != s.cols || tensor.size(1) < 1 ||
                tensor.size(1) > std::min(s.rows, s.cols))
                throw Error("exchange state '" + name + "' must be a " + std::to_string(s.cols) +
                            " x rank matrix (rank 1 to " + std::to_string(std::min(s.rows, s.cols)) + ")");
            s.q = tensor.to(torch::kCPU, torch::kFloat32).contiguous().clone();
        } else if (what == "error")
            load_floats(tensor, s.memory, name, s.n);
        else if (std::vector<float>* values = codec_state(s.feedback.get(), what))
            load_floats(tensor, *values, name, s.n);
        else
            throw Error("exchange state '" + name + "' is not GraVAC state of --gravac " + family_->name);
    }
}

ExchangeTotals GravacExchange::take_totals() {
    ExchangeTotals out = totals_;
    totals_ = ExchangeTotals();
    return out;
}

std::vector<GravacStepRecord> GravacExchange::take_steps() {
    std::vector<GravacStepRecord> out;
    out.swap(records_);
    return out;
}

std::vector<GravacThroughputRow> GravacExchange::throughput(std::int64_t epoch) const {
    std::vector<GravacThroughputRow> out;
    for (const auto& t : controller_->state().throughput) out.push_back({epoch, t.factor, t.throughput});
    return out;
}

GravacLevelBytes GravacExchange::level_bytes() const {
    GravacLevelBytes b;
    for (const auto& s : slots_) {
        if (powersgd()) {
            // As --compress powersgd:R at each matrix's rank (whole where it would not compress).
            auto at = [&](double factor) {
                return compress::wire_bytes(
                    compress::Spec{family_->name,
                                   static_cast<double>(regime::powersgd_rank_for_factor(s.rows, s.cols, factor))},
                    s.shape);
            };
            b.theta_min += at(controller_->theta_min());
            b.candidate += at(controller_->candidate());
            b.dense += 4 * s.n;
            continue;
        }
        compress::Spec min{family_->name, regime::keep_fraction_for_factor(controller_->theta_min())};
        compress::Spec cand{family_->gravac_candidate,
                            regime::keep_fraction_for_factor(controller_->candidate())};
        b.theta_min += compress::wire_bytes(min, s.shape);
        b.candidate += compress::wire_bytes(cand, s.shape);
        b.dense += 4 * s.n;
    }
    return b;
}

}  // namespace acc::exchange
