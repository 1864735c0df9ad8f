// What a gradient exchange did over some steps, for the metrics file's epoch rows
// (the trainer's hooks: exchange::BucketSync, exchange::GravacSync; the Python package's hook).
#pragma once

#include <cstdint>

namespace acc::exchange {

/// What the exchange did over some steps (this worker).
struct ExchangeTotals {
    std::int64_t steps = 0;
    std::int64_t bytes = 0;            ///< handed to collectives (docs/metrics.md, "Data sent")
    double encode_seconds = 0;         ///< error feedback and encoding
    double decode_seconds = 0;         ///< turning what came back into averaged gradients
    double communication_seconds = 0;  ///< issuing and waiting for collectives, not hidden by computation
    std::int64_t early_launches = 0;   ///< buckets allreduced while the backward pass still ran (the bucket reducer)
};

}  // namespace acc::exchange
