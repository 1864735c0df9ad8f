#include "plan/auto_plan.hpp"

#include "base/error.hpp"
#include "compress/codecs.hpp"

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

const std::vector<std::string>& auto_reason_names() {
    static const std::vector<std::string> names = {"pays", "budget", "regime", "does not pay", "vector", "measuring"};
    return names;
}

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
    for (const auto& [channel, bytes] : by_channel) {
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
        .iteration_seconds;
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
    std::vector<AutoReason> reason(P, AutoReason::vector);
    std::vector<size_t> matrices;
    for (size_t p = 0; p < P; ++p)
        if (in.parameters[p].is_matrix()) {
            matrices.push_back(p);
            uniform[p] = in.critical[p] ? low : high;
            reason[p] = AutoReason::regime;
        }
    out.uncompressed_seconds = seconds_of(in, wires, std::vector<std::int32_t>(P, none));
    std::vector<std::int32_t> best = uniform;
    double best_seconds = seconds_of(in, wires, uniform);
    if (std::all_of(matrices.begin(), matrices.end(), [&](size_t p) { return uniform[p] == none; }))
        best_seconds = kInfinity;

    if (!in.profile.empty() && !matrices.empty()) {
        // Per matrix and candidate: the error, and the cost that adds up (codec and bandwidth).
        std::vector<std::vector<regime::Candidate>> all(matrices.size());
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
        // Latencies are paid once per channel in use: one program per set of channels,
        // each candidate allowed only where its channel is in the set. The set the best
        // plan uses exactly prices it exactly; a larger set only overprices.
        std::vector<Channel> channels;
        for (size_t c = 0; c < C; ++c)
            for (size_t p : matrices)
                if (std::find(channels.begin(), channels.end(), wires[c][p].channel) == channels.end())
                    channels.push_back(wires[c][p].channel);
        bool cheapest_is_none = false;
        bool kept_uniform = true;  // Accordion's levels, unless a plan at least as fast is found
        auto consider = [&](const std::vector<std::int32_t>& chosen) {
            const double seconds = seconds_of(in, wires, chosen);
            if (seconds > best_seconds) return;
            best_seconds = seconds;
            best = chosen;
            kept_uniform = false;
        };
        for (std::uint32_t mask = 1; mask < (1u << channels.size()); ++mask) {
            std::vector<std::vector<regime::Candidate>> layers(matrices.size());
            std::vector<std::vector<std::int32_t>> index(matrices.size());
            bool possible = true;
            for (size_t i = 0; i < matrices.size() && possible; ++i) {
                for (size_t c = 0; c < C; ++c) {
                    const auto k = static_cast<size_t>(
                        std::find(channels.begin(), channels.end(), wires[c][matrices[i]].channel) - channels.begin());
                    if (mask & (1u << k)) {
                        layers[i].push_back(all[i][c]);
                        index[i].push_back(static_cast<std::int32_t>(c));
                    }
                }
                possible = !layers[i].empty();
            }
            if (!possible) continue;
            const regime::LevelPlan lp = regime::plan_levels(layers, out.budget, in.bins);
            if (!lp.feasible()) continue;
            std::vector<std::int32_t> chosen(P, none);
            for (size_t i = 0; i < matrices.size(); ++i)
                chosen[matrices[i]] = index[i][static_cast<size_t>(lp.choice[i])];
            if (std::all_of(matrices.begin(), matrices.end(), [&](size_t p) { return chosen[p] == none; })) {
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
                for (size_t c = 0; c < C; ++c) {
                    if (static_cast<std::int32_t>(c) == none || all[i][c].error > out.budget) continue;
                    std::vector<std::int32_t> chosen(P, none);
                    chosen[matrices[i]] = static_cast<std::int32_t>(c);
                    consider(chosen);
                }
        // The budget is spent away from Accordion's levels only where that buys time: a
        // plan other than theirs must be predicted at least the margin faster than theirs
        // (on a link where any compressed plan is bound by compute, a cheaper plan saves
        // nothing measurable and costs accuracy).
        const bool uniform_compresses =
            std::any_of(matrices.begin(), matrices.end(), [&](size_t p) { return uniform[p] != none; });
        const double uniform_seconds = seconds_of(in, wires, uniform);
        if (!kept_uniform && best != uniform && uniform_compresses &&
            !(best_seconds < (1 - in.margin) * uniform_seconds)) {
            best = uniform;
            best_seconds = uniform_seconds;
            kept_uniform = true;
        }
        out.error = 0;
        for (size_t i = 0; i < matrices.size(); ++i) {
            const size_t p = matrices[i];
            const auto& chosen = all[i][static_cast<size_t>(best[p])];
            out.error += chosen.error;
            double fastest = kInfinity;
            for (const auto& candidate : all[i]) fastest = std::min(fastest, candidate.cost);
            reason[p] = chosen.cost <= fastest ? AutoReason::pays
                        : kept_uniform && best[p] == uniform[p] ? AutoReason::regime
                                                : AutoReason::budget;
        }
    }
    // An overhead measured on another plan (or link) never takes a prediction below half the model's own.
    auto with_overhead = [](double modelled, double overhead) { return modelled + std::max(overhead, -0.5 * modelled); };
    out.uncompressed_seconds = with_overhead(out.uncompressed_seconds, in.uncompressed_overhead);
    out.compressed_seconds = with_overhead(best_seconds, in.compressed_overhead);
    best_seconds = out.compressed_seconds;
    out.pays = std::isfinite(best_seconds) && best_seconds < (1 - in.margin) * out.uncompressed_seconds;
    if (out.pays) {
        out.level = best;
        out.reason = reason;
        out.seconds = best_seconds;
    } else {
        out.level.assign(P, none);
        out.reason.assign(P, AutoReason::vector);
        for (size_t p : matrices) out.reason[p] = AutoReason::does_not_pay;
        out.seconds = out.uncompressed_seconds;
        out.error = 0;
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
