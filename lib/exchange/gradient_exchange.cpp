#include "exchange/gradient_exchange.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/hash.hpp"
#include "compress/kernels.hpp"
#include "exchange/gradient_exchange_impl.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace acc::exchange {

at::ScalarType channel_dtype(Channel c) {
    switch (c) {
    case Channel::fp16_sum: return at::kHalf;
    case Channel::gather: return at::kByte;
    default: return at::kFloat;
    }
}

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

GradientExchange::Impl::Impl(comm::Collectives& c, ExchangeOptions o)
    : comm(c),
      options(o),
      powersgd_rng(o.compressors.powersgd.rng ? o.compressors.powersgd.rng : std::make_shared<k::NumpyRandomState>(o.seed)) {
    codec_options.topk = o.compressors.topk;
    codec_options.dgc = o.compressors.dgc;
    codec_options.world = c.world_size();
    codec_options.uncompressed_error_feedback = o.compressors.powersgd.variant == PowerSgdVariant::pytorch_hook;
}

std::uint64_t GradientExchange::Impl::key_of(size_t i, const TensorCodec& codec) const {
    const std::uint64_t stream = codec.shared_stream() ? kSharedStream : static_cast<std::uint64_t>(comm.rank());
    return k::stream_key(options.seed, static_cast<std::uint64_t>(step), options.first_stream + i, stream);
}

// ------------------------------------------------------------ levels

Spec GradientExchange::Impl::effective_of(const Spec& level) const {
    if (!level.info().sparsity_warmup || options.compressors.dgc.warmup_epochs <= 0) return level;
    Spec s = level;
    s.parameter = dgc_warmup_fraction(level.parameter, epoch, options.compressors.dgc.warmup_epochs);
    return s;
}

namespace {

void validate(const Spec& level, const TensorInfo& t) {
    level.info();  // an unknown name throws
    for (auto d : t.shape)
        if (d < 0) throw UsageError(t.name + ": negative dimension in its shape");
}

}  // namespace

// Makes the codec of the slot's effective level (and its device codec on the device
// path), and PowerSGD's shape.
void GradientExchange::Impl::configure(Slot& s, bool keep_codec_state) {
    const Spec& e = s.effective;
    std::vector<float> kept_momentum;
    at::Tensor kept_device_momentum;
    if (keep_codec_state && s.codec)
        for (auto& entry : s.codec->state()) kept_momentum = std::move(*entry.second);
    if (keep_codec_state && s.device_codec)
        for (auto& entry : s.device_codec->state()) kept_device_momentum = *entry.second;
    s.codec.reset();
    s.device_codec.reset();
    s.codec = make_codec(e, s.info.shape, codec_options);
    if (device_path) s.device_codec = make_device_codec(e, s.info.shape, codec_options);
    s.error_feedback = options.error_feedback && s.codec->error_feedback();
    const LowRank low = s.codec->low_rank();
    s.rows = low.rows;
    s.cols = low.cols;
    s.rank = low.rank;
    if (s.codec->channel() == Channel::low_rank && static_cast<std::int64_t>(s.powersgd.q.size()) != s.cols * s.rank) {
        s.powersgd.q.clear();
        s.powersgd.fresh = true;
    }
    if (s.powersgd.device_q.defined() && s.powersgd.device_q.numel() != s.cols * s.rank) {
        s.powersgd.device_q = at::Tensor();
        s.powersgd.fresh = true;
    }
    if (!kept_momentum.empty())
        for (auto& entry : s.codec->state())
            if (entry.second->size() == kept_momentum.size()) *entry.second = std::move(kept_momentum);
    if (kept_device_momentum.defined() && s.device_codec)
        for (auto& entry : s.device_codec->state())
            if (entry.second->numel() == kept_device_momentum.numel()) *entry.second = kept_device_momentum;
    layout_dirty = true;
}

void GradientExchange::Impl::apply_level(size_t i, const Spec& level, bool initial) {
    Slot& s = slots[i];
    validate(level, s.info);
    if (!initial && level == s.level) return;
    const bool same_compressor = !initial && level.name == s.level.name;
    s.level = level;
    // A new level starts fresh compressor state: PowerSGD draws a new Q. The error
    // memory stays. DGC keeps its momentum when only its fraction changes.
    s.powersgd.clear();
    s.compensator.reset();
    s.device_compensator.reset();
    s.effective = effective_of(level);
    configure(s, same_compressor);
}

void GradientExchange::Impl::refresh_effective() {
    for (auto& s : slots) {
        Spec e = effective_of(s.level);
        if (e == s.effective) continue;
        s.effective = e;
        configure(s, true);
    }
}

// Every worker must run the same levels: compare a hash of them across workers.
void GradientExchange::Impl::check_agreement() {
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

void GradientExchange::Impl::layout() {
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
    const at::Device on = device_path ? device : at::Device(at::kCPU);
    auto make = [&](std::int64_t n, at::ScalarType type) {
        return n > 0 ? at::empty({n}, at::TensorOptions().dtype(type).device(on)) : at::Tensor();
    };
    for (Channel c : {Channel::fp32_sum, Channel::fp16_sum, Channel::sparse_sum, Channel::gather})
        channel_buffer(c) = make(used[static_cast<size_t>(c)] / channel_element_bytes(c), channel_dtype(c));
    p = make(p_n, at::kFloat);
    q = make(q_n, at::kFloat);
    groups.clear();
    q_state = at::Tensor();
    p_batches.clear();
    q_batches.clear();
    runs.clear();
    sparse_batches.clear();
    sparse_means = at::Tensor();
    topk_batches.clear();
    for (auto& s : slots) s.run = s.sparse_batch = s.topk_batch = -1;
    if (device_path) {
        group_powersgd();
        layout_powersgd_device();
        layout_runs_device();
        layout_sparse_device();
        layout_topk_device();
    }
    layout_dirty = false;
}

// Runs of PowerSGD tensors in P's order with one (rows, cols, rank): one batched product each.
void GradientExchange::Impl::group_powersgd() {
    for (size_t i : powersgd_order) {
        const Slot& s = slots[i];
        if (groups.empty() || groups.back().rows != s.rows || groups.back().cols != s.cols ||
            groups.back().rank != s.rank) {
            PowerGroup g;
            g.rows = s.rows;
            g.cols = s.cols;
            g.rank = s.rank;
            g.p_offset = s.p_offset;
            g.q_offset = s.q_offset;
            groups.push_back(std::move(g));
        }
        groups.back().slots.push_back(i);
    }
}

// The host path for CPU gradients, the device path for any other device (or when asked).
// Changing path moves the state (through state() and load_state()).
void GradientExchange::Impl::choose_path(const std::vector<at::Tensor>& grads) {
    check_gradients(grads);
    at::Device on = grads.empty() ? at::Device(at::kCPU) : grads.front().device();
    for (const auto& g : grads)
        if (g.device() != on)
            throw UsageError(slots[static_cast<size_t>(&g - grads.data())].info.name + ": gradient is on " +
                             g.device().str() + ", the others on " + on.str() + "; the exchange takes one device");
    const bool wanted = !on.is_cpu() || options.device_path_on_cpu;
    if (wanted == device_path && (!wanted || on == device)) return;
    auto kept = state();
    device_path = wanted;
    device = on;
    for (auto& s : slots) {
        s.device_codec.reset();
        s.device_memory = at::Tensor();
        s.powersgd.device_q = at::Tensor();
        s.device_compensator.reset();
        s.measure_device_codecs.clear();
        if (device_path) s.device_codec = make_device_codec(s.effective, s.info.shape, codec_options);
        if (device_path && s.compensator)
            s.device_compensator = make_device_codec(s.compensator->spec(), s.info.shape, codec_options);
    }
    load_state(kept);
    layout_dirty = true;
}

void GradientExchange::Impl::check_gradients(const std::vector<at::Tensor>& grads) const {
    if (grads.size() != slots.size())
        throw UsageError("gradient exchange: got " + std::to_string(grads.size()) + " gradients for " +
                         std::to_string(slots.size()) + " tensors");
    for (size_t i = 0; i < slots.size(); ++i) {
        const Slot& s = slots[i];
        const at::Tensor& g = grads[i];
        if (!g.defined()) throw UsageError(s.info.name + ": gradient is missing (undefined tensor)");
        if (g.scalar_type() != at::kFloat)
            throw UsageError(s.info.name + ": gradient has dtype " + std::string(c10::toString(g.scalar_type())) +
                             "; the exchange takes float32 gradients");
        if (g.numel() != s.n)
            throw UsageError(s.info.name + ": gradient has " + std::to_string(g.numel()) + " values, expected " +
                             std::to_string(s.n));
    }
}

// ------------------------------------------------------------ shared by both paths

void GradientExchange::Impl::not_finite(const Slot& s, const std::string& detail) const {
    not_finite_at(s, step, detail);
}

void GradientExchange::Impl::malformed(const Slot& s) const { malformed_at(s, step); }

void GradientExchange::Impl::not_finite_at(const Slot& s, std::int64_t at_step, const std::string& detail) const {
    throw Error(s.info.name + ": gradient holds NaN or infinity at step " + std::to_string(at_step) + detail);
}

void GradientExchange::Impl::malformed_at(const Slot& s, std::int64_t at_step) const {
    throw Error(s.info.name + ": a worker's " + s.effective.name + " payload is malformed at step " +
                std::to_string(at_step));
}

std::unique_ptr<comm::Work> GradientExchange::Impl::launch(at::Tensor& buffer) {
    if (!buffer.defined()) return nullptr;
    auto t0 = Clock::now();
    auto work = comm.allreduce_async(buffer, comm::ReduceOp::sum);
    current.communication_seconds += seconds_since(t0);
    current.collectives += 1;
    current.bytes += static_cast<std::int64_t>(buffer.nbytes());
    return work;
}

void GradientExchange::Impl::wait(std::unique_ptr<comm::Work>& work) {
    if (!work) return;
    auto t0 = Clock::now();
    work->wait();
    current.communication_seconds += seconds_since(t0);
    work.reset();
}

// The allgather of the gather channel's buffer: every worker's payloads, checked.
std::vector<at::Tensor> GradientExchange::Impl::gather_payloads() {
    const at::Tensor& gather = channel_buffer(Channel::gather);
    const int W = world();
    auto t0 = Clock::now();
    std::vector<at::Tensor> received = comm.allgather(gather);
    current.communication_seconds += seconds_since(t0);
    current.collectives += 1;
    current.bytes += static_cast<std::int64_t>(gather.nbytes());
    if (static_cast<int>(received.size()) != W)
        throw Error("allgather returned " + std::to_string(received.size()) + " payloads for " + std::to_string(W) +
                    " workers");
    for (auto& r : received)
        if (r.scalar_type() != at::kByte || r.numel() != gather.numel() || !r.is_contiguous() ||
            r.device() != gather.device())
            throw Error("allgather returned a payload of " + std::to_string(r.numel()) + " bytes, expected " +
                        std::to_string(gather.numel()));
    return received;
}

// Gradients that were staged get the aggregate; the step is counted.
void GradientExchange::Impl::end_step() {
    at::NoGradGuard no_grad;  // writing back into gradients is no part of any graph
    for (auto& s : slots)
        if (s.staged.defined()) {
            s.original.copy_(s.staged.view(s.original.sizes()));
            s.staged = at::Tensor();
        }
    for (auto& s : slots) {
        s.original = at::Tensor();
        s.device_grad = at::Tensor();
        s.device_t = at::Tensor();
    }
    last = current;
    total += current;
    ++step;
}

// ------------------------------------------------------------ state

std::vector<std::pair<std::string, at::Tensor>> GradientExchange::Impl::state() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    auto floats = [](const std::vector<float>& v, std::vector<std::int64_t> shape) {
        return at::from_blob(const_cast<float*>(v.data()), shape, at::kFloat).clone();
    };
    auto host = [](const at::Tensor& t, std::vector<std::int64_t> shape) {
        return t.detach().to(at::kCPU).contiguous().view(shape).clone();
    };
    for (auto& s : slots) {
        if (s.memory_used)
            out.emplace_back(s.info.name + "/error", device_path ? host(s.device_memory, s.info.shape)
                                                                 : floats(s.memory, s.info.shape));
        // Q with the columns a change within its family kept (LevelChange::within_family).
        at::Tensor q = current_q(s);
        if (s.powersgd.spare.defined()) q = q.defined() ? at::cat({q, s.powersgd.spare}, 1) : s.powersgd.spare.clone();
        if (q.defined()) out.emplace_back(s.info.name + "/powersgd_q", q);
        DeviceCodec* device_codec = s.state_device_codec();
        TensorCodec* codec = s.state_codec();
        if (device_path && device_codec)
            for (auto& entry : device_codec->state())
                out.emplace_back(s.info.name + "/" + entry.first, host(*entry.second, {entry.second->numel()}));
        if (!device_path && codec)
            for (auto& entry : codec->state())
                out.emplace_back(s.info.name + "/" + entry.first,
                                 floats(*entry.second, {static_cast<std::int64_t>(entry.second->size())}));
    }
    auto words = powersgd_rng->state();
    out.emplace_back("exchange/powersgd_rng", at::tensor(words, at::kLong));
    out.emplace_back("exchange/step", at::tensor(std::vector<std::int64_t>{step}, at::kLong));
    return out;
}

[[noreturn]] void state_error(const std::string& name, const std::string& problem) {
    throw Error("exchange state '" + name + "': " + problem);
}

at::Tensor checked_floats(const std::string& name, const at::Tensor& t, std::int64_t expected) {
    if (t.scalar_type() != at::kFloat) state_error(name, "is not float32");
    if (t.numel() != expected)
        state_error(name, "has " + std::to_string(t.numel()) + " values, expected " + std::to_string(expected));
    return t.detach().to(at::kCPU).contiguous().view({-1});
}

std::vector<float> to_vector(const at::Tensor& c) { return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()}; }

void GradientExchange::Impl::clear_state() {
    for (auto& s : slots) {
        s.memory.clear();
        s.device_memory = at::Tensor();
        s.memory_used = false;
        s.powersgd.clear();
        for (TensorCodec* codec : {s.codec.get(), s.compensator.get()})
            if (codec)
                for (auto& entry : codec->state()) std::fill(entry.second->begin(), entry.second->end(), 0.0f);
        for (DeviceCodec* codec : {s.device_codec.get(), s.device_compensator.get()})
            if (codec)
                for (auto& entry : codec->state()) entry.second->zero_();
    }
    layout_dirty = true;  // PowerSGD groups hold views of the memories
}

bool GradientExchange::Impl::load_own_entry(const std::string& name, const at::Tensor& tensor) {
    if (name == "exchange/powersgd_rng") {
        at::Tensor c = tensor.to(at::kCPU).to(at::kLong).contiguous();
        std::vector<std::int64_t> words(c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel());
        if (!powersgd_rng->set_state(words)) state_error(name, "is not a RandomState");
        return true;
    }
    if (name == "exchange/step") {
        if (tensor.numel() != 1) state_error(name, "must hold one number");
        step = tensor.to(at::kCPU).to(at::kLong).item<std::int64_t>();
        return true;
    }
    return false;
}

void GradientExchange::Impl::load_memory(Slot& s, const std::string& name, const at::Tensor& tensor) {
    at::Tensor c = checked_floats(name, tensor, s.n);
    if (device_path)
        s.device_memory = c.to(state_options()).clone();
    else
        s.memory = to_vector(c);
    s.memory_used = true;
}

void GradientExchange::Impl::load_codec_state(Slot& s, const std::string& what, const std::string& name,
                                              const at::Tensor& tensor) {
    bool found = false;
    TensorCodec* codec = s.state_codec();
    DeviceCodec* device_codec = s.state_device_codec();
    if (!device_path && codec)
        for (auto& entry : codec->state())
            if (entry.first == what) {
                *entry.second = to_vector(checked_floats(name, tensor, static_cast<std::int64_t>(entry.second->size())));
                found = true;
            }
    if (device_path && device_codec)
        for (auto& entry : device_codec->state())
            if (entry.first == what) {
                *entry.second = checked_floats(name, tensor, entry.second->numel()).to(state_options()).clone();
                found = true;
            }
    if (!found) state_error(name, "is not state of level " + s.effective.text());
}

void GradientExchange::Impl::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
    std::map<std::string, Slot*> by_name;
    for (auto& s : slots) by_name[s.info.name] = &s;
    clear_state();
    for (const auto& [name, tensor] : state) {
        if (load_own_entry(name, tensor)) continue;
        auto slash = name.rfind('/');
        auto it = slash == std::string::npos ? by_name.end() : by_name.find(name.substr(0, slash));
        if (it == by_name.end()) state_error(name, "names no tensor of this exchange");
        Slot& s = *it->second;
        const std::string what = name.substr(slash + 1);
        if (what == "error")
            load_memory(s, name, tensor);
        else if (what == "powersgd_q")
            load_powersgd_q(s, name, tensor);
        else
            load_codec_state(s, what, name, tensor);
    }
}

// ------------------------------------------------------------ the public API

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
    impl_->settle_checks();  // before the codecs whose failures they may name change
    if (levels.size() != impl_->slots.size())
        throw UsageError("gradient exchange: " + std::to_string(levels.size()) + " levels for " +
                         std::to_string(impl_->slots.size()) + " tensors");
    if (impl_->options.level_change == LevelChange::within_family) {
        for (size_t i = 0; i < levels.size(); ++i) {
            validate(levels[i], impl_->slots[i].info);
            if (!(levels[i] == impl_->slots[i].level)) impl_->change_within_family(i, levels[i]);
        }
        impl_->levels = levels;
        return;
    }
    for (size_t i = 0; i < levels.size(); ++i) impl_->apply_level(i, levels[i], false);
    impl_->levels = levels;
    impl_->check_agreement();
}

void GradientExchange::set_epoch(std::int64_t epoch) {
    if (impl_->in_flight) throw UsageError("gradient exchange: set_epoch() during a step");
    impl_->epoch = epoch;
    impl_->refresh_effective();
}

void GradientExchange::start(const std::vector<at::Tensor>& grads) {
    if (impl_->in_flight) throw UsageError("gradient exchange: start() called again before finish()");
    impl_->choose_path(grads);
    if (impl_->device_path)
        impl_->start_device(grads);
    else
        impl_->start_host(grads);
}

void GradientExchange::finish() {
    if (!impl_->in_flight) throw UsageError("gradient exchange: finish() called without start()");
    impl_->in_flight = false;
    if (impl_->device_path)
        impl_->finish_device();
    else
        impl_->finish_host();
    impl_->end_step();
}

void GradientExchange::step(const std::vector<at::Tensor>& grads) {
    start(grads);
    finish();
}
bool GradientExchange::in_flight() const { return impl_->in_flight; }

void GradientExchange::settle() {
    if (impl_->in_flight) throw UsageError("gradient exchange: settle() during a step");
    impl_->settle_checks();
}

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

std::vector<std::pair<std::string, at::Tensor>> GradientExchange::state() const { return impl_->state(); }

void GradientExchange::load_state(const std::vector<std::pair<std::string, at::Tensor>>& state) {
    if (impl_->in_flight) throw UsageError("gradient exchange: load_state() during a step");
    impl_->settle_checks();
    impl_->load_state(state);
}

}  // namespace acc::exchange
