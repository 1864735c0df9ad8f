// Iteration-time model: does gradient compression pay on this network at this scale?
//
// Collective costs follow the alpha-beta model of ring algorithms (Thakur,
// Rabenseifner and Gropp), iteration times the two schedules data-parallel SGD
// runs: uncompressed buckets allreduced while the backward pass goes on (PyTorch
// DDP), and a compressed exchange after the backward pass. Formulas:
// docs/metrics.md, "Performance model". No LibTorch here.
#pragma once

#include "perf/fit.hpp"

#include <cstdint>
#include <vector>

namespace acc::perf {

/// One collective's times as comm-profile measured them, at one world size.
struct MeasuredTimes {
    Collective kind = Collective::allreduce;
    int world = 0;                ///< ranks they were measured on
    std::vector<double> sizes;    ///< the collective's size S as nccl-tests counts it, bytes, increasing
    std::vector<double> seconds;  ///< time per call at each size
};

/// A network in the alpha-beta model of ring collectives.
struct Network {
    Network(double alpha_ = 0, double bandwidth_ = 0) : alpha(alpha_), bandwidth(bandwidth_) {}
    double alpha = 0;      ///< latency of one ring step, seconds
    double bandwidth = 0;  ///< bytes per second each link carries (a ring's bus bandwidth)
    /// Measured times that replace the model between two measured sizes of their
    /// collective at their world size (linear in the size between them); none: empty sizes.
    MeasuredTimes measured;
};

/// Ring cost in seconds of `kind` on `world` workers, with `bytes` as each worker hands
/// them in (Collectives::traffic): allreduce 2(W-1) alpha + 2 (W-1)/W bytes / B,
/// allgather (W-1) alpha + (W-1) bytes / B, reduce-scatter (W-1) alpha + (W-1)/W bytes / B,
/// broadcast (W-1) alpha + bytes / B. 0 on one worker. Where net.measured holds this
/// collective at this world size and its size S lies from the first measured size to
/// the last, the time interpolated between the two measured sizes around S instead.
double collective_seconds(const Network& net, Collective kind, int world, double bytes);

/// The times `kind` took at the sizes of `sizes` from `from_bytes` on (every size when 0),
/// on `world` ranks: what Network::measured holds. Throws acc::Error for sizes and times
/// of different lengths, sizes not increasing, or times not finite and > 0.
MeasuredTimes measured_times(Collective kind, int world, const std::vector<double>& sizes,
                             const std::vector<double>& seconds, double from_bytes);
double allreduce_seconds(const Network& net, int world, double bytes);
double allgather_seconds(const Network& net, int world, double bytes);

/// The ring network behind a collective's fit t(S) = alpha + S / B measured on `world`
/// workers (comm-profile): alpha per ring step = alpha / steps (2(W-1) for allreduce,
/// W-1 for the others), link bandwidth = B * bus_factor(kind, world). Throws acc::Error
/// for a world of one worker, which says nothing about the network.
Network network_from_fit(Collective kind, int world, double alpha, double bandwidth);

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

/// One collective of a compressed exchange: its kind and the bytes each worker hands in.
struct Transfer {
    Collective kind = Collective::allreduce;
    double bytes = 0;
};

/// A compressed exchange after the backward pass: compute + encode + its collectives one
/// after another + decode (compression hides nothing behind the backward pass).
/// Allgathers cost on `allgather_net`, every other collective on `net`.
Prediction predict_compressed(const Network& net, const Network& allgather_net, int world,
                              const std::vector<Transfer>& transfers, double encode_seconds, double decode_seconds,
                              const Compute& compute);

}  // namespace acc::perf
