#include "app/regime_plan.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "compress/codecs.hpp"
#include "compress/spec.hpp"
#include "io/comm_profile.hpp"
#include "perf/model.hpp"

#include <algorithm>
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

// The error model of a level, or why it has none.
std::string unplannable_reason(const Spec& spec) {
    if (spec.name == "none" || spec.name == "powersgd") return "";
    if (spec.name == "topk") {
        const auto& grid = regime::kTopkFractions;
        if (std::find(grid.begin(), grid.end(), spec.parameter) != grid.end()) return "";
        return "the profile holds Top-k tails only at the fractions " + grid_text();
    }
    return "no error model for it; plannable levels are none, powersgd:RANK and topk:F with F in " + grid_text();
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
    if (spec.name == "none") return 0;
    if (spec.name == "powersgd") {
        const auto rank = static_cast<std::int64_t>(spec.parameter);
        if (!compress::powersgd_compresses(shape, rank)) return 0;  // sent whole
        return regime::powersgd_residual(g.profile.singular_values[q][p], rank);
    }
    return regime::topk_residual(g.epochs[q].norm[p], g.profile.topk_tail[q][p], spec.parameter);
}

ExchangeModel read_network(const std::string& path, const io::GradStats& grads, const std::set<Channel>& channels) {
    const io::CommProfile profile = io::read_comm_profile(path);
    if (profile.world_size < 2)
        throw FileError(path, "was measured on " + std::to_string(profile.world_size) +
                                  " rank, which says nothing about the network; profile at least 2 ranks");
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
    if (allreduce)
        m.allreduce = perf::network_from_fit(perf::Collective::allreduce, m.world, allreduce->alpha, allreduce->bandwidth);
    if (allgather)
        m.allgather = perf::network_from_fit(perf::Collective::allgather, m.world, allgather->alpha, allgather->bandwidth);
    m.has_allgather = allgather != nullptr;
    return m;
}

}  // namespace

std::vector<Spec> parse_plan_candidates(const std::string& text) {
    std::vector<Spec> out;
    if (text.find_first_not_of(" \t") == std::string::npos)
        throw UsageError("--plan: no candidate levels; give levels such as powersgd:1,powersgd:2");
    for (const std::string& item : split(text, ',')) {
        const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
        const std::string level = first == std::string::npos ? "" : item.substr(first, last - first + 1);
        if (level.empty()) throw UsageError("--plan: an empty level in '" + text + "'; give levels such as powersgd:1,powersgd:2");
        const Spec spec = parse_plannable("--plan", level);
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
    if (!grads.has_profile)
        throw FileError(grads_path, "holds no compressibility profile (/profile), which --plan needs; record one "
                                    "with grad-dump --profile");
    const size_t P = grads.parameters.size(), E = grads.epochs.size();
    const std::vector<Spec>& candidates = plan.candidates;
    check_plannable("--low", low_spec);
    check_plannable("--high", high_spec);
    const Spec& none = compress::kNone;
    const bool uses_topk = std::any_of(candidates.begin(), candidates.end(), [](const Spec& s) { return s.name == "topk"; }) ||
                           low_spec.name == "topk" || high_spec.name == "topk";
    if (uses_topk && !std::equal(grads.profile.topk_fractions.begin(), grads.profile.topk_fractions.end(),
                                 regime::kTopkFractions.begin(), regime::kTopkFractions.end()))
        throw FileError(grads_path, "its profile's Top-k fractions (/profile/topk_fraction) are not the grid " +
                                        grid_text() + " that Top-k levels are planned on");

    // Every level's cost on every parameter; the matrices are the planned layers.
    std::vector<size_t> matrices;
    for (size_t p = 0; p < P; ++p)
        if (grads.parameters[p].is_matrix()) matrices.push_back(p);
    std::map<std::string, std::vector<LevelCost>> costs;  // by spec text, per parameter
    std::set<Channel> channels;
    auto cost_of = [&](const Spec& spec) -> const std::vector<LevelCost>& {
        auto [it, added] = costs.try_emplace(spec.text());
        if (added) {
            it->second.resize(P);
            for (size_t p = 0; p < P; ++p) it->second[p] = level_cost(spec, grads.parameters[p].shape);
        }
        return it->second;
    };
    for (const Spec& spec : candidates)
        for (size_t p : matrices) channels.insert(cost_of(spec)[p].channel);
    for (const Spec* spec : {&low_spec, &high_spec})
        for (size_t p : matrices) channels.insert(cost_of(*spec)[p].channel);
    if (matrices.size() < P) channels.insert(cost_of(none)[0].channel);

    PlannedSchedule out;
    out.seconds = !plan.comm.empty();
    ExchangeModel network;
    if (out.seconds) {
        network = read_network(plan.comm, grads, channels);
        out.network = plan.comm + " (" + std::to_string(network.world) + " ranks): allreduce " +
                      short_number(network.allreduce.bandwidth / 1e6) + " MB/s, alpha " +
                      short_number(network.allreduce.alpha * 1e6) + " us per ring step" +
                      (network.has_allgather ? "; allgather " + short_number(network.allgather.bandwidth / 1e6) +
                                                   " MB/s, alpha " + short_number(network.allgather.alpha * 1e6) + " us"
                                             : "");
    }
    // The dynamic program's cost of one level on one parameter.
    auto layer_cost = [&](const LevelCost& c) {
        return out.seconds ? network.bandwidth_seconds(c.channel, c.bytes) : c.floats;
    };
    // The whole exchange of one step under per-parameter levels.
    auto step_cost = [&](const std::vector<const LevelCost*>& chosen, double& floats) {
        floats = 0;
        double cost = 0;
        std::set<Channel> used;
        for (const LevelCost* c : chosen) {
            floats += c->floats;
            cost += layer_cost(*c);
            used.insert(c->channel);
        }
        if (out.seconds)
            for (Channel ch : used) cost += network.latency_seconds(ch);
        return cost;
    };

    std::map<std::string, std::int32_t> index{{none.text(), 0}};
    out.levels = {none};
    auto level_index = [&](const Spec& spec) {
        auto [it, added] = index.try_emplace(spec.text(), static_cast<std::int32_t>(out.levels.size()));
        if (added) out.levels.push_back(spec);
        return it->second;
    };
    out.level.assign(E * P, 0);
    for (size_t e = 0; e < E; ++e) {
        PlannedEpoch r;
        r.epoch = static_cast<std::int64_t>(e);
        // The schedule is replayed: the epoch before is the latest one whose
        // gradients are known when this one starts (epoch 0 has only itself).
        const size_t q = e == 0 ? 0 : e - 1;
        r.profile_epoch = static_cast<std::int64_t>(q);
        std::vector<const LevelCost*> uniform(P, &cost_of(none)[0]), planned;
        std::vector<Spec> uniform_level(P, none), planned_level;
        std::vector<std::vector<regime::Candidate>> layers, uniform_layers;
        for (size_t p : matrices) {
            const Spec& u = critical.critical[critical.at(r.epoch, static_cast<std::int64_t>(p))] ? low_spec : high_spec;
            uniform[p] = &cost_of(u)[p];
            uniform_level[p] = u;
            uniform_layers.push_back(
                {{layer_cost(*uniform[p]), regime::layer_error(residual_norm(u, grads, q, p), plan.error)}});
            std::vector<regime::Candidate> options;
            for (const Spec& spec : candidates)
                options.push_back(
                    {layer_cost(cost_of(spec)[p]), regime::layer_error(residual_norm(spec, grads, q, p), plan.error)});
            layers.push_back(std::move(options));
        }
        for (size_t p = 0; p < P; ++p)
            if (!grads.parameters[p].is_matrix()) uniform[p] = &cost_of(none)[p];
        r.uniform_cost = step_cost(uniform, r.uniform_floats);
        planned = uniform;
        planned_level = uniform_level;
        r.kept_uniform = true;
        if (!matrices.empty()) {
            const std::vector<std::int64_t> first(matrices.size(), 0);
            r.uniform_error = regime::uniform_budget(uniform_layers, first, 1.0);
            r.budget = regime::uniform_budget(uniform_layers, first, plan.budget_factor);
            const regime::LevelPlan lp = regime::plan_levels(layers, r.budget, plan.bins);
            r.status = lp.status;
            std::vector<const LevelCost*> chosen = uniform;
            std::vector<Spec> chosen_level = uniform_level;
            for (size_t i = 0; i < matrices.size(); ++i) {
                const Spec& spec = candidates[static_cast<size_t>(lp.choice[i])];
                chosen[matrices[i]] = &cost_of(spec)[matrices[i]];
                chosen_level[matrices[i]] = spec;
            }
            double floats = 0;
            const double cost = step_cost(chosen, floats);
            // Never more than Accordion: a plan that is not cheaper keeps its levels.
            if (lp.feasible() && cost < r.uniform_cost) {
                planned = chosen;
                planned_level = chosen_level;
                r.kept_uniform = false;
                r.error = lp.error;
            }
        }
        if (r.kept_uniform) r.error = r.uniform_error;
        r.cost = step_cost(planned, r.floats);
        for (size_t p = 0; p < P; ++p) out.level[e * P + p] = level_index(planned_level[p]);
        out.epochs.push_back(r);
    }
    return out;
}

}  // namespace acc::app
