#include "exchange/trainer/bucket_sync.hpp"

#include "base/error.hpp"
#include "compress/kernels.hpp"
#include "exchange/staging.hpp"

#include <algorithm>

namespace acc::exchange {
namespace {

bool is_none(const compress::Spec& level) { return level == compress::no_compression(); }

std::vector<size_t> compressed_of(const std::vector<compress::Spec>& levels) {
    std::vector<size_t> out;
    for (size_t i = 0; i < levels.size(); ++i)
        if (!is_none(levels[i])) out.push_back(i);
    return out;
}

torch::Tensor step_tensor(std::int64_t step) { return torch::tensor(std::vector<std::int64_t>{step}, torch::kLong); }

}  // namespace

BucketSync::BucketSync(std::vector<torch::Tensor> parameters, std::vector<io::Parameter> description,
                           comm::Collectives& comm, torch::Device device, ExchangeSetup setup,
                           const std::vector<compress::Spec>& levels)
    : parameters_(std::move(parameters)),
      description_(std::move(description)),
      staged_(device.is_cpu() ? nullptr : staged_collectives(comm, device)),
      comm_(staged_ ? *staged_ : comm),
      setup_(setup) {
    if (levels.size() != parameters_.size() || description_.size() != parameters_.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " levels and " +
                    std::to_string(description_.size()) + " descriptions for " + std::to_string(parameters_.size()) +
                    " parameters");
    // One RandomState for every bucket's PowerSGD, kept across rebuilds.
    if (!setup_.compression.compressors.powersgd.rng)
        setup_.compression.compressors.powersgd.rng = std::make_shared<compress::kernels::NumpyRandomState>(setup_.compression.seed);
    reducer_ = std::make_unique<BucketReducer>(parameters_, comm, device, setup_.buckets, static_cast<BucketExchange*>(this));
    levels_ = levels;
    compressed_ = compressed_of(levels_);
    route(levels_);
    make_exchanges(levels_, levels_, {});
}

BucketSync::~BucketSync() = default;

void BucketSync::route(const std::vector<compress::Spec>& levels) {
    std::vector<Route> routes;
    for (const auto& level : levels) routes.push_back(is_none(level) ? Route::allreduce : Route::compressed);
    reducer_->set_routes(routes);
}

std::vector<size_t> BucketSync::members_of(size_t bucket) const {
    std::vector<size_t> out = reducer_->buckets().at(bucket);
    std::sort(out.begin(), out.end());
    return out;
}

// An exchange per compressed bucket at the `initial` levels, with the state its
// parameters carry and the exchanges' own entries `own`, then set to the `target`
// levels (a level change, where they differ).
void BucketSync::make_exchanges(const std::vector<compress::Spec>& initial, const std::vector<compress::Spec>& target,
                                const StateEntries& own) {
    by_bucket_.assign(reducer_->buckets().size(), nullptr);
    for (size_t b = 0; b < by_bucket_.size(); ++b) {
        if (reducer_->bucket_routes()[b] != Route::compressed) continue;
        const std::vector<size_t> members = members_of(b);
        std::vector<io::Parameter> infos;
        std::vector<compress::Spec> first, then;
        for (size_t i : members) {
            infos.push_back(description_[i]);
            first.push_back(initial[i]);
            then.push_back(target[i]);
        }
        ExchangeOptions options = setup_.compression;
        options.first_stream = static_cast<std::uint64_t>(
            std::lower_bound(compressed_.begin(), compressed_.end(), members.front()) - compressed_.begin());
        StateEntries entries = own;
        entries.emplace_back("exchange/step", step_tensor(steps_));
        GradientExchange& exchange = exchanges_.make(
            std::vector<compress::TensorInfo>(infos.begin(), infos.end()), first, comm_, options, entries);
        exchange.set_epoch(epoch_);
        if (!(then == first)) exchange.set_levels(then);
        by_bucket_[b] = &exchange;
    }
}

void BucketSync::set_levels(const std::vector<compress::Spec>& levels) {
    if (levels.size() != parameters_.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " levels for " +
                    std::to_string(parameters_.size()) + " parameters");
    if (levels == levels_) return;
    if (compressed_of(levels) != compressed_) {
        rebuild(levels);
        return;
    }
    for (size_t b = 0; b < by_bucket_.size(); ++b) {
        if (!by_bucket_[b]) continue;
        std::vector<compress::Spec> specs;
        for (size_t i : members_of(b)) specs.push_back(levels[i]);
        by_bucket_[b]->set_levels(specs);
    }
    levels_ = levels;
}

// The set of compressed parameters changes: new buckets, new exchanges, each
// parameter's state carried over by name.
void BucketSync::rebuild(const std::vector<compress::Spec>& levels) {
    exchanges_.dissolve_all();
    by_bucket_.clear();
    // The exchanges' own entries; the step is the one this hook counts.
    StateEntries own;
    for (auto& entry : exchanges_.own_state())
        if (entry.first != "exchange/step") own.push_back(std::move(entry));
    const std::vector<size_t> compressed = compressed_of(levels);
    std::vector<bool> was(parameters_.size(), false), will(parameters_.size(), false);
    for (size_t i : compressed_) was[i] = true;
    for (size_t i : compressed) will[i] = true;
    std::vector<compress::Spec> initial = levels;
    for (size_t i = 0; i < parameters_.size(); ++i) {
        const std::string& name = description_[i].name;
        if (was[i] && !will[i]) {
            // Leaves compression: what its memory held back goes out once with its next bucket.
            for (auto& [entry, tensor] : exchanges_.take_carried(name))
                if (entry == name + "/error") reducer_->add_leftover(i, tensor);
        } else if (was[i]) {
            // Stays compressed: starts at its old level with the state it carries, then the
            // new level comes the way a level change always does.
            initial[i] = levels_[i];
        } else if (will[i]) {
            torch::Tensor leftover = reducer_->take_leftover(i);
            if (leftover.defined())
                exchanges_.carry({{name + "/error", leftover.to(torch::kCPU).view(parameters_[i].sizes())}});
        }
    }
    levels_ = levels;
    compressed_ = compressed;
    route(levels_);
    if (!compressed_.empty()) make_exchanges(initial, levels_, own);
    exchanges_.drop_carried();
}

void BucketSync::begin_epoch(const EpochSettings& settings) {
    set_levels(settings.levels);
    set_epoch(settings.epoch);
}

void BucketSync::set_epoch(std::int64_t epoch) {
    epoch_ = epoch;
    exchanges_.set_epoch(epoch);
}

std::vector<bool> BucketSync::momentum_in_gradient() const {
    std::vector<bool> out(parameters_.size(), false);
    for (size_t b = 0; b < by_bucket_.size(); ++b) {
        if (!by_bucket_[b]) continue;
        const std::vector<size_t> members = members_of(b);
        for (size_t j = 0; j < members.size(); ++j)
            out[members[j]] = by_bucket_[b]->effective_level(j).info().momentum_in_gradient;
    }
    return out;
}

void BucketSync::before_backward(const train::StepInfo&, bool accumulated) { reducer_->arm(accumulated); }

void BucketSync::settle() { exchanges_.settle(); }

void BucketSync::start(size_t bucket, const std::vector<torch::Tensor>& gradients) {
    by_bucket_.at(bucket)->start(gradients);
}

void BucketSync::finish(size_t bucket) {
    GradientExchange& exchange = *by_bucket_.at(bucket);
    exchange.finish();
    const StepStats& s = exchange.last_step();
    totals_.bytes += s.bytes;
    totals_.encode_seconds += s.encode_seconds;
    totals_.decode_seconds += s.decode_seconds;
    totals_.communication_seconds += s.communication_seconds;
}

void BucketSync::exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo&) {
    reducer_->launch_rest(gradients);
    reducer_->finish(gradients);
    ++totals_.steps;
    ++steps_;
}

train::TensorMap BucketSync::state() const {
    train::TensorMap out;
    for (auto& [name, tensor] : exchanges_.parameter_state()) out[name] = tensor;
    for (auto& [name, tensor] : exchanges_.own_state()) out[name] = tensor;
    out["exchange/step"] = step_tensor(steps_);
    for (size_t i = 0; i < parameters_.size(); ++i) {
        const torch::Tensor& leftover = reducer_->leftovers()[i];
        if (leftover.defined()) out[description_[i].name + "/error"] = leftover.to(torch::kCPU).view(parameters_[i].sizes());
    }
    return out;
}

void BucketSync::load_state(const train::TensorMap& state) {
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < description_.size(); ++i) index[description_[i].name] = i;
    for (size_t i = 0; i < parameters_.size(); ++i) reducer_->take_leftover(i);
    StateEntries own, compressed;
    for (const auto& [name, tensor] : state) {
        const std::string owner = state_owner(name);
        if (owner.empty() && name.rfind("exchange/", 0) == 0) {
            if (name == "exchange/step") {
                if (tensor.numel() != 1) throw Error("exchange state 'exchange/step' must hold one number");
                steps_ = tensor.to(torch::kCPU).to(torch::kLong).item<std::int64_t>();
            }
            own.emplace_back(name, tensor);
            continue;
        }
        auto it = index.find(owner);
        if (it == index.end()) throw Error("exchange state '" + name + "' names no parameter of this model");
        if (!is_none(levels_[it->second])) {
            compressed.emplace_back(name, tensor);
        } else if (name == owner + "/error") {
            if (tensor.numel() != parameters_[it->second].numel())
                throw Error("exchange state '" + name + "' has " + std::to_string(tensor.numel()) + " values, expected " +
                            std::to_string(parameters_[it->second].numel()));
            reducer_->add_leftover(it->second, tensor);
        } else {
            throw Error("exchange state '" + name + "' belongs to a compressed level, but '" + it->first +
                        "' is at level none");
        }
    }
    // Every compressed parameter is in a live exchange, which takes its entries.
    exchanges_.load_state(compressed, own);
}

ExchangeTotals BucketSync::take_totals() {
    ExchangeTotals out = totals_;
    const BucketStats& b = reducer_->stats();
    out.bytes += b.bytes;
    out.communication_seconds += b.communication_seconds;
    out.early_launches += b.early_launches;
    reducer_->reset_stats();
    totals_ = ExchangeTotals();
    return out;
}

}  // namespace acc::exchange
