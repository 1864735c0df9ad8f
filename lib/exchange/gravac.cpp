#include "exchange/gravac.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "compress/spec.hpp"
#include "exchange/staging.hpp"

#include <algorithm>
#include <cmath>

namespace acc::exchange {
namespace {

double now_seconds() {
    return std::chrono::duration<double>(SteadyClock::now().time_since_epoch()).count();
}

}  // namespace

GravacExchange::GravacExchange(std::vector<compress::TensorInfo> tensors, comm::Collectives& comm, torch::Device device,
                               GravacExchangeOptions options)
    : tensors_(std::move(tensors)),
      staged_(device.is_cpu() ? nullptr : staged_collectives(comm, device)),
      comm_(staged_ ? *staged_ : comm),
      options_(std::move(options)),
      staged_decisions_(options_.decisions && !device.is_cpu() ? staged_collectives(*options_.decisions, device)
                                                                : nullptr),
      decide_(staged_decisions_ ? *staged_decisions_ : options_.decisions ? *options_.decisions : comm_) {
    const auto& families = regime::gravac_family_names();
    const auto index = static_cast<size_t>(options_.family);
    if (index >= families.size())
        throw UsageError("--gravac: no family number " + std::to_string(static_cast<int>(options_.family)) +
                         "; the families are " + join(families, ", "));
    family_ = compress::find_compressor(families[index]);
    controller_ = std::make_unique<regime::GravacController>(options_.settings);
    for (size_t i = 0; i < tensors_.size(); ++i)
        if (tensors_[i].is_matrix()) matrices_.push_back(i);
    ExchangeOptions o;
    o.compressors.powersgd.variant = PowerSgdVariant::accordion;
    o.seed = options_.seed;
    o.compressors.dgc.momentum = options_.dgc.momentum;
    o.device_path_on_cpu = options_.device_path_on_cpu;
    // A gradient's NaN or infinity reaches the decision through the norms.
    o.check_finite = false;
    o.level_change = LevelChange::within_family;
    exchange_ = std::make_unique<GradientExchange>(tensors_, levels_at(controller_->theta_min()), comm_, o);
}

GravacExchange::~GravacExchange() = default;

std::vector<bool> GravacExchange::momentum_in_gradient() const {
    std::vector<bool> out(tensors_.size(), false);
    if (family_->momentum_in_gradient)
        for (size_t i : matrices_) out[i] = true;
    return out;
}

std::int64_t GravacExchange::powersgd_rank(size_t tensor, double factor) const {
    const compress::MatrixView m = compress::matrix_view(tensors_[tensor].shape);
    const std::int64_t r = std::min({regime::powersgd_rank_for_factor(m.rows, m.cols, factor), m.rows, m.cols});
    return compress::powersgd_compresses(tensors_[tensor].shape, r) ? r : 0;
}

std::vector<std::int64_t> GravacExchange::powersgd_ranks(double factor) const {
    std::vector<std::int64_t> out;
    for (size_t i : matrices_) out.push_back(powersgd() ? powersgd_rank(i, factor) : 0);
    return out;
}

std::vector<compress::Spec> GravacExchange::levels_at(double factor) const {
    std::vector<compress::Spec> levels(tensors_.size(), compress::no_compression());
    if (factor <= 1) return levels;
    for (size_t i : matrices_) {
        if (!powersgd()) {
            levels[i] = {family_->name, regime::keep_fraction_for_factor(factor)};
            continue;
        }
        const std::int64_t r = powersgd_rank(i, factor);
        if (r > 0) levels[i] = {family_->name, static_cast<double>(r)};
    }
    return levels;
}

SteadyClock::time_point GravacExchange::clock_now() const {
    return options_.clock ? options_.clock() : SteadyClock::now();
}

// One allreduce sums `norms` (this rank's three squared norms) and `samples` over
// the deciding ranks: every rank decides from the same sums.
regime::GravacNorms GravacExchange::decide_from(std::vector<double> norms, double& samples,
                                                regime::GravacDecision& decision) {
    norms.push_back(samples);
    torch::Tensor sums = torch::tensor(norms, torch::kFloat64);
    const double t0 = now_seconds();
    decide_.allreduce(sums, comm::ReduceOp::sum);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += static_cast<std::int64_t>(sums.nbytes());
    const regime::GravacNorms all{sums[0].item<double>(), sums[1].item<double>(), sums[2].item<double>()};
    samples = sums[3].item<double>();
    decision = controller_->decide(all);
    return all;
}

void GravacExchange::exchange(std::vector<torch::Tensor>& gradients, const GravacStepInfo& info) {
    torch::NoGradGuard no_grad;
    const double start = now_seconds();
    // The step is timed from its own start, so that whatever ran between steps
    // (the evaluation and checkpoint after an epoch) is not counted.
    const SteadyClock::time_point step_started =
        info.started != SteadyClock::time_point{} ? info.started : clock_now();
    const double theta_min = controller_->theta_min(), candidate = controller_->candidate();
    const std::vector<double> norms =
        exchange_->squared_norms(gradients, matrices_, {levels_at(theta_min), levels_at(candidate)});
    totals_.encode_seconds += now_seconds() - start;
    regime::GravacDecision decision;
    // The samples the step processed, a short last batch's included; a caller that
    // does not say counts its share of N b.
    double samples = info.samples > 0 ? static_cast<double>(info.samples)
                                      : static_cast<double>(options_.samples_per_step) / decide_.world_size();
    const regime::GravacNorms all = decide_from(norms, samples, decision);
    exchange_->set_levels(levels_at(decision.choice == regime::GravacChoice::dense ? 1.0 : decision.factor));
    exchange_->step(gradients);
    const StepStats& sent = exchange_->last_step();
    totals_.bytes += sent.bytes;
    totals_.encode_seconds += sent.encode_seconds;
    totals_.communication_seconds += sent.communication_seconds;
    totals_.decode_seconds += sent.decode_seconds;

    // The step's time, the slowest rank's, so that CheckGraVAC runs alike everywhere.
    // It includes the compression that measured the gains, dense steps too.
    double seconds = std::chrono::duration<double>(clock_now() - step_started).count();
    torch::Tensor slowest = torch::tensor(std::vector<double>{seconds}, torch::kFloat64);
    const double t0 = now_seconds();
    decide_.allreduce(slowest, comm::ReduceOp::max);
    totals_.communication_seconds += now_seconds() - t0;
    totals_.bytes += static_cast<std::int64_t>(slowest.nbytes());
    seconds = std::max(slowest.item<double>(), 1e-9);
    const double samples_per_second = samples / seconds;

    const regime::GravacState before = controller_->state();
    regime::GravacStep record;
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
    for (auto& [name, tensor] : exchange_->state()) out[name] = tensor;
    std::vector<double> flat;
    for (const auto& row : inputs_) flat.insert(flat.end(), row.begin(), row.end());
    out["gravac/inputs"] =
        torch::tensor(flat, torch::kFloat64).view({static_cast<std::int64_t>(inputs_.size()), 4});
    return out;
}

void GravacExchange::load_state(const TensorMap& state) {
    std::vector<std::pair<std::string, at::Tensor>> kept;
    for (const auto& [name, tensor] : state) {
        if (name != "gravac/inputs") {
            kept.emplace_back(name, tensor);
            continue;
        }
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
    }
    exchange_->load_state(kept);
}

ExchangeTotals GravacExchange::take_totals() {
    ExchangeTotals out = totals_;
    totals_ = ExchangeTotals();
    return out;
}

std::vector<regime::GravacStep> GravacExchange::take_steps() {
    std::vector<regime::GravacStep> out;
    out.swap(records_);
    return out;
}

std::vector<regime::GravacThroughputRow> GravacExchange::throughput(std::int64_t epoch) const {
    std::vector<regime::GravacThroughputRow> out;
    for (const auto& t : controller_->state().throughput) out.push_back({epoch, t.factor, t.throughput});
    return out;
}

GravacLevelBytes GravacExchange::level_bytes() const {
    GravacLevelBytes b;
    auto bytes = [&](double factor) {
        const std::vector<compress::Spec> levels = levels_at(factor);
        std::int64_t sum = 0;
        for (size_t i : matrices_) sum += compress::wire_bytes(levels[i], tensors_[i].shape);
        return sum;
    };
    b.theta_min = bytes(controller_->theta_min());
    b.candidate = bytes(controller_->candidate());
    b.dense = bytes(1);
    return b;
}

}  // namespace acc::exchange
