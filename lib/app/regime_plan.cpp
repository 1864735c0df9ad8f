#include "app/regime_plan.hpp"

#include "app/comm_network.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "compress/codecs.hpp"
#include "compress/spec.hpp"
#include "io/comm_profile.hpp"
#include "perf/model.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace acc::app {
namespace {

using compress::Channel;
using compress::Spec;

std::string grid_text() {
    std::vector<std::string> parts;
    for (double f : regime::kTopkFractions) parts.push_back(short_number(f));
    return join(parts, ", ");
}

// "none, powersgd:RANK and topk:F": the compressors the planner has an error model for.
std::string plannable_list() {
    std::vector<std::string> names;
    for (const compress::CompressorInfo& c : compress::compressors()) {
        if (c.residual_model == compress::ResidualModel::unknown) continue;
        names.push_back(c.parameter_info.short_name ? std::string(c.name) + ":" + c.parameter_info.short_name : c.name);
    }
    if (names.size() < 2) return join(names, "");
    const std::string last = names.back();
    names.pop_back();
    return join(names, ", ") + " and " + last;
}

// The short name of the parameter the profile's Top-k tails are on ("F").
std::string tail_parameter() {
    for (const compress::CompressorInfo& c : compress::compressors())
        if (c.residual_model == compress::ResidualModel::topk_tail) return c.parameter_info.short_name;
    return "F";
}

// The error model of a level, or why it has none.
std::string unplannable_reason(const Spec& spec) {
    switch (spec.info().residual_model) {
    case compress::ResidualModel::exact:
    case compress::ResidualModel::singular_values: return "";
    case compress::ResidualModel::topk_tail: {
        const auto& grid = regime::kTopkFractions;
        if (std::find(grid.begin(), grid.end(), spec.parameter) != grid.end()) return "";
        return "the profile holds Top-k tails only at the fractions " + grid_text();
    }
    case compress::ResidualModel::unknown: break;
    }
    return "no error model for it; plannable levels are " + plannable_list() + " with " + tail_parameter() + " in " +
           grid_text();
}

Spec parse_plannable(const std::string& option, const std::string& text) {
    Spec spec;
    try {
        spec = compress::parse_spec(text);
    } catch (const UsageError& e) {
        throw UsageError(option + ": " + e.what());
    }
    check_plannable(option, spec);
    return spec;
}

// The modelled exchange (--comm): one collective per channel in use and step
// (PowerSGD's P and Q: two allreduces), each paying its latency once, and every
// tensor's bytes at the bandwidth of its collective. Latencies are not additive
// over layers, so the dynamic program sees the bandwidth terms and the per-epoch
// comparison with Accordion's levels the whole time.
struct ExchangeModel {
    perf::Network allreduce, allgather;
    int world = 1;
    bool has_allgather = false;

    static perf::Collective kind_of(Channel channel) {
        return channel == Channel::gather ? perf::Collective::allgather : perf::Collective::allreduce;
    }
    const perf::Network& net(perf::Collective kind) const {
        return kind == perf::Collective::allgather ? allgather : allreduce;
    }
    double bandwidth_seconds(Channel channel, double bytes) const {
        const perf::Collective kind = kind_of(channel);
        return perf::collective_seconds(net(kind), kind, world, bytes) - perf::collective_seconds(net(kind), kind, world, 0);
    }
    double latency_seconds(Channel channel) const {
        const perf::Collective kind = kind_of(channel);
        const double once = perf::collective_seconds(net(kind), kind, world, 0);
        return channel == Channel::low_rank ? 2 * once : once;
    }
};

// One level on one parameter: what it sends and through which channel.
struct LevelCost {
    double floats = 0;
    double bytes = 0;
    Channel channel = Channel::fp32_sum;
};

LevelCost level_cost(const Spec& spec, const std::vector<std::int64_t>& shape) {
    LevelCost c;
    c.bytes = static_cast<double>(compress::wire_bytes(spec, shape));
    c.floats = compress::wire_floats(spec, shape);
    c.channel = compress::make_codec(spec, shape, compress::CodecOptions{})->channel();
    return c;
}

// Residual norm of `spec` on parameter p's summed gradient of epoch q, from the profile.
double residual_norm(const Spec& spec, const io::GradStats& g, size_t q, size_t p) {
    const std::vector<std::int64_t>& shape = g.parameters[p].shape;
    switch (spec.info().residual_model) {
    case compress::ResidualModel::exact: return 0;
    case compress::ResidualModel::singular_values: {
        const auto rank = static_cast<std::int64_t>(spec.parameter);
        if (!compress::powersgd_compresses(shape, rank)) return 0;  // sent whole
        return regime::powersgd_residual(g.profile.singular_values[q][p], rank);
    }
    case compress::ResidualModel::topk_tail:
        return regime::topk_residual(g.epochs[q].norm[p], g.profile.topk_tail[q][p], spec.parameter);
    case compress::ResidualModel::unknown: break;
    }
    throw UsageError(spec.text() + " cannot be planned: no error model for it");  // check_plannable refused it before
}

bool uses_tails(const Spec& spec) { return spec.info().residual_model == compress::ResidualModel::topk_tail; }

ExchangeModel read_network(const std::string& path, const io::GradStats& grads, const std::set<Channel>& channels) {
    const io::CommProfile profile = io::read_comm_profile(path);
    check_profiled_ranks(path, profile);
    if (profile.world_size != grads.run.world_size)
        throw FileError(path, "was measured on " + std::to_string(profile.world_size) + " ranks, but the gradients were "
                              "recorded on " + std::to_string(grads.run.world_size) +
                              "; the schedule is for that many (record them with grad-dump --nproc " +
                              std::to_string(profile.world_size) + ", or profile " +
                              std::to_string(grads.run.world_size) + " ranks)");
    ExchangeModel m;
    m.world = static_cast<int>(profile.world_size);
    const bool gathers = channels.count(Channel::gather) > 0;
    const bool reduces = std::any_of(channels.begin(), channels.end(), [](Channel c) { return c != Channel::gather; });
    const io::CollectiveProfile* allreduce = profile.find("allreduce");
    const io::CollectiveProfile* allgather = profile.find("allgather");
    if (reduces && !allreduce)
        throw FileError(path, "has no allreduce profile, which the levels need; run comm-profile with --collectives "
                              "allreduce,allgather");
    if (gathers && !allgather)
        throw FileError(path, "has no allgather profile, which the Top-k levels need; run comm-profile with "
                              "--collectives allreduce,allgather");
    // The fit alone: the dynamic program needs costs that add up parameter by parameter,
    // which alpha + S / B gives and measured times between sizes (--comm-model) do not.
    if (allreduce) m.allreduce = profiled_network(path, profile, *allreduce, perf::Collective::allreduce, CommModel::fit);
    if (allgather) m.allgather = profiled_network(path, profile, *allgather, perf::Collective::allgather, CommModel::fit);
    m.has_allgather = allgather != nullptr;
    return m;
}

// The gradient file holds what a plan needs: a profile, and Top-k tails at the
// fractions of any Top-k level planned.
void check_profile(const PlanConfig& plan, const Spec& low, const Spec& high, const std::string& grads_path,
                   const io::GradStats& grads) {
    if (!grads.has_profile)
        throw FileError(grads_path, "holds no compressibility profile (/profile), which --plan needs; record one "
                                    "with grad-dump --profile");
    check_plannable("--low", low);
    check_plannable("--high", high);
    const auto& candidates = plan.candidates;
    const bool uses_topk = std::any_of(candidates.begin(), candidates.end(), uses_tails) || uses_tails(low) ||
                           uses_tails(high);
    if (uses_topk && !std::equal(grads.profile.topk_fractions.begin(), grads.profile.topk_fractions.end(),
                                 regime::kTopkFractions.begin(), regime::kTopkFractions.end()))
        throw FileError(grads_path, "its profile's Top-k fractions (/profile/topk_fraction) are not the grid " +
                                        grid_text() + " that Top-k levels are planned on");
}

// The planned layers: the matrix parameters, in model order.
std::vector<size_t> matrices_of(const io::GradStats& grads) {
    std::vector<size_t> out;
    for (size_t p = 0; p < grads.parameters.size(); ++p)
        if (grads.parameters[p].is_matrix()) out.push_back(p);
    return out;
}

// The network, for the summary.
std::string describe(const std::string& path, const ExchangeModel& network) {
    return path + " (" + std::to_string(network.world) + " ranks): allreduce " +
           short_number(network.allreduce.bandwidth / 1e6) + " MB/s, alpha " +
           short_number(network.allreduce.alpha * 1e6) + " us per ring step" +
           (network.has_allgather ? "; allgather " + short_number(network.allgather.bandwidth / 1e6) +
                                        " MB/s, alpha " + short_number(network.allgather.alpha * 1e6) + " us"
                                  : "");
}

// What the plan compares: every level's cost on every parameter (made once per
// level), in floats, or in modelled seconds once a network is used.
class PlanCosts {
public:
    explicit PlanCosts(const io::GradStats& grads) : grads_(grads) {}

    /// `spec`'s cost on every parameter; the references stay valid.
    const std::vector<LevelCost>& of(const Spec& spec) {
        auto [it, added] = costs_.try_emplace(spec.text());
        if (added) {
            it->second.resize(grads_.parameters.size());
            for (size_t p = 0; p < grads_.parameters.size(); ++p)
                it->second[p] = level_cost(spec, grads_.parameters[p].shape);
        }
        return it->second;
    }
    void use(const ExchangeModel& network) {
        network_ = network;
        seconds_ = true;
    }
    /// The dynamic program's cost of one level on one parameter.
    double layer(const LevelCost& c) const { return seconds_ ? network_.bandwidth_seconds(c.channel, c.bytes) : c.floats; }
    /// The whole exchange of one step under per-parameter levels; `floats` what it sends.
    double step(const std::vector<const LevelCost*>& chosen, double& floats) const {
        floats = 0;
        double cost = 0;
        std::set<Channel> used;
        for (const LevelCost* c : chosen) {
            floats += c->floats;
            cost += layer(*c);
            used.insert(c->channel);
        }
        if (seconds_)
            for (Channel ch : used) cost += network_.latency_seconds(ch);
        return cost;
    }

private:
    const io::GradStats& grads_;
    std::map<std::string, std::vector<LevelCost>> costs_;  // by spec text, per parameter
    ExchangeModel network_;
    bool seconds_ = false;
};

struct PlanInputs {
    const PlanConfig& plan;
    const Spec& low;
    const Spec& high;
    const std::string& grads_path;
    const io::GradStats& grads;
    const regime::Decisions& critical;
    std::vector<size_t> matrices;
};

// The error of `spec` on parameter p, predicted from profile epoch q. The reader
// checked each number; what they give together (squares too large for a double)
// is refused here, naming the file, the dataset, the epoch and the parameter.
double level_error(const PlanInputs& in, const Spec& spec, size_t q, size_t p) {
    const std::string& name = in.grads.parameters[p].name;
    try {
        const double error = regime::layer_error(residual_norm(spec, in.grads, q, p), in.plan.error);
        if (!std::isfinite(error))
            throw Error(std::string("error (") + regime::error_measure_name(in.plan.error) + ") is infinite");
        return error;
    } catch (const UsageError&) {
        throw;
    } catch (const FileError&) {
        throw;
    } catch (const Error& e) {
        const std::string dataset = uses_tails(spec) ? "/profile/topk_tail" : "/profile/singular_values/" + name;
        throw FileError(in.grads_path, dataset + " at epoch " + std::to_string(q) + ", parameter '" + name + "': " +
                                           spec.text() + "'s " + e.what());
    }
}

// One epoch: Accordion's levels (low where critical), then the cheapest levels
// within the error budget, kept only where they cost less. `levels` gets the
// chosen level of every parameter.
PlannedEpoch plan_epoch(const PlanInputs& in, PlanCosts& costs, std::int64_t epoch, std::vector<Spec>& levels) {
    const size_t P = in.grads.parameters.size();
    const Spec& none = compress::no_compression();
    PlannedEpoch r;
    r.epoch = epoch;
    // The schedule is replayed: the epoch before is the latest one whose
    // gradients are known when this one starts (epoch 0 has only itself).
    const size_t q = epoch == 0 ? 0 : static_cast<size_t>(epoch - 1);
    r.profile_epoch = static_cast<std::int64_t>(q);
    std::vector<const LevelCost*> uniform(P, &costs.of(none)[0]), planned;
    std::vector<Spec> uniform_level(P, none);
    std::vector<std::vector<regime::Candidate>> layers, uniform_layers;
    for (size_t p : in.matrices) {
        const Spec& u = in.critical.critical[in.critical.at(epoch, static_cast<std::int64_t>(p))] ? in.low : in.high;
        uniform[p] = &costs.of(u)[p];
        uniform_level[p] = u;
        uniform_layers.push_back({{costs.layer(*uniform[p]), level_error(in, u, q, p)}});
        std::vector<regime::Candidate> options;
        for (const Spec& spec : in.plan.candidates)
            options.push_back({costs.layer(costs.of(spec)[p]), level_error(in, spec, q, p)});
        layers.push_back(std::move(options));
    }
    for (size_t p = 0; p < P; ++p)
        if (!in.grads.parameters[p].is_matrix()) uniform[p] = &costs.of(none)[p];
    r.uniform_cost = costs.step(uniform, r.uniform_floats);
    planned = uniform;
    levels = uniform_level;
    r.kept_uniform = true;
    if (!in.matrices.empty()) {
        const std::vector<std::int64_t> first(in.matrices.size(), 0);
        r.uniform_error = regime::uniform_budget(uniform_layers, first, 1.0);
        r.budget = regime::uniform_budget(uniform_layers, first, in.plan.budget_factor);
        const regime::LevelPlan lp = regime::plan_levels(layers, r.budget, in.plan.bins);
        r.status = lp.status;
        std::vector<const LevelCost*> chosen = uniform;
        std::vector<Spec> chosen_level = uniform_level;
        for (size_t i = 0; i < in.matrices.size(); ++i) {
            const Spec& spec = in.plan.candidates[static_cast<size_t>(lp.choice[i])];
            chosen[in.matrices[i]] = &costs.of(spec)[in.matrices[i]];
            chosen_level[in.matrices[i]] = spec;
        }
        double floats = 0;
        const double cost = costs.step(chosen, floats);
        // Never more than Accordion: a plan that is not cheaper keeps its levels.
        if (lp.feasible() && cost < r.uniform_cost) {
            planned = chosen;
            levels = chosen_level;
            r.kept_uniform = false;
            r.error = lp.error;
        }
    }
    if (r.kept_uniform) r.error = r.uniform_error;
    r.cost = costs.step(planned, r.floats);
    return r;
}

}  // namespace

std::vector<Spec> parse_plan_candidates(const std::string& text, const std::string& option) {
    std::vector<Spec> out;
    if (text.find_first_not_of(" \t") == std::string::npos)
        throw UsageError(option + ": no candidate levels; give levels such as powersgd:1,powersgd:2");
    for (const std::string& item : split(text, ',')) {
        const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
        const std::string level = first == std::string::npos ? "" : item.substr(first, last - first + 1);
        if (level.empty()) throw UsageError(option + ": an empty level in '" + text + "'; give levels such as powersgd:1,powersgd:2");
        const Spec spec = parse_plannable(option, level);
        if (std::find(out.begin(), out.end(), spec) == out.end()) out.push_back(spec);
    }
    return out;
}

void check_plannable(const std::string& option, const Spec& spec) {
    const std::string why = unplannable_reason(spec);
    if (!why.empty()) throw UsageError(option + ": " + spec.text() + " cannot be planned: " + why);
}

PlannedSchedule plan_schedule(const PlanConfig& plan, const Spec& low_spec, const Spec& high_spec,
                              const std::string& grads_path, const io::GradStats& grads,
                              const regime::Decisions& critical) {
    check_profile(plan, low_spec, high_spec, grads_path, grads);
    const PlanInputs in{plan, low_spec, high_spec, grads_path, grads, critical, matrices_of(grads)};
    PlanCosts costs(grads);
    // Every channel the levels may use, so that the network file is checked for each.
    std::set<Channel> channels;
    for (const Spec& spec : plan.candidates)
        for (size_t p : in.matrices) channels.insert(costs.of(spec)[p].channel);
    for (const Spec* spec : {&low_spec, &high_spec})
        for (size_t p : in.matrices) channels.insert(costs.of(*spec)[p].channel);
    if (in.matrices.size() < grads.parameters.size()) channels.insert(costs.of(compress::no_compression())[0].channel);

    PlannedSchedule out;
    out.seconds = !plan.comm.empty();
    if (out.seconds) {
        const ExchangeModel network = read_network(plan.comm, grads, channels);
        out.network = describe(plan.comm, network);
        costs.use(network);
    }
    const size_t P = grads.parameters.size(), E = grads.epochs.size();
    std::map<std::string, std::int32_t> index{{compress::no_compression().text(), 0}};
    out.levels = {compress::no_compression()};
    auto level_index = [&](const Spec& spec) {
        auto [it, added] = index.try_emplace(spec.text(), static_cast<std::int32_t>(out.levels.size()));
        if (added) out.levels.push_back(spec);
        return it->second;
    };
    out.level.assign(E * P, 0);
    for (size_t e = 0; e < E; ++e) {
        std::vector<Spec> levels;
        out.epochs.push_back(plan_epoch(in, costs, static_cast<std::int64_t>(e), levels));
        for (size_t p = 0; p < P; ++p) out.level[e * P + p] = level_index(levels[p]);
    }
    return out;
}

}  // namespace acc::app
