// Iteration-time model: does gradient compression pay on this network at this scale?
//
// Collective costs follow the alpha-beta model of ring algorithms (Thakur and
// Rabenseifner), iteration times the two schedules data-parallel SGD runs:
// uncompressed buckets allreduced while the backward pass goes on (PyTorch DDP), and
// a compressed exchange after the backward pass. Formulas: docs/metrics.md,
// "Performance model". No LibTorch here.
#pragma once

#include <cstdint>
#include <vector>

namespace acc::perf {

/// A network in the alpha-beta model.
struct Network {
    double alpha = 0;      ///< latency of one message step, seconds
    double bandwidth = 0;  ///< bytes per second
};

/// Ring allreduce of `bytes` on `world` workers: 2(W-1) alpha + 2 (W-1)/W bytes / bandwidth.
double allreduce_seconds(const Network& net, int world, double bytes);
/// Ring allgather where each worker contributes `bytes`: (W-1) alpha + (W-1) bytes / bandwidth.
double allgather_seconds(const Network& net, int world, double bytes);

/// The compute of one iteration.
struct Compute {
    double seconds = 0;                         ///< forward plus backward pass
    double backward_share = 2.0 / 3.0;          ///< the backward pass's part of it
    double bucket_bytes = 25.0 * 1024 * 1024;   ///< DDP's bucket_cap_mb
    double first_bucket_bytes = 1024.0 * 1024;  ///< DDP's smaller first bucket
};

struct Prediction {
    double iteration_seconds = 0;
    double communication_seconds = 0;  ///< all collectives of one iteration, back to back
    double exposed_seconds = 0;        ///< communication and compression the compute does not hide
};

/// Uncompressed data-parallel SGD as PyTorch DDP runs it: the gradients (bytes per tensor,
/// in model order) become ready in reverse order at a rate proportional to their size
/// during the backward pass, fill buckets, and each full bucket is allreduced as soon
/// as it and the previous bucket are done: f_b = max(f_(b-1), ready_b) + T_AR(bucket_b);
/// the iteration ends at max(compute, f_last).
Prediction predict_ddp(const Network& net, int world, const std::vector<double>& tensor_bytes, const Compute& compute);

enum class Collective { allreduce, allgather };

/// One collective of a compressed exchange: its kind and the bytes each worker hands in.
struct Transfer {
    Collective kind = Collective::allreduce;
    double bytes = 0;
};

/// A compressed exchange after the backward pass: compute + encode + its collectives one
/// after another + decode (compression hides nothing behind the backward pass).
Prediction predict_compressed(const Network& net, int world, const std::vector<Transfer>& transfers,
                              double encode_seconds, double decode_seconds, const Compute& compute);

}  // namespace acc::perf
