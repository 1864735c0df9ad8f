// The alpha-beta model of a collective, t(S) = alpha + S / B, fitted by
// least squares over a sweep of message sizes, and the bandwidths nccl-tests
// reports (algbw, busbw). Definitions: docs/metrics.md.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace acc::perf {

enum class Collective { allreduce, allgather, broadcast, reduce_scatter };

/// What the toolkit knows of a collective without running it: one entry per
/// collective in collective_table(), which every name list, size, bandwidth
/// and cost below is read from (comm-profile adds how to run and check it).
struct CollectiveInfo {
    Collective kind;
    const char* name;    ///< as --collectives and files spell it
    const char* op;      ///< the reduction reports name: "sum" or "none"
    const char* detail;  ///< comm-profile's table title after the name, e.g. "sum, in place"
    /// nccl-tests' size S counts every rank's part (allgather's output, reduce_scatter's
    /// input): S = count * 4 * world size; otherwise S = count * 4.
    bool size_counts_ranks;
    /// nccl-tests' bus-bandwidth factor for n ranks: busbw = algbw * factor.
    double (*bus_factor)(double n);
    /// The ring algorithm's latency terms per peer: time = steps * (w - 1) * alpha + ...
    int ring_steps;
    /// ... + ring_bytes(w) * bytes / bandwidth, bytes being what each worker hands in.
    double (*ring_bytes)(double w);
};

/// Every collective, in the enum's order.
const std::vector<CollectiveInfo>& collective_table();
const CollectiveInfo& collective_info(Collective collective);

/// "allreduce", "allgather", "broadcast", "reduce_scatter".
const char* collective_name(Collective collective);
/// The inverse of collective_name; throws acc::UsageError listing the valid names.
Collective parse_collective(const std::string& name);
/// All collectives, in the order above.
std::vector<Collective> all_collectives();

/// nccl-tests' bus-bandwidth factor for `world_size` ranks: busbw = algbw * factor.
/// allreduce 2(n-1)/n, allgather and reduce_scatter (n-1)/n, broadcast 1.
double bus_factor(Collective collective, int world_size);

/// Algorithm bandwidth in bytes/s: the collective's size S (bytes) over its time (seconds).
double algbw(double bytes, double seconds);

/// t(S) = alpha + S / bandwidth.
struct AlphaBetaFit {
    double alpha = 0;                  ///< seconds: the time of an empty message (latency)
    double bandwidth = 0;              ///< bytes/s; +infinity when the time does not grow with the size
    double r2 = 0;                     ///< weighted coefficient of determination (1 is a perfect fit)
    double rms_relative_residual = 0;  ///< sqrt(mean(((t - fit) / t)^2))
    double max_relative_residual = 0;  ///< max |t - fit| / t
    std::size_t points = 0;            ///< sizes the bandwidth (and, without a burst, alpha) was fitted over
    /// fit_past_burst: sizes below the burst's end whose times gave alpha (0: alpha from the fit)
    std::size_t latency_points = 0;

    /// Predicted time in seconds of a message of `bytes`.
    double predict(double bytes) const;
};

/// Fits t = alpha + S / B to (bytes[i], seconds[i]) by weighted least squares
/// with weights 1 / t^2, that is minimizing the squared *relative* residuals,
/// so that small messages count as much as large ones. alpha >= 0 and B > 0
/// are enforced: when the unconstrained optimum breaks one, the fit is redone
/// on the boundary. Throws acc::Error unless there are at least two distinct
/// sizes, sizes are finite and >= 0 and times are finite and > 0.
AlphaBetaFit fit_alpha_beta(const std::vector<double>& bytes, const std::vector<double>& seconds);

/// The fit of a link that lets a burst through faster than the rate it sustains (a
/// token bucket, such as tc's tbf): its smaller messages say nothing of the bandwidth
/// and fool fit_alpha_beta into a high bandwidth and a latency of 0. The bandwidth is
/// the slope of a weighted line over the sizes >= `from_bytes` alone (at least two; its
/// intercept may be negative, the burst's bytes having gone free); alpha, the time no
/// message avoids, is the median over the smaller sizes (which the burst lets through
/// at the wire's speed) of their `latency_seconds` (empty: of `seconds`), or the fit's
/// own alpha when there are none. The residuals are those of the sizes >= `from_bytes`.
/// from_bytes <= the smallest size: fit_alpha_beta. Throws acc::Error as fit_alpha_beta
/// does, when fewer than two sizes are >= from_bytes, and when `latency_seconds` is
/// neither empty nor one finite time > 0 per size.
///
/// comm-profile passes each size's median time as `seconds` and its mean as
/// `latency_seconds`: a small call's time can be bimodal (most calls fast, some ten
/// times slower), where the median lands on one mode or the other from one
/// measurement to the next while a step's exchange, a sum of calls, pays the mean.
AlphaBetaFit fit_past_burst(const std::vector<double>& bytes, const std::vector<double>& seconds, double from_bytes,
                            const std::vector<double>& latency_seconds = {});

/// The largest size whose algbw exceeds `factor` times that of the largest size, or 0:
/// a sign of a burst (a token bucket) the bandwidth fit should start past.
double burst_end(const std::vector<double>& bytes, const std::vector<double>& seconds, double factor = 1.25);

}  // namespace acc::perf
