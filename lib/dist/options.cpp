// train-dist's command-line options and the checks that need neither model nor data.
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/tool.hpp"
#include "compress/spec.hpp"
#include "dist/config.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace acc::dist {
namespace {

// 64 GiB: buckets are buffers in memory; a larger one cannot be meant.
constexpr double kMaxBucketMb = 65536;

}  // namespace

void add_train_dist_options(CLI::App& app, TrainDistConfig& c) {
    train::add_train_options(app, c.train);
    CLI::Option* batch = app.get_option("--batch-size");
    batch->description("Samples per step and rank (text: parallel streams per rank); a batch schedule sets it");
    batch->each([&c](const std::string&) { c.batch_size_given = true; });

    const std::string group = "Communication";
    auto* compress = app.add_option("--compress", c.compress,
                                    "Compress every matrix parameter's gradient with this level: " +
                                        compress::spec_list() + " [none]")
                         ->type_name("SPEC")
                         ->default_str("")
                         ->group(group);
    auto* schedule = app.add_option("--schedule", c.schedule,
                                    "Follow a regime-detect schedule: its level per epoch and parameter, or its "
                                    "batch size and learning-rate scale per epoch")
                         ->type_name("SCHED.h5")
                         ->group(group);
    app.add_option("--schedule-extend", c.schedule_extend,
                   "When the schedule covers fewer epochs than --epochs: 'last' repeats its last epoch")
        ->check(CLI::IsMember({"last"}))
        ->group(group);
    auto* accordion = app.add_flag("--accordion", c.accordion,
                                   "Run Accordion's rule online: per parameter, --low in critical regimes and "
                                   "--high elsewhere, decided on rank 0 every --interval epochs")
                          ->group(group);
    auto* gravac = app.add_option("--gravac", c.gravac,
                                  "Run GraVAC: every step, send this sparsifier's gradient at the largest "
                                  "compression factor whose gain ||C(g)||^2/||g||^2 is at least --gravac-epsilon: "
                                  "topk, dgc or randomk")
                       ->type_name("FAMILY")
                       ->group(group);
    compress->excludes(schedule)->excludes(accordion)->excludes(gravac);
    schedule->excludes(accordion)->excludes(gravac);
    accordion->excludes(gravac);
    const std::string accordion_group = "Accordion (with --accordion)";
    app.add_option("--low", c.accordion_config.low, "Level of critical regimes (little compression)")
        ->type_name("SPEC")
        ->needs(accordion)
        ->group(accordion_group);
    app.add_option("--high", c.accordion_config.high, "Level elsewhere (more compression)")
        ->type_name("SPEC")
        ->needs(accordion)
        ->group(accordion_group);
    app.add_option("--eta", c.accordion_config.eta,
                   "A relative change of the gradient norm of at least eta marks a critical regime")
        ->check(cli::number(0, 1e6, true))
        ->needs(accordion)
        ->group(accordion_group);
    app.add_option("--interval", c.accordion_config.interval, "Epochs between decisions")
        ->check(cli::whole_number(1, 1000000))
        ->needs(accordion)
        ->group(accordion_group);

    const std::string gravac_group = "GraVAC (with --gravac)";
    regime::GravacSettings& g = c.gravac_settings;
    g.smoothing = 0;
    app.add_option("--gravac-theta-min", g.theta_min, "Minimum compression factor theta_min (10: keep 10 %)")
        ->check(cli::number(1, 1e12, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-theta-max", g.theta_max, "Maximum compression factor theta_max")
        ->check(cli::number(1, 1e12, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-epsilon", g.epsilon, "Minimum gain of a factor to be sent, in (0, 1]")
        ->check(cli::number(0, 1, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-window", g.window, "Steps between CheckGraVAC runs (scaling the candidate)")
        ->check(cli::whole_number(1, 1000000000))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-omega", g.omega,
                   "Tolerance of the theta_min raise and the throughput saturation rules (0.01: 1 %)")
        ->check(cli::number(0, 1))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-theta-s", g.theta_s, "First candidate factor = theta_s x theta_min")
        ->check(cli::number(1, 1e6, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-smoothing", g.smoothing,
                   "EWMA weight of a step's gain, in (0, 1] [min(1, N/100) for N ranks]")
        ->check(cli::number(0, 1, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-policy", c.gravac_policy,
                   "How the candidate grows: exponential (10x, 20x, 40x, 160x, ...) or geometric (10x, 20x, 40x, 80x, ...)")
        ->needs(gravac)
        ->group(gravac_group);

    app.add_option("--backend", c.backend, "Collectives: gloo (cpu), or nccl (cuda, in CUDA builds) [by --device]")
        ->check(CLI::IsMember({"gloo", "nccl"}))
        ->group(group);
    app.add_option("--bucket-mb", c.bucket_mb,
                   "MiB of uncompressed gradients per allreduce that overlaps the backward pass")
        ->check(cli::number(0, kMaxBucketMb, true))
        ->group(group);
    app.add_option("--first-bucket-mb", c.first_bucket_mb, "MiB of the first (last layers') bucket")
        ->check(cli::number(0, kMaxBucketMb, true))
        ->group(group);
    app.add_option("--dgc-warmup-epochs", c.dgc_warmup_epochs,
                   "dgc:F keeps exponentially fewer entries over the first N epochs, down to F")
        ->check(cli::whole_number(0, 1000000))
        ->group(group);

    const std::string output = "Output";
    app.add_option("--metrics", c.metrics, "Metrics file written after every epoch by rank 0 (accordion.metrics)")
        ->type_name("FILE")
        ->group(output);
    app.add_option("--checkpoint-dir", c.checkpoint_dir,
                   "Directory of the checkpoint written after every epoch, named after the metrics file "
                   "(METRICS with .ckpt.h5 for .h5) [the metrics file's]")
        ->type_name("DIR")
        ->group(output);
    app.add_flag("--resume", c.resume, "Continue a stopped run from its checkpoint and metrics file")->group(output);
    app.add_flag("--json", c.json, "Also print the summary as JSON on stdout")->group(output);
    comm::add_rendezvous_options(app, c.rendezvous);
}

namespace {

// Parses a level, naming the option in the message.
void check_spec(const std::string& option, const std::string& spec) {
    try {
        compress::parse_spec(spec);
    } catch (const UsageError& e) {
        throw UsageError(option + ": " + e.what());
    }
}

}  // namespace

void validate(const TrainDistConfig& c) {
    train::TrainConfig t = c.train;
    // A batch schedule may set batches larger than --batch-size, which micro-batches then split.
    if (!c.schedule.empty() && !c.batch_size_given) t.batch_size = std::max(t.batch_size, t.micro_batch_size);
    train::validate(t);
    const int modes = (!c.compress.empty() ? 1 : 0) + (!c.schedule.empty() ? 1 : 0) + (c.accordion ? 1 : 0) +
                      (!c.gravac.empty() ? 1 : 0);
    if (modes > 1) throw UsageError("--compress, --schedule, --accordion and --gravac: choose one");
    if (!c.gravac.empty()) {
        if (c.gravac != "topk" && c.gravac != "dgc" && c.gravac != "randomk")
            throw UsageError("--gravac: must be topk, dgc or randomk, not '" + c.gravac + "'");
        regime::validate(gravac_settings(c, 1));
    }
    if (!c.compress.empty()) check_spec("--compress", c.compress);
    if (!c.schedule_extend.empty() && c.schedule_extend != "last")
        throw UsageError("--schedule-extend: must be 'last', not '" + c.schedule_extend + "'");
    if (!c.schedule_extend.empty() && c.schedule.empty()) throw UsageError("--schedule-extend: needs --schedule");
    if (c.accordion) {
        const AccordionConfig& a = c.accordion_config;
        check_spec("--low", a.low);
        check_spec("--high", a.high);
        if (!(a.eta > 0) || !std::isfinite(a.eta)) throw UsageError("--eta: must be a number > 0");
        if (a.interval < 1) throw UsageError("--interval: must be at least 1 epoch");
    }
    if (!c.backend.empty() && c.backend != "gloo" && c.backend != "nccl")
        throw UsageError("--backend: must be gloo or nccl, not '" + c.backend + "'");
    if (c.backend == "nccl" && c.train.device != "cuda")
        throw UsageError("--backend nccl: needs --device cuda (NCCL reduces tensors on GPUs)");
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
           "\n";
}

regime::GravacSettings gravac_settings(const TrainDistConfig& c, std::int64_t world_size) {
    regime::GravacSettings s = c.gravac_settings;
    s.policy = regime::parse_gravac_policy(c.gravac_policy);
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
                                       std::to_string(t.eval_every), std::to_string(t.seed), t.device, c.compress,
                                       c.schedule, c.schedule_extend, std::to_string(c.accordion),
                                       c.accordion_config.low, c.accordion_config.high,
                                       std::to_string(c.accordion_config.eta), std::to_string(c.accordion_config.interval),
                                       c.backend, std::to_string(c.bucket_mb), std::to_string(c.first_bucket_mb),
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
