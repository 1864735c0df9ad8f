#include "dist/exchange.hpp"

#include "base/error.hpp"
#include "exchange/staging.hpp"

#include <algorithm>
#include <map>

namespace acc::dist {
namespace {

bool is_none(const compress::Spec& level) { return level.name == "none"; }

std::vector<size_t> compressed_of(const std::vector<compress::Spec>& levels) {
    std::vector<size_t> out;
    for (size_t i = 0; i < levels.size(); ++i)
        if (!is_none(levels[i])) out.push_back(i);
    return out;
}

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

torch::Tensor step_tensor(std::int64_t step) { return torch::tensor(std::vector<std::int64_t>{step}, torch::kLong); }

}  // namespace

DistExchange::DistExchange(std::vector<torch::Tensor> parameters, std::vector<io::Parameter> description,
                           comm::Collectives& comm, torch::Device device, ExchangeSetup setup,
                           const std::vector<compress::Spec>& levels)
    : parameters_(std::move(parameters)),
      description_(std::move(description)),
      staged_(device.is_cpu() ? nullptr : exchange::staged_collectives(comm, device)),
      comm_(staged_ ? *staged_ : comm),
      setup_(setup) {
    if (levels.size() != parameters_.size() || description_.size() != parameters_.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " levels and " +
                    std::to_string(description_.size()) + " descriptions for " + std::to_string(parameters_.size()) +
                    " parameters");
    reducer_ = std::make_unique<BucketReducer>(parameters_, comm, device, setup_.buckets);
    levels_ = levels;
    compressed_ = compressed_of(levels_);
    if (!compressed_.empty()) {
        std::vector<io::Parameter> infos;
        std::vector<compress::Spec> specs;
        for (size_t i : compressed_) {
            infos.push_back(description_[i]);
            specs.push_back(levels_[i]);
        }
        compress_ = std::make_unique<compress::GradientExchange>(infos, specs, comm_, setup_.compression);
    }
    std::vector<bool> members;
    for (const auto& level : levels_) members.push_back(is_none(level));
    reducer_->set_members(members);
}

DistExchange::~DistExchange() = default;

void DistExchange::set_levels(const std::vector<compress::Spec>& levels) {
    if (levels.size() != parameters_.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " levels for " +
                    std::to_string(parameters_.size()) + " parameters");
    if (levels == levels_) return;
    const std::vector<size_t> compressed = compressed_of(levels);
    auto specs_of = [&](const std::vector<size_t>& indices, const std::vector<compress::Spec>& from) {
        std::vector<compress::Spec> out;
        for (size_t i : indices) out.push_back(from[i]);
        return out;
    };
    if (compressed == compressed_) {
        if (compress_) compress_->set_levels(specs_of(compressed, levels));
    } else {
        rebuild(levels);
    }
    levels_ = levels;
    compressed_ = compressed;
    std::vector<bool> members;
    for (const auto& level : levels_) members.push_back(is_none(level));
    reducer_->set_members(members);
}

// The set of compressed parameters changes: a new compressed exchange over the new
// set takes over the state of the parameters it shares with the old one.
void DistExchange::rebuild(const std::vector<compress::Spec>& levels) {
    const std::vector<size_t> compressed = compressed_of(levels);
    std::map<std::string, torch::Tensor> old_state;
    if (compress_)
        for (auto& [name, tensor] : compress_->state()) old_state[name] = tensor;
    else
        old_state = carried_;
    std::vector<bool> was(parameters_.size(), false), will(parameters_.size(), false);
    for (size_t i : compressed_) was[i] = true;
    for (size_t i : compressed) will[i] = true;

    // Its random streams are keyed by the step: the new exchange continues the count.
    std::vector<std::pair<std::string, at::Tensor>> state;
    for (auto& [name, tensor] : old_state)
        if (starts_with(name, "exchange/") && name != "exchange/step") state.emplace_back(name, tensor);
    state.emplace_back("exchange/step", step_tensor(steps_));
    std::vector<io::Parameter> infos;
    std::vector<compress::Spec> initial, target;
    for (size_t i = 0; i < parameters_.size(); ++i) {
        const std::string& name = description_[i].name;
        const std::string error = name + "/error";
        if (was[i] && !will[i]) {
            // Leaves compression: what its memory held back goes out once with its next bucket.
            auto it = old_state.find(error);
            if (it != old_state.end()) reducer_->add_leftover(i, it->second);
            continue;
        }
        if (!will[i]) continue;
        infos.push_back(description_[i]);
        target.push_back(levels[i]);
        if (was[i]) {
            // Stays compressed: starts at its old level with its old state, then set_levels
            // below changes the level the way a level change always does.
            initial.push_back(levels_[i]);
            for (auto& [entry, tensor] : old_state)
                if (starts_with(entry, name + "/") && entry.find('/', name.size() + 1) == std::string::npos)
                    state.emplace_back(entry, tensor);
        } else {
            initial.push_back(target.back());
            torch::Tensor leftover = reducer_->take_leftover(i);
            if (leftover.defined()) state.emplace_back(error, leftover.to(torch::kCPU).view(parameters_[i].sizes()));
        }
    }
    compress_.reset();
    carried_.clear();
    if (infos.empty()) {
        for (auto& [name, tensor] : state) carried_[name] = tensor;
        return;
    }
    compress_ = std::make_unique<compress::GradientExchange>(infos, initial, comm_, setup_.compression);
    compress_->set_epoch(epoch_);
    compress_->load_state(state);
    compress_->set_levels(target);
}

void DistExchange::set_epoch(std::int64_t epoch) {
    epoch_ = epoch;
    if (compress_) compress_->set_epoch(epoch);
}

std::vector<bool> DistExchange::momentum_in_gradient() const {
    std::vector<bool> out(parameters_.size(), false);
    for (size_t j = 0; j < compressed_.size(); ++j) out[compressed_[j]] = compress_->effective_level(j).info().momentum_in_gradient;
    return out;
}

void DistExchange::before_backward(const train::StepInfo&, bool accumulated) { reducer_->arm(accumulated); }

void DistExchange::settle() {
    if (compress_) compress_->settle();
}

void DistExchange::exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo&) {
    reducer_->launch_rest(gradients);
    std::vector<at::Tensor> compressed;
    if (compress_) {
        for (size_t i : compressed_) compressed.push_back(gradients[i]);
        compress_->start(compressed);
    }
    reducer_->finish(gradients);
    if (compress_) {
        compress_->finish();
        const compress::StepStats& s = compress_->last_step();
        totals_.bytes += s.bytes;
        totals_.encode_seconds += s.encode_seconds;
        totals_.decode_seconds += s.decode_seconds;
        totals_.communication_seconds += s.communication_seconds;
    }
    ++totals_.steps;
    ++steps_;
}

train::TensorMap DistExchange::state() const {
    train::TensorMap out;
    if (compress_)
        for (auto& [name, tensor] : compress_->state()) out[name] = tensor;
    else
        out = carried_;
    out["exchange/step"] = step_tensor(steps_);
    for (size_t i = 0; i < parameters_.size(); ++i) {
        const torch::Tensor& leftover = reducer_->leftovers()[i];
        if (leftover.defined()) out[description_[i].name + "/error"] = leftover.to(torch::kCPU).view(parameters_[i].sizes());
    }
    return out;
}

void DistExchange::load_state(const train::TensorMap& state) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < description_.size(); ++i) index[description_[i].name] = i;
    std::vector<bool> compressed(parameters_.size(), false);
    for (size_t i : compressed_) compressed[i] = true;
    for (size_t i = 0; i < parameters_.size(); ++i) reducer_->take_leftover(i);
    std::vector<std::pair<std::string, at::Tensor>> entries;
    train::TensorMap exchange_entries;
    for (const auto& [name, tensor] : state) {
        if (starts_with(name, "exchange/")) {
            if (name == "exchange/step") {
                if (tensor.numel() != 1) throw Error("exchange state 'exchange/step' must hold one number");
                steps_ = tensor.to(torch::kCPU).to(torch::kLong).item<std::int64_t>();
            }
            entries.emplace_back(name, tensor);
            exchange_entries[name] = tensor;
            continue;
        }
        const auto slash = name.rfind('/');
        auto it = slash == std::string::npos ? index.end() : index.find(name.substr(0, slash));
        if (it == index.end()) throw Error("exchange state '" + name + "' names no parameter of this model");
        if (compressed[it->second]) {
            entries.emplace_back(name, tensor);
        } else if (name.substr(slash + 1) == "error") {
            if (tensor.numel() != parameters_[it->second].numel())
                throw Error("exchange state '" + name + "' has " + std::to_string(tensor.numel()) + " values, expected " +
                            std::to_string(parameters_[it->second].numel()));
            reducer_->add_leftover(it->second, tensor);
        } else {
            throw Error("exchange state '" + name + "' belongs to a compressed level, but '" + it->first +
                        "' is at level none");
        }
    }
    if (compress_)
        compress_->load_state(entries);
    else
        carried_ = exchange_entries;
}

ExchangeTotals DistExchange::take_totals() {
    ExchangeTotals out = totals_;
    const BucketStats& b = reducer_->stats();
    out.bytes += b.bytes;
    out.communication_seconds += b.communication_seconds;
    out.early_launches += b.early_launches;
    reducer_->reset_stats();
    totals_ = ExchangeTotals();
    return out;
}

}  // namespace acc::dist
