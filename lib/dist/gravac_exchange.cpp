#include "dist/gravac_exchange.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "train/sampling.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <map>

namespace acc::dist {
namespace {

// The exchange's tensors: the parameters' names and shapes.
std::vector<compress::TensorInfo> tensor_infos(const std::vector<torch::Tensor>& parameters,
                                               const std::vector<io::Parameter>& description) {
    if (description.size() != parameters.size())
        throw Error("internal error: " + std::to_string(description.size()) + " descriptions for " +
                    std::to_string(parameters.size()) + " parameters");
    std::vector<compress::TensorInfo> out;
    for (size_t i = 0; i < parameters.size(); ++i) out.push_back({description[i].name, parameters[i].sizes().vec()});
    return out;
}

}  // namespace

GravacSync::GravacSync(const std::vector<torch::Tensor>& parameters, const std::vector<io::Parameter>& description,
                       comm::Collectives& comm, torch::Device device, exchange::GravacExchangeOptions options)
    : exchange_(std::make_unique<exchange::GravacExchange>(tensor_infos(parameters, description), comm, device,
                                                           std::move(options))) {}

void GravacSync::exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) {
    exchange::GravacStepInfo info;
    info.epoch = step.epoch;
    info.samples = step.samples;
    info.started = step.started;
    exchange_->exchange(gradients, info);
}

std::vector<io::MetricsGravacStep> GravacSync::take_steps() {
    std::vector<io::MetricsGravacStep> out;
    for (const auto& r : exchange_->take_steps()) {
        io::MetricsGravacStep m;
        m.epoch = r.epoch;
        m.factor = r.factor;
        m.choice = r.choice;
        m.theta_min = r.theta_min;
        m.candidate = r.candidate;
        m.gain_min = r.gain_min;
        m.gain_candidate = r.gain_candidate;
        out.push_back(m);
    }
    return out;
}

std::vector<io::MetricsGravacThroughput> GravacSync::throughput(std::int64_t epoch) const {
    std::vector<io::MetricsGravacThroughput> out;
    for (const auto& t : exchange_->throughput(epoch)) out.push_back({t.epoch, t.factor, t.throughput});
    return out;
}

std::unique_ptr<GravacSync> make_gravac_exchange(const TrainDistConfig& c, const std::vector<torch::Tensor>& parameters,
                                                 const std::vector<io::Parameter>& description,
                                                 comm::ProcessGroupCollectives& pg, int world) {
    if (!c.gravac) return nullptr;
    exchange::GravacExchangeOptions o;
    o.family = regime::gravac_family_name(*c.gravac);
    o.settings = gravac_settings(c, world);
    o.seed = static_cast<std::uint32_t>(train::mix_seed(c.train.seed, 0x9a) & 0xffffffffu);
    o.samples_per_step = c.train.batch_size * world;
    return std::make_unique<GravacSync>(parameters, description, pg, pg.device(), o);
}

io::MetricsGravac gravac_metrics(const TrainDistConfig& c, int world) {
    const regime::GravacSettings s = gravac_settings(c, world);
    io::MetricsGravac g;
    g.enabled = true;
    g.family = regime::gravac_family_name(*c.gravac);
    g.policy = regime::gravac_policy_name(s.policy);
    g.theta_min = s.theta_min;
    g.theta_max = s.theta_max;
    g.epsilon = s.epsilon;
    g.omega = s.omega;
    g.theta_s = s.theta_s;
    g.smoothing = s.smoothing;
    g.window = s.window;
    return g;
}

std::string gravac_summary(const std::vector<io::MetricsGravacStep>& steps) {
    std::map<double, std::int64_t> at;
    for (const auto& s : steps) ++at[s.factor];
    std::string out;
    for (const auto& [factor, n] : at)
        out += (out.empty() ? "" : ", ") + std::to_string(n) + (factor == 1 ? std::string(" dense") : fmt::format(" at {:g}x", factor));
    return out.empty() ? "no steps" : out;
}

std::vector<io::MetricsGravacStep> log_gravac_epoch(GravacSync& exchange, int rank, std::int64_t epoch) {
    std::vector<io::MetricsGravacStep> steps = exchange.take_steps();
    std::string factors;
    for (const auto& s : steps) factors += fmt::format("{},", s.factor);
    spdlog::debug("rank {}: gravac epoch {}: steps at each factor {}; decisions digest {:016x}", rank, epoch,
                  gravac_summary(steps), fnv1a(factors));
    return steps;
}

}  // namespace acc::dist
