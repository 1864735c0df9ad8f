#include "plan/auto_plan.hpp"

#include "base/error.hpp"
#include "compress/codecs.hpp"
#include "io/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace acc::plan {
namespace {

using compress::Channel;
using compress::Spec;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

perf::Collective kind_of(Channel channel) {
    return channel == Channel::gather ? perf::Collective::allgather : perf::Collective::allreduce;
}

// What one level sends on one parameter, and through which channel.
struct Wire {
    double bytes = 0;
    Channel channel = Channel::fp32_sum;
};

// Every candidate's wire on every parameter (a vector's only level is none).
std::vector<std::vector<Wire>> wires_of(const AutoInputs& in) {
    compress::CodecOptions options;
    options.world = std::max(1, in.link.world);
    std::vector<std::vector<Wire>> out(in.candidates.size(), std::vector<Wire>(in.parameters.size()));
    for (size_t c = 0; c < in.candidates.size(); ++c)
        for (size_t p = 0; p < in.parameters.size(); ++p) {
            const Spec& spec = in.parameters[p].is_matrix() ? in.candidates[c] : compress::no_compression();
            const auto& shape = in.parameters[p].shape;
            out[c][p] = {static_cast<double>(compress::wire_bytes(spec, shape)),
                         compress::make_codec(spec, shape, options)->channel()};
        }
    return out;
}

const perf::Network& net_of(const Link& link, perf::Collective kind) {
    return kind == perf::Collective::allgather ? link.allgather : link.allreduce;
}

// Bandwidth time a compressed step's exchange gets free: the link's burst, as far as
// the bucket refills during the step's compute.
double free_seconds(const AutoInputs& in) { return std::max(0.0, std::min(in.link.burst_seconds, in.compute.seconds)); }

// The bandwidth part of sending `bytes` through `channel`: additive over parameters.
double bandwidth_seconds(const Link& link, Channel channel, double bytes) {
    const perf::Collective kind = kind_of(channel);
    return perf::collective_seconds(net_of(link, kind), kind, link.world, bytes) -
           perf::collective_seconds(net_of(link, kind), kind, link.world, 0);
}

double codec_seconds(const AutoInputs& in, size_t c, size_t p) {
    if (in.codec_seconds.empty() || !in.parameters[p].is_matrix()) return 0;
    return in.codec_seconds[c][p];
}

size_t index_of(const AutoInputs& in, const Spec& spec, const char* option) {
    const auto it = std::find(in.candidates.begin(), in.candidates.end(), spec);
    if (it == in.candidates.end())
        throw UsageError(std::string(option) + ": " + spec.text() + " must be one of the candidate levels");
    return static_cast<size_t>(it - in.candidates.begin());
}

void check_inputs(const AutoInputs& in) {
    const size_t P = in.parameters.size(), C = in.candidates.size();
    if (P == 0) throw Error("automatic plan: the model has no parameters");
    if (in.critical.size() != P) throw Error("automatic plan: one regime per parameter is needed");
    if (!in.profile.empty() && in.profile.size() != P) throw Error("automatic plan: one profile per parameter is needed");
    if (!in.codec_seconds.empty()) {
        if (in.codec_seconds.size() != C) throw Error("automatic plan: codec times for every candidate are needed");
        for (const auto& row : in.codec_seconds) {
            if (row.size() != P) throw Error("automatic plan: codec times for every parameter are needed");
            for (double s : row)
                if (!std::isfinite(s) || s < 0) throw Error("automatic plan: a codec time is negative or not finite");
        }
    }
    if (std::find(in.candidates.begin(), in.candidates.end(), compress::no_compression()) == in.candidates.end())
        throw UsageError("--levels: none must be one of the candidate levels");
    index_of(in, in.low, "--low");
    index_of(in, in.high, "--high");
    if (in.link.world < 1) throw Error("automatic plan: the link has no ranks");
    if (!std::isfinite(in.link.burst_seconds) || in.link.burst_seconds < 0)
        throw Error("automatic plan: the link's burst is negative or not finite");
    if (!std::isfinite(in.compute.seconds) || in.compute.seconds < 0)
        throw Error("automatic plan: the compute time is negative or not finite");
    if (!std::isfinite(in.margin) || in.margin < 0 || in.margin >= 1)
        throw UsageError("--auto-margin: must be in [0, 1)");
    if (!std::isfinite(in.uncompressed_overhead) || !std::isfinite(in.compressed_overhead))
        throw Error("automatic plan: an overhead is not finite");
}

}  // namespace

double residual_norm(const Spec& spec, const std::vector<std::int64_t>& shape, const LayerProfile& profile) {
    switch (spec.info().residual_model) {
    case compress::ResidualModel::exact: return 0;
    case compress::ResidualModel::singular_values: {
        const auto rank = static_cast<std::int64_t>(spec.parameter);
        if (!compress::powersgd_compresses(shape, rank)) return 0;  // sent whole
        return regime::powersgd_residual(profile.spectrum, rank);
    }
    case compress::ResidualModel::topk_tail: return regime::topk_residual(profile.norm, profile.tail, spec.parameter);
    case compress::ResidualModel::unknown: break;
    }
    throw UsageError(spec.text() + " cannot be planned: no error model for it");
}

const std::vector<std::string>& auto_reason_names() { return io::auto_reason_names(); }

void check_auto_options(double margin, double drift, const std::string& margin_option,
                        const std::string& drift_option) {
    if (!(margin >= 0 && margin < 1)) throw UsageError(margin_option + ": must be in [0, 1)");
    if (!(drift > 0) || !std::isfinite(drift)) throw UsageError(drift_option + ": must be a number > 0");
}

const char* auto_reason_name(AutoReason reason) {
    const auto i = static_cast<size_t>(reason);
    return i < auto_reason_names().size() ? auto_reason_names()[i].c_str() : "?";
}

namespace {

double seconds_of(const AutoInputs& in, const std::vector<std::vector<Wire>>& wires,
                  const std::vector<std::int32_t>& level) {
    const size_t none = index_of(in, compress::no_compression(), "--levels");
    const size_t P = in.parameters.size();
    if (level.size() != P) throw Error("automatic plan: one level per parameter is needed");
    bool all_none = true;
    for (size_t p = 0; p < P; ++p)
        if (in.parameters[p].is_matrix() && static_cast<size_t>(level[p]) != none) all_none = false;
    if (all_none) {
        std::vector<double> bytes;
        for (const auto& p : in.parameters) bytes.push_back(4.0 * static_cast<double>(p.numel()));
        return perf::predict_ddp(in.link.allreduce, in.link.world, bytes, in.compute).iteration_seconds;
    }
    std::map<Channel, double> by_channel;
    double codecs = 0;
    for (size_t p = 0; p < P; ++p) {
        const auto c = static_cast<size_t>(level[p]);
        if (c >= in.candidates.size()) throw Error("automatic plan: a level index is out of range");
        by_channel[wires[c][p].channel] += wires[c][p].bytes;
        codecs += codec_seconds(in, c, p);
    }
    std::vector<perf::Transfer> transfers;
    double bandwidth = 0;
    for (const auto& [channel, bytes] : by_channel) {
        bandwidth += bandwidth_seconds(in.link, channel, bytes);
        if (channel == Channel::low_rank) {
            // Two rounds, P then Q: the alpha-beta cost is linear, so how the bytes split does not matter.
            transfers.push_back({perf::Collective::allreduce, bytes / 2});
            transfers.push_back({perf::Collective::allreduce, bytes / 2});
        } else {
            transfers.push_back({kind_of(channel), bytes});
        }
    }
    return perf::predict_compressed(in.link.allreduce, in.link.allgather, in.link.world, transfers, codecs, 0,
                                    in.compute)
               .iteration_seconds -
           std::min(free_seconds(in), bandwidth);
}

// Whether a plan compresses any matrix (else it is uncompressed, the guard's to weigh).
bool compresses(const std::vector<size_t>& matrices, const std::vector<std::int32_t>& level, std::int32_t none) {
    return std::any_of(matrices.begin(), matrices.end(), [&](size_t p) { return level[p] != none; });
}

// The summed error of a plan's levels on the matrices (`all`: per matrix and candidate).
double summed_error(const std::vector<std::vector<regime::Candidate>>& all, const std::vector<size_t>& matrices,
                    const std::vector<std::int32_t>& level) {
    double error = 0;
    for (size_t i = 0; i < matrices.size(); ++i) error += all[i][static_cast<size_t>(level[matrices[i]])].error;
    return error;
}

// A plan and its predicted seconds a step (infinity: no compressed plan).
struct Timed {
    std::vector<std::int32_t> level;
    double seconds = kInfinity;
};

// The latency part of sending through `channel` (PowerSGD's two rounds pay it twice).
double latency_seconds(const Link& link, Channel channel) {
    const perf::Collective kind = kind_of(channel);
    return perf::collective_seconds(net_of(link, kind), kind, link.world, 0) * (channel == Channel::low_rank ? 2 : 1);
}

// Latencies are paid once per channel in use: the dynamic programs run once per set
// of channels, each candidate allowed only where its channel is in the set. The set
// a plan uses exactly prices it exactly; a larger set only overprices.
struct ChannelSets {
    std::vector<Channel> channels;  // every channel some candidate uses on some matrix
    const std::vector<std::vector<Wire>>& wires;
    const std::vector<size_t>& matrices;
    size_t candidates;

    ChannelSets(const AutoInputs& in, const std::vector<std::vector<Wire>>& w, const std::vector<size_t>& m)
        : wires(w), matrices(m), candidates(in.candidates.size()) {
        for (size_t c = 0; c < candidates; ++c)
            for (size_t p : matrices)
                if (std::find(channels.begin(), channels.end(), wires[c][p].channel) == channels.end())
                    channels.push_back(wires[c][p].channel);
    }
    std::uint32_t end() const { return 1u << channels.size(); }
    bool has(std::uint32_t mask, Channel channel) const {
        const auto k = static_cast<size_t>(std::find(channels.begin(), channels.end(), channel) - channels.begin());
        return k < channels.size() && (mask & (1u << k));
    }
    // Per matrix, the candidates (indices) whose channel is in the set; empty: none
    // for some matrix.
    std::vector<std::vector<std::int32_t>> candidates_in(std::uint32_t mask) const {
        std::vector<std::vector<std::int32_t>> index(matrices.size());
        for (size_t i = 0; i < matrices.size(); ++i) {
            for (size_t c = 0; c < candidates; ++c)
                if (has(mask, wires[c][matrices[i]].channel)) index[i].push_back(static_cast<std::int32_t>(c));
            if (index[i].empty()) return {};
        }
        return index;
    }
};

// The dynamic program of regime::plan_levels on the candidates of one set, each as
// `as_candidate` gives it; empty where it finds no plan within `limit`.
template <typename Transform>
std::vector<std::int32_t> plan_in_set(const AutoInputs& in, const std::vector<size_t>& matrices,
                                      const std::vector<std::vector<std::int32_t>>& index,
                                      const std::vector<std::vector<regime::Candidate>>& all, double limit,
                                      std::int32_t none, Transform as_candidate) {
    std::vector<std::vector<regime::Candidate>> layers(matrices.size());
    for (size_t i = 0; i < matrices.size(); ++i)
        for (std::int32_t c : index[i]) layers[i].push_back(as_candidate(all[i][static_cast<size_t>(c)]));
    const regime::LevelPlan lp = regime::plan_levels(layers, limit, in.bins);
    if (!lp.feasible()) return {};
    std::vector<std::int32_t> chosen(in.parameters.size(), none);
    for (size_t i = 0; i < matrices.size(); ++i) chosen[matrices[i]] = index[i][static_cast<size_t>(lp.choice[i])];
    return chosen;
}

// The fastest plan that compresses something and whose summed error is within
// `budget`, starting from `start` (Accordion's levels, within it by construction).
Timed fastest_within_budget(const AutoInputs& in, const std::vector<std::vector<Wire>>& wires,
                            const std::vector<size_t>& matrices, const ChannelSets& sets,
                            const std::vector<std::vector<regime::Candidate>>& all, double budget, std::int32_t none,
                            const std::vector<std::int32_t>& start) {
    Timed best{start, compresses(matrices, start, none) ? seconds_of(in, wires, start) : kInfinity};
    auto consider = [&](const std::vector<std::int32_t>& chosen) {
        const double seconds = seconds_of(in, wires, chosen);
        if (seconds > best.seconds) return;
        best = {chosen, seconds};
    };
    bool cheapest_is_none = false;
    for (std::uint32_t mask = 1; mask < sets.end(); ++mask) {
        const auto index = sets.candidates_in(mask);
        if (index.empty()) continue;
        const auto chosen = plan_in_set(in, matrices, index, all, budget, none, [](const regime::Candidate& c) { return c; });
        if (chosen.empty()) continue;
        if (!compresses(matrices, chosen, none)) {
            cheapest_is_none = true;
            continue;
        }
        consider(chosen);
    }
    // Where sending everything whole is the cheapest plan, every level alone within
    // the budget costs at least none on its parameter, so the fastest plan that
    // compresses anything compresses one parameter: each is tried.
    if (cheapest_is_none)
        for (size_t i = 0; i < matrices.size(); ++i)
            for (size_t c = 0; c < all[i].size(); ++c) {
                if (static_cast<std::int32_t>(c) == none || all[i][c].error > budget) continue;
                std::vector<std::int32_t> chosen(in.parameters.size(), none);
                chosen[matrices[i]] = static_cast<std::int32_t>(c);
                consider(chosen);
            }
    return best;
}

// The plan of least summed error that compresses something and is predicted to take
// at most `bound` seconds a step; empty: none found. Per set of channels, the dynamic
// program with time and error swapped: least error within the seconds the set leaves
// once compute, its latencies and the vectors' bandwidth are paid, and the burst's free
// seconds given back (each plan found is priced exactly before it counts).
Timed least_error_within(const AutoInputs& in, const std::vector<std::vector<Wire>>& wires,
                         const std::vector<size_t>& matrices, const ChannelSets& sets,
                         const std::vector<std::vector<regime::Candidate>>& all, double bound, std::int32_t none) {
    double vectors = in.compute.seconds;
    bool vectors_sent = false;
    for (size_t p = 0; p < in.parameters.size(); ++p)
        if (!in.parameters[p].is_matrix()) {
            vectors += bandwidth_seconds(in.link, Channel::fp32_sum, wires[static_cast<size_t>(none)][p].bytes);
            vectors_sent = true;
        }
    Timed best;
    double best_error = kInfinity;
    for (std::uint32_t mask = 1; mask < sets.end(); ++mask) {
        const auto index = sets.candidates_in(mask);
        if (index.empty()) continue;
        double fixed = vectors;
        for (Channel channel : sets.channels)
            if (sets.has(mask, channel)) fixed += latency_seconds(in.link, channel);
        if (vectors_sent && !sets.has(mask, Channel::fp32_sum)) fixed += latency_seconds(in.link, Channel::fp32_sum);
        fixed -= free_seconds(in);
        if (!(bound - fixed >= 0)) continue;
        const auto chosen = plan_in_set(in, matrices, index, all, bound - fixed, none,
                                        [](const regime::Candidate& c) { return regime::Candidate{c.error, c.cost}; });
        if (chosen.empty() || !compresses(matrices, chosen, none)) continue;
        const double seconds = seconds_of(in, wires, chosen);
        if (seconds > bound) continue;
        const double error = summed_error(all, matrices, chosen);
        if (error < best_error || (error == best_error && seconds < best.seconds)) {
            best = {chosen, seconds};
            best_error = error;
        }
    }
    return best;
}

}  // namespace

double step_seconds(const AutoInputs& in, const std::vector<std::int32_t>& level) {
    check_inputs(in);
    return seconds_of(in, wires_of(in), level);
}

AutoPlan plan_auto(const AutoInputs& in) {
    check_inputs(in);
    for (const Spec& spec : in.candidates)
        if (spec.info().residual_model == compress::ResidualModel::unknown)
            throw UsageError("--levels: " + spec.text() + " cannot be planned: no error model for it");
    const size_t P = in.parameters.size(), C = in.candidates.size();
    const auto none = static_cast<std::int32_t>(index_of(in, compress::no_compression(), "--levels"));
    const auto low = static_cast<std::int32_t>(index_of(in, in.low, "--low"));
    const auto high = static_cast<std::int32_t>(index_of(in, in.high, "--high"));
    const auto wires = wires_of(in);

    AutoPlan out;
    std::vector<std::int32_t> uniform(P, none);
    std::vector<size_t> matrices;
    for (size_t p = 0; p < P; ++p)
        if (in.parameters[p].is_matrix()) {
            matrices.push_back(p);
            uniform[p] = in.critical[p] ? low : high;
        }
    out.uncompressed_seconds = seconds_of(in, wires, std::vector<std::int32_t>(P, none));
    // Without a profile: Accordion's levels. With one: the fastest plan within the
    // budget, and the plan of least error within the margin of it.
    Timed fastest{uniform, compresses(matrices, uniform, none) ? seconds_of(in, wires, uniform) : kInfinity};
    Timed accurate = fastest;
    const bool profiled = !in.profile.empty() && !matrices.empty();
    // Per matrix and candidate: the error, and the cost that adds up (codec and bandwidth).
    std::vector<std::vector<regime::Candidate>> all(matrices.size());
    if (profiled) {
        std::vector<std::vector<regime::Candidate>> uniform_layers;
        for (size_t i = 0; i < matrices.size(); ++i) {
            const size_t p = matrices[i];
            for (size_t c = 0; c < C; ++c) {
                const double error = regime::layer_error(
                    residual_norm(in.candidates[c], in.parameters[p].shape, in.profile[p]), in.error);
                all[i].push_back({codec_seconds(in, c, p) + bandwidth_seconds(in.link, wires[c][p].channel,
                                                                              wires[c][p].bytes),
                                  error});
            }
            uniform_layers.push_back({all[i][static_cast<size_t>(uniform[p])]});
        }
        out.budget = regime::uniform_budget(uniform_layers, std::vector<std::int64_t>(matrices.size(), 0), 1.0);
        const ChannelSets sets(in, wires, matrices);
        fastest = fastest_within_budget(in, wires, matrices, sets, all, out.budget, none, uniform);
        accurate = fastest;
        if (std::isfinite(fastest.seconds)) {
            const Timed least =
                least_error_within(in, wires, matrices, sets, all, fastest.seconds / (1 - in.margin), none);
            if (!least.level.empty() &&
                summed_error(all, matrices, least.level) < summed_error(all, matrices, fastest.level))
                accurate = least;
        }
    }
    // An overhead measured on another plan (or link) never takes a prediction below half the model's own.
    auto with_overhead = [](double modelled, double overhead) { return modelled + std::max(overhead, -0.5 * modelled); };
    out.uncompressed_seconds = with_overhead(out.uncompressed_seconds, in.uncompressed_overhead);
    auto pays = [&](double modelled) {
        const double seconds = with_overhead(modelled, in.compressed_overhead);
        return std::isfinite(seconds) && seconds < (1 - in.margin) * out.uncompressed_seconds;
    };
    out.compressed_seconds = with_overhead(fastest.seconds, in.compressed_overhead);
    out.pays = pays(fastest.seconds);
    // The plan of least error, unless it would turn the guard where the fastest does not.
    const bool take_accurate = out.pays && accurate.level != fastest.level && pays(accurate.seconds);
    out.reason.assign(P, AutoReason::vector);
    if (!out.pays) {
        out.level.assign(P, none);
        for (size_t p : matrices) out.reason[p] = AutoReason::does_not_pay;
        out.seconds = out.uncompressed_seconds;
        return out;
    }
    const Timed& chosen = take_accurate ? accurate : fastest;
    out.level = chosen.level;
    out.seconds = with_overhead(chosen.seconds, in.compressed_overhead);
    if (profiled) out.error = summed_error(all, matrices, out.level);
    for (size_t i = 0; i < matrices.size(); ++i) {
        const size_t p = matrices[i];
        if (!profiled) {
            out.reason[p] = AutoReason::regime;
            continue;
        }
        const auto& level = all[i][static_cast<size_t>(out.level[p])];
        double cheapest = kInfinity;
        for (const auto& candidate : all[i]) cheapest = std::min(cheapest, candidate.cost);
        out.reason[p] = level.cost <= cheapest ? AutoReason::pays
                        : take_accurate && level.error < all[i][static_cast<size_t>(fastest.level[p])].error
                            ? AutoReason::accuracy
                            : AutoReason::budget;
    }
    return out;
}

double measured_overhead(const AutoInputs& inputs, const std::vector<std::int32_t>& level, double measured_seconds) {
    const double modelled = step_seconds(inputs, level);
    return std::max(measured_seconds - modelled, -0.5 * modelled);
}

bool link_sizes_enough(const std::vector<double>& seconds, bool at_largest) {
    const size_t n = seconds.size();
    if (n < 2) return false;
    return at_largest || (seconds[n - 1] >= kLongLinkCall && seconds[n - 2] >= kLongLinkCall / 4);
}

bool prediction_drifted(double predicted_seconds, double measured_seconds, double drift) {
    if (!std::isfinite(predicted_seconds) || !std::isfinite(measured_seconds) || predicted_seconds <= 0) return true;
    return std::abs(measured_seconds - predicted_seconds) > drift * predicted_seconds;
}

}  // namespace acc::plan
