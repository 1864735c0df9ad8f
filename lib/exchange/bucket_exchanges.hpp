// The exchanges of one model's buckets: a GradientExchange per bucket (a set of
// named parameters), and each parameter's compressor state (error memory,
// PowerSGD's Q, DGC's momentum) carried by name from the exchange of one bucket
// to that of the next bucket it turns up in, when the buckets are regrouped: by
// train-dist's trainer when the set of compressed parameters changes, by DDP when
// it rebuilds its buckets after the first step. The trainer's hook (BucketSync)
// and the Python package's DDP communication hook are thin adapters over it, as
// c10d's Reducer and a comm hook are over their buckets.
//
// A state entry belongs to the parameter its name starts with, up to the last
// '/' ("fc1.weight/error" to "fc1.weight"); the exchange's own entries
// ("exchange/step", "exchange/powersgd_rng") belong to no parameter (state_owner).
#pragma once

#include "exchange/gradient_exchange.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::exchange {

/// Named state tensors, as GradientExchange::state() gives them.
using StateEntries = std::vector<std::pair<std::string, at::Tensor>>;

/// The parameter a state entry belongs to ("fc1.weight/error" -> "fc1.weight"); empty for
/// the exchange's own entries ("exchange/step") and for a name without '/'.
std::string state_owner(const std::string& entry);

class BucketExchanges {
public:
    BucketExchanges();
    ~BucketExchanges();
    BucketExchanges(const BucketExchanges&) = delete;
    BucketExchanges& operator=(const BucketExchanges&) = delete;

    /// The exchange over exactly these parameters, in this order; null if there is none.
    GradientExchange* find(const std::vector<std::string>& names) const;
    /// A new exchange over `tensors` at `levels`. Every exchange holding one of its
    /// parameters is dissolved first (acc::UsageError if one is in the middle of a
    /// step), and the new one starts with the state its parameters carry and the
    /// exchange's own entries `own`. Collective, as GradientExchange's constructor.
    GradientExchange& make(std::vector<compress::TensorInfo> tensors, std::vector<compress::Spec> levels,
                           comm::Collectives& comm, const ExchangeOptions& options, const StateEntries& own = {});
    /// Dissolves every exchange: their parameters' state is carried, their own entries
    /// kept (own_state()).
    void dissolve_all();
    bool empty() const { return live_.empty(); }

    /// Carries entries to the next exchange their parameters turn up in;
    /// acc::UsageError for an entry that names no parameter.
    void carry(const StateEntries& entries);
    /// The entries a parameter carries, taken out.
    StateEntries take_carried(const std::string& parameter);
    void drop_carried();

    /// The exchanges' own entries: a live exchange's (all share them), or, with none
    /// live, those of the last dissolved or loaded.
    StateEntries own_state() const;
    /// Every parameter's state: the live exchanges' (settled first) and the carried.
    StateEntries parameter_state() const;
    /// Gives each live exchange its parameters' entries of `state` and the own entries
    /// `own` (kept for own_state()); the entries of parameters in no live exchange are carried.
    void load_state(const StateEntries& state, const StateEntries& own);

    void set_epoch(std::int64_t epoch);
    void settle();
    /// Bytes handed to collectives by every exchange, the dissolved ones included.
    std::int64_t bytes_sent() const;

private:
    void dissolve(GradientExchange& exchange);

    // By the parameters' names, each followed by '\n'.
    std::map<std::string, std::unique_ptr<GradientExchange>> live_;
    std::map<std::string, StateEntries> carried_;  // by parameter: state waiting for its next exchange
    StateEntries own_;
    std::int64_t dissolved_bytes_ = 0;
};

}  // namespace acc::exchange
