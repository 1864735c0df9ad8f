// The checks of train-dist's settings that need neither model nor data, and what ranks compare.
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "dist/config.hpp"
#include "regime/detect.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace acc::dist {
void validate(const TrainDistConfig& c) {
    train::TrainConfig t = c.train;
    // A batch schedule may set batches larger than --batch-size, which micro-batches then split.
    if (!c.schedule.empty() && !c.batch_size_given) t.batch_size = std::max(t.batch_size, t.micro_batch_size);
    train::validate(t);
    const int modes = (c.compress ? 1 : 0) + (!c.schedule.empty() ? 1 : 0) + (c.accordion ? 1 : 0) +
                      (!c.gravac.empty() ? 1 : 0);
    if (modes > 1) throw UsageError("--compress, --schedule, --accordion and --gravac: choose one");
    if (!c.gravac.empty()) {
        if (c.gravac != "topk" && c.gravac != "dgc" && c.gravac != "randomk" && c.gravac != "powersgd")
            throw UsageError("--gravac: must be topk, dgc, randomk or powersgd, not '" + c.gravac + "'");
        regime::validate(gravac_settings(c, 1));
    }
    if (!c.schedule_extend.empty() && c.schedule_extend != "last")
        throw UsageError("--schedule-extend: must be 'last', not '" + c.schedule_extend + "'");
    if (!c.schedule_extend.empty() && c.schedule.empty()) throw UsageError("--schedule-extend: needs --schedule");
    if (c.accordion) {
        const AccordionConfig& a = c.accordion_config;
        regime::validate(regime::Options{a.eta, a.interval});
    }
    comm::run_backend(c.backend, c.train.device);
    if (!(c.bucket_mb > 0) || !std::isfinite(c.bucket_mb)) throw UsageError("--bucket-mb: must be a number > 0");
    if (!(c.first_bucket_mb > 0) || !std::isfinite(c.first_bucket_mb))
        throw UsageError("--first-bucket-mb: must be a number > 0");
    if (c.dgc_warmup_epochs < 0) throw UsageError("--dgc-warmup-epochs: must be >= 0");
    if (c.metrics.empty()) throw UsageError("--metrics: must name a file");
    check_distinct_files({{"--schedule", c.schedule}}, {{"--metrics", c.metrics}, {"checkpoint", checkpoint_path(c)}});
}

std::string resume_gravac_settings(const TrainDistConfig& c) {
    if (c.gravac.empty()) return "";
    const regime::GravacSettings& g = c.gravac_settings;
    auto n = [](double v) {
        std::ostringstream out;
        out.precision(17);
        out << v;
        return out.str();
    };
    return "--gravac " + c.gravac + "\n--gravac-theta-min " + n(g.theta_min) + "\n--gravac-theta-max " +
           n(g.theta_max) + "\n--gravac-epsilon " + n(g.epsilon) + "\n--gravac-window " + std::to_string(g.window) +
           "\n--gravac-omega " + n(g.omega) + "\n--gravac-theta-s " + n(g.theta_s) + "\n--gravac-smoothing " +
           (g.smoothing == 0 ? std::string("default") : n(g.smoothing)) + "\n--gravac-policy " + c.gravac_policy +
           "\n--gravac-throughput " + c.gravac_throughput + "\n--gravac-reset-gains " +
           (g.reset_gains ? "on" : "off") + "\n";
}

regime::GravacSettings gravac_settings(const TrainDistConfig& c, std::int64_t world_size) {
    regime::GravacSettings s = c.gravac_settings;
    s.policy = regime::parse_gravac_policy(c.gravac_policy);
    s.statistic = regime::parse_gravac_statistic(c.gravac_throughput);
    if (s.smoothing == 0) s.smoothing = regime::gravac_smoothing(world_size);
    return s;
}

std::string shared_settings(const TrainDistConfig& c) {
    const train::TrainConfig& t = c.train;
    std::vector<std::string> fields = {t.model, std::to_string(t.model_options.hidden_size),
                                       std::to_string(t.model_options.embedding_size), std::to_string(t.model_options.tied),
                                       std::to_string(t.model_options.dropout), t.data.name, t.data.dir,
                                       std::to_string(t.data.train_samples), std::to_string(t.data.test_samples),
                                       std::to_string(t.data.bptt), std::to_string(t.epochs),
                                       std::to_string(t.batch_size), std::to_string(t.micro_batch_size),
                                       std::to_string(t.schedule.lr), std::to_string(t.schedule.warmup_epochs),
                                       std::to_string(t.schedule.warmup_lr), std::to_string(t.schedule.decay_factor),
                                       std::to_string(t.optimizer.momentum), std::to_string(t.optimizer.nesterov),
                                       std::to_string(t.optimizer.weight_decay), std::to_string(t.clip_norm),
                                       std::to_string(t.eval_every), std::to_string(t.seed), device_name(t.device), c.compress ? c.compress->text() : "",
                                       c.schedule, c.schedule_extend, std::to_string(c.accordion),
                                       c.accordion_config.low.text(), c.accordion_config.high.text(),
                                       std::to_string(c.accordion_config.eta), std::to_string(c.accordion_config.interval),
                                       c.backend ? comm::backend_name(*c.backend) : "", std::to_string(c.bucket_mb), std::to_string(c.first_bucket_mb),
                                       std::to_string(c.dgc_warmup_epochs), std::to_string(c.resume), c.gravac,
                                       resume_gravac_settings(c)};
    for (auto e : t.schedule.decay_epochs) fields.push_back(std::to_string(e));
    return join(fields, "\n");
}

std::string checkpoint_path(const TrainDistConfig& c) {
    // Named after the metrics file, so that runs sharing a directory keep their own.
    const std::filesystem::path metrics(c.metrics);
    std::string name = metrics.filename().string();
    const std::string suffix = ".h5";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        name.resize(name.size() - suffix.size());
    name += ".ckpt.h5";
    const std::filesystem::path dir = c.checkpoint_dir.empty() ? metrics.parent_path() : std::filesystem::path(c.checkpoint_dir);
    return (dir / name).string();
}

}  // namespace acc::dist
