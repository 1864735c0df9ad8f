#include "exchange/bucket_exchanges.hpp"

#include "base/error.hpp"

#include <set>

namespace acc::exchange {
namespace {

const std::string kOwnPrefix = "exchange/";

std::string key_of(const std::vector<std::string>& names) {
    std::string key;
    for (const auto& name : names) key += name + '\n';
    return key;
}

}  // namespace

std::string state_owner(const std::string& entry) {
    if (entry.rfind(kOwnPrefix, 0) == 0) return {};
    const auto slash = entry.rfind('/');
    return slash == std::string::npos ? std::string() : entry.substr(0, slash);
}

BucketExchanges::BucketExchanges() = default;
BucketExchanges::~BucketExchanges() = default;

GradientExchange* BucketExchanges::find(const std::vector<std::string>& names) const {
    auto it = live_.find(key_of(names));
    return it == live_.end() ? nullptr : it->second.get();
}

GradientExchange& BucketExchanges::make(std::vector<compress::TensorInfo> tensors, std::vector<compress::Spec> levels,
                                        comm::Collectives& comm, const ExchangeOptions& options,
                                        const StateEntries& own) {
    std::vector<std::string> names;
    for (const auto& t : tensors) names.push_back(t.name);
    const std::set<std::string> here(names.begin(), names.end());
    for (auto it = live_.begin(); it != live_.end();) {
        bool overlaps = false;
        for (const auto& t : it->second->tensors()) overlaps = overlaps || here.count(t.name) > 0;
        if (!overlaps) {
            ++it;
            continue;
        }
        if (it->second->in_flight())
            throw UsageError("buckets regrouped within one step: the bucket of " + names.front() +
                             " is in flight; buckets can change only between steps");
        dissolve(*it->second);
        it = live_.erase(it);
    }
    StateEntries state = own;
    for (const auto& name : names) {
        StateEntries mine = take_carried(name);
        state.insert(state.end(), mine.begin(), mine.end());
    }
    auto exchange = std::make_unique<GradientExchange>(std::move(tensors), std::move(levels), comm, options);
    if (!state.empty()) exchange->load_state(state);
    return *live_.emplace(key_of(names), std::move(exchange)).first->second;
}

void BucketExchanges::dissolve(GradientExchange& exchange) {
    exchange.settle();
    dissolved_bytes_ += exchange.total().bytes;
    own_.clear();
    for (auto& entry : exchange.state()) {
        const std::string owner = state_owner(entry.first);
        if (owner.empty())
            own_.push_back(std::move(entry));
        else
            carried_[owner].push_back(std::move(entry));
    }
}

void BucketExchanges::dissolve_all() {
    for (auto& entry : live_) dissolve(*entry.second);
    live_.clear();
}

void BucketExchanges::carry(const StateEntries& entries) {
    for (const auto& entry : entries) {
        const std::string owner = state_owner(entry.first);
        if (owner.empty()) throw UsageError("state entry '" + entry.first + "': names no parameter");
        carried_[owner].push_back(entry);
    }
}

StateEntries BucketExchanges::take_carried(const std::string& parameter) {
    auto it = carried_.find(parameter);
    if (it == carried_.end()) return {};
    StateEntries out = std::move(it->second);
    carried_.erase(it);
    return out;
}

void BucketExchanges::drop_carried() { carried_.clear(); }

StateEntries BucketExchanges::own_state() const {
    if (live_.empty()) return own_;
    StateEntries out;
    for (auto& entry : live_.begin()->second->state())
        if (state_owner(entry.first).empty()) out.push_back(std::move(entry));
    return out;
}

StateEntries BucketExchanges::parameter_state() const {
    StateEntries out;
    for (const auto& entry : live_) {
        entry.second->settle();
        for (auto& e : entry.second->state())
            if (!state_owner(e.first).empty()) out.push_back(std::move(e));
    }
    for (const auto& entry : carried_) out.insert(out.end(), entry.second.begin(), entry.second.end());
    return out;
}

void BucketExchanges::load_state(const StateEntries& state, const StateEntries& own) {
    std::map<std::string, GradientExchange*> exchange_of;
    for (const auto& entry : live_)
        for (const auto& t : entry.second->tensors()) exchange_of[t.name] = entry.second.get();
    std::map<GradientExchange*, StateEntries> given;
    StateEntries rest;
    for (const auto& entry : state) {
        auto it = exchange_of.find(state_owner(entry.first));
        if (it == exchange_of.end())
            rest.push_back(entry);
        else
            given[it->second].push_back(entry);
    }
    own_ = own;
    for (const auto& entry : live_) {
        StateEntries entries = own;
        auto mine = given.find(entry.second.get());
        if (mine != given.end()) entries.insert(entries.end(), mine->second.begin(), mine->second.end());
        entry.second->load_state(entries);
    }
    carry(rest);
}

void BucketExchanges::set_epoch(std::int64_t epoch) {
    for (auto& entry : live_) entry.second->set_epoch(epoch);
}

void BucketExchanges::settle() {
    for (auto& entry : live_) entry.second->settle();
}

std::int64_t BucketExchanges::bytes_sent() const {
    std::int64_t bytes = dissolved_bytes_;
    for (const auto& entry : live_) bytes += entry.second->total().bytes;
    return bytes;
}

}  // namespace acc::exchange
