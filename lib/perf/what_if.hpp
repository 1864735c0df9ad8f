// What-if pricing: a plan (each step's collectives, codec and compute times) priced on
// another link and world size, against uncompressed DDP on the same, and the bandwidths
// where the two take equal time (compression's break-even). Formulas: docs/metrics.md,
// "What-if". No LibTorch here.
#pragma once

#include "perf/model.hpp"

#include <vector>

namespace acc::perf {

/// One step of a plan as the performance model prices it.
struct PlanStep {
    /// Every parameter uncompressed: the step is DDP's (predict_ddp over tensor_bytes).
    /// Otherwise it is the compressed exchange's (predict_compressed over transfers).
    bool uncompressed = true;
    std::vector<double> tensor_bytes;  ///< bytes of each tensor's gradient, model order (uncompressed steps)
    std::vector<Transfer> transfers;   ///< the exchange's collectives, bytes each worker hands in (compressed steps)
    double encode_seconds = 0;         ///< per step (compressed steps)
    double decode_seconds = 0;         ///< per step (compressed steps)
};

/// `steps` steps of one plan (a run's epochs at one set of levels).
struct PlanPart {
    double steps = 0;
    PlanStep step;
};

/// A link: the ring networks allreduces and allgathers run on.
struct Link {
    Network allreduce;
    Network allgather;
    /// The link with allreduce bandwidth `bandwidth` (bytes/s) and allgather's scaled by
    /// the same factor; latencies kept, measured times dropped (they hold at one bandwidth).
    Link at_bandwidth(double bandwidth) const;
};

/// Seconds of one step on `world` workers, compute.seconds being the compute per step.
double step_seconds(const PlanStep& step, const Link& link, int world, const Compute& compute);

/// Seconds of all parts: the sum of steps x step_seconds.
double plan_seconds(const std::vector<PlanPart>& plan, const Link& link, int world, const Compute& compute);

/// The same steps uncompressed: every part's step DDP's over `tensor_bytes` (bytes per tensor).
std::vector<PlanPart> uncompressed_plan(const std::vector<PlanPart>& plan, const std::vector<double>& tensor_bytes);

/// Where a plan and a baseline take equal time as the link's allreduce bandwidth varies.
struct BreakEven {
    std::vector<double> bandwidths;  ///< bytes/s, ascending: each bandwidth where the times cross
    /// The plan is faster than the baseline at the lowest bandwidth searched; it changes
    /// sides at each crossing. No crossing: it pays everywhere (true) or nowhere (false).
    bool pays_at_low_bandwidth = false;
};

/// The crossings of plan_seconds(plan) and plan_seconds(baseline) between `low` and
/// `high` bytes/s: a scan of 40 log-spaced bandwidths per decade for a change of sign
/// of their difference, each change then bisected on log(bandwidth) to a relative
/// width of 1e-12. "Faster" is strictly faster. Throws acc::UsageError unless
/// 0 < low < high, both finite.
BreakEven break_even(const std::vector<PlanPart>& plan, const std::vector<PlanPart>& baseline, const Link& link,
                     int world, const Compute& compute, double low = 1e3, double high = 1e14);

}  // namespace acc::perf
