#include "train-dist/gravac.hpp"

#include "base/hash.hpp"
#include "train/sampling.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <map>

namespace acc::app {

std::optional<exchange::GravacExchangeOptions> gravac_options(const TrainDistConfig& c, int world) {
    if (!c.gravac) return std::nullopt;
    exchange::GravacExchangeOptions o;
    o.family = *c.gravac;
    o.settings = gravac_settings(c, world);
    o.seed = static_cast<std::uint32_t>(train::mix_seed(c.train.seed, 0x9a) & 0xffffffffu);
    o.samples_per_step = c.train.batch_size * world;
    return o;
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

std::string gravac_summary(const std::vector<regime::GravacStep>& steps) {
    std::map<double, std::int64_t> at;
    for (const auto& s : steps) ++at[s.factor];
    std::string out;
    for (const auto& [factor, n] : at)
        out += (out.empty() ? "" : ", ") + std::to_string(n) + (factor == 1 ? std::string(" dense") : fmt::format(" at {:g}x", factor));
    return out.empty() ? "no steps" : out;
}

void log_gravac_epoch(const std::vector<regime::GravacStep>& steps, int rank, std::int64_t epoch) {
    std::string factors;
    for (const auto& s : steps) factors += fmt::format("{},", s.factor);
    spdlog::debug("rank {}: gravac epoch {}: steps at each factor {}; decisions digest {:016x}", rank, epoch,
                  gravac_summary(steps), fnv1a(factors));
}

}  // namespace acc::app
