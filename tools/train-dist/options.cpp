// train-dist's command-line options: CLI11 fills a TrainDistConfig, levels parsed
// into compress::Spec where they are read. No LibTorch here.
#include "train-dist/options.hpp"

#include "base/choice.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "app/rank_options.hpp"
#include "app/regime_plan.hpp"
#include "app/training_options.hpp"
#include "cli/tool.hpp"
#include "compress/spec.hpp"
#include "regime/detect.hpp"
#include "regime/gravac.hpp"
#include "train/config.hpp"

#include <CLI/CLI.hpp>

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <utility>

namespace acc::app {
namespace {

// 64 GiB: buckets are buffers in memory; a larger one cannot be meant.
constexpr double kMaxBucketMb = 65536;

// A level option: parsed into a Spec once, where it is read, so that nothing later handles its text.
CLI::Option* add_spec_option(CLI::App& app, const std::string& name, const std::string& description,
                             std::function<void(compress::Spec)> store) {
    return app
        .add_option_function<std::string>(
            name,
            [name, store](const std::string& text) {
                try {
                    store(compress::parse_spec(text));
                } catch (const UsageError& e) {
                    throw CLI::ValidationError(name, e.what());
                }
            },
            description)
        ->type_name("SPEC");
}

const std::string kCommunication = "Communication";

// How each matrix's gradient is sent: one of --compress, --schedule, --accordion, --gravac.
// Returns the options that --accordion's and --gravac's settings need.
std::pair<CLI::Option*, CLI::Option*> add_level_options(CLI::App& app, TrainDistConfig& c) {
    const std::string& group = kCommunication;
    auto* compress = add_spec_option(app, "--compress",
                                     "Compress every matrix parameter's gradient with this level: " +
                                         compress::spec_list() + " [none]",
                                     [&c](compress::Spec s) { c.compress = std::move(s); })
                         ->group(group);
    auto* schedule = app.add_option("--schedule", c.schedule,
                                    "Follow a regime-detect schedule: its level per epoch and parameter, or its "
                                    "batch size and learning-rate scale per epoch")
                         ->type_name("SCHED.h5")
                         ->group(group);
    cli::add_typed_option(
        app, "--schedule-extend", c.schedule_extend_last, [](const std::string&) { return true; },
        "When the schedule covers fewer epochs than --epochs: 'last' repeats its last epoch")
        ->check(CLI::IsMember({"last"}))
        ->group(group);
    auto* accordion = app.add_flag("--accordion", c.accordion,
                                   "Run Accordion's rule online: per parameter, --low in critical regimes and "
                                   "--high elsewhere, decided on rank 0 every --interval epochs")
                          ->group(group);
    auto* gravac = cli::add_typed_option(app, "--gravac", c.gravac, regime::parse_gravac_family,
                                  "Run GraVAC: every step, send this compressor's gradient at the largest "
                                  "compression factor whose gain ||C(g)||^2/||g||^2 is at least --gravac-epsilon: " +
                                      choice_list(regime::gravac_family_names()) +
                                      " (factor f is rank max(1, floor(rows*cols/(f*(rows+cols)))) for powersgd's "
                                      "matrices)")
                       ->type_name("FAMILY")
                       ->group(group);
    auto* automatic = app.add_flag("--auto", c.automatic,
                                   "Choose each parameter's level by predicted step time: measure the link, the "
                                   "compute and the codecs in the run, plan within the error budget of Accordion's "
                                   "--low and --high, and send uncompressed where no plan is predicted faster "
                                   "(docs/auto.md)")
                          ->group(group);
    compress->excludes(schedule)->excludes(accordion)->excludes(gravac)->excludes(automatic);
    schedule->excludes(accordion)->excludes(gravac)->excludes(automatic);
    accordion->excludes(gravac)->excludes(automatic);
    gravac->excludes(automatic);
    return {accordion, gravac};
}

void add_auto_options(CLI::App& app, TrainDistConfig& c) {
    const std::string group = "Automatic (with --auto)";
    std::vector<std::string> defaults;
    for (const auto& level : c.auto_config.levels) defaults.push_back(level.text());
    app.add_option_function<std::string>(
           "--levels",
           [&c](const std::string& text) { c.auto_config.levels = parse_plan_candidates(text, "--levels"); },
           "Candidate levels besides none, --low and --high, comma-separated: powersgd:RANK or topk:F with F on "
           "the profile's grid")
        ->type_name("LIST")
        ->default_str(join(defaults, ","))
        ->group(group);
    app.add_option("--auto-margin", c.auto_config.margin,
                   "A compressed plan must be predicted at least this share faster than uncompressed; of the plans "
                   "within this share of the fastest, the one of least error is in force; in [0, 1)")
        ->check(cli::number(0, 1, false))
        ->group(group);
    app.add_option("--auto-drift", c.auto_config.drift,
                   "Measure again when an epoch's step time differs from its prediction by more than this share")
        ->check(cli::number(0, 1e6, true))
        ->group(group);
}

void add_accordion_options(CLI::App& app, TrainDistConfig& c) {
    const std::string accordion_group = "Accordion (with --accordion or --auto)";
    // They need --accordion or --auto, which validate() checks: CLI11 has no "either".
    auto given = [&c](const char* name) {
        return [&c, name](const std::string&) {
            if (c.accordion_option.empty()) c.accordion_option = name;
        };
    };
    add_spec_option(app, "--low", "Level of critical regimes (little compression)",
                    [&c](compress::Spec s) {
                        c.accordion_config.low = std::move(s);
                        if (c.accordion_option.empty()) c.accordion_option = "--low";
                    })
        ->default_str(c.accordion_config.low.text())
        ->group(accordion_group);
    add_spec_option(app, "--high", "Level elsewhere (more compression)",
                    [&c](compress::Spec s) {
                        c.accordion_config.high = std::move(s);
                        if (c.accordion_option.empty()) c.accordion_option = "--high";
                    })
        ->default_str(c.accordion_config.high.text())
        ->group(accordion_group);
    app.add_option("--eta", c.accordion_config.eta,
                   "A relative change of the gradient norm of at least eta marks a critical regime")
        ->check(cli::number(0, regime::kMaxEta, true))
        ->each(given("--eta"))
        ->group(accordion_group);
    app.add_option("--interval", c.accordion_config.interval, "Epochs between decisions")
        ->check(cli::whole_number(1, regime::kMaxInterval))
        ->each(given("--interval"))
        ->group(accordion_group);
}

void add_gravac_options(CLI::App& app, TrainDistConfig& c, CLI::Option* gravac) {
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
    // No check of its own: regime::validate's range, [0, 1), which a CLI11 range cannot state.
    app.add_option("--gravac-omega", g.omega,
                   "Tolerance of the theta_min raise and the throughput saturation rules, a fraction in [0, 1) "
                   "(0.01: 1 %)")
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-theta-s", g.theta_s, "First candidate factor = theta_s x theta_min")
        ->check(cli::number(1, 1e6, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_option("--gravac-smoothing", g.smoothing,
                   "EWMA weight of a step's gain, in (0, 1]; by default the paper's rule min(1, N/100) for N ranks "
                   "(its 32 workers: 0.32)")
        ->default_str("N/100")
        ->check(cli::number(0, 1, true))
        ->needs(gravac)
        ->group(gravac_group);
    app.add_flag("--gravac-reset-gains", g.reset_gains,
                 "Restart the candidate's gain average when its factor changes (theta_min takes over the "
                 "candidate's when raised to it), so that no average mixes factors (off: the averages run on across factor changes)")
        ->needs(gravac)
        ->group(gravac_group);
    cli::add_typed_option(app, "--gravac-policy", g.policy, regime::parse_gravac_policy,
                          "How the candidate grows: exponential (10x, 20x, 40x, 160x, ...) or geometric (10x, 20x, "
                          "40x, 80x, ...)")
        ->default_str(regime::gravac_policy_name(g.policy))
        ->needs(gravac)
        ->group(gravac_group);
    cli::add_typed_option(app, "--gravac-throughput", g.statistic, regime::parse_gravac_statistic,
                          "A factor's compression throughput from a window's steps: median or mean")
        ->default_str(regime::gravac_statistic_name(g.statistic))
        ->needs(gravac)
        ->group(gravac_group);
    cli::add_typed_option(app, "--gravac-gain", g.gain, regime::parse_gravac_gain,
                          "A step's compression gain: squared (||C(g)||^2 / ||g||^2, Algorithm 1's) or norm "
                          "(||C(g)|| / ||g||, the authors' released code's)")
        ->default_str(regime::gravac_gain_name(g.gain))
        ->needs(gravac)
        ->group(gravac_group);

}

void add_network_options(CLI::App& app, TrainDistConfig& c) {
    const std::string& group = kCommunication;
    add_backend_option(app, c.backend, group);
    app.add_option("--bucket-mb", c.bucket_mb,
                   "MiB of gradients per bucket (allreduced, or compressed) launched during the backward pass")
        ->check(cli::number(0, kMaxBucketMb, true))
        ->group(group);
    app.add_option("--first-bucket-mb", c.first_bucket_mb, "MiB of the first (last layers') bucket")
        ->check(cli::number(0, kMaxBucketMb, true))
        ->group(group);
    app.add_option("--dgc-warmup-epochs", c.dgc_warmup_epochs,
                   "dgc:F keeps exponentially fewer entries over the first N epochs, down to F")
        ->check(cli::whole_number(0, 1000000))
        ->group(group);

}

void add_output_options(CLI::App& app, TrainDistConfig& c) {
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
    app.add_flag("--force", c.force, "Replace an output file that is read-only or not an HDF5 file")->group(output);
    app.add_flag("--json", c.json, "Also print the summary as JSON on stdout")->group(output);
}

// GraVAC's rows: its numbers with all 17 digits, so that any change shows.
void add_gravac_settings(Settings& s, const TrainDistConfig& c) {
    const regime::GravacSettings& g = c.gravac_settings;
    auto n = [](double v) {
        std::ostringstream out;
        out.precision(17);
        out << v;
        return out.str();
    };
    s.add("--gravac-theta-min", n(g.theta_min), true, true);
    s.add("--gravac-theta-max", n(g.theta_max), true, true);
    s.add("--gravac-epsilon", n(g.epsilon), true, true);
    s.add("--gravac-window", std::to_string(g.window), true, true);
    s.add("--gravac-omega", n(g.omega), true, true);
    s.add("--gravac-theta-s", n(g.theta_s), true, true);
    s.add("--gravac-smoothing", g.smoothing == 0 ? std::string("default") : n(g.smoothing), true, true);
    s.add("--gravac-policy", regime::gravac_policy_name(g.policy), true, true);
    s.add("--gravac-throughput", regime::gravac_statistic_name(g.statistic), true, true);
    s.add("--gravac-reset-gains", setting_flag(g.reset_gains), true, true);
    s.add("--gravac-gain", regime::gravac_gain_name(g.gain), true, true);
}

}  // namespace

Settings train_dist_settings(const TrainDistConfig& c, bool batch_mode) {
    Settings s;
    add_training_settings(s, c.train, !batch_mode);
    s.add("--dgc-warmup-epochs", std::to_string(c.dgc_warmup_epochs), true, true);
    s.add("--schedule-extend", c.schedule_extend_last ? "last" : "none", true, true);
    // Always a row, so that resuming a GraVAC run without --gravac (or the reverse) names it.
    s.add("--gravac", c.gravac ? regime::gravac_family_name(*c.gravac) : "(not given)", true, true);
    if (c.gravac) add_gravac_settings(s, c);
    // Accordion's rule decides the levels: a resume must keep it, and the ranks must agree even unused.
    s.add("--eta", fmt::format("{}", c.accordion_config.eta), true, c.accordion || c.automatic);
    s.add("--interval", std::to_string(c.accordion_config.interval), true, c.accordion || c.automatic);
    if (c.automatic) {
        s.add("--auto-margin", setting_number(c.auto_config.margin), true, false);
        s.add("--auto-drift", setting_number(c.auto_config.drift), true, false);
    }
    // What a resume compares through the levels instead ("levels [...]", the driver's row).
    s.add("--compress", c.compress ? c.compress->text() : "", true, false);
    s.add("--schedule", c.schedule, true, false);
    s.add("--accordion", setting_flag(c.accordion), true, false);
    s.add("--auto", setting_flag(c.automatic), true, false);
    s.add("--low", c.accordion_config.low.text(), true, false);
    s.add("--high", c.accordion_config.high.text(), true, false);
    // Ranks exchange their buckets and files together; a resume may change how.
    s.add("--backend", c.backend ? comm::backend_name(*c.backend) : "", true, false);
    s.add("--bucket-mb", setting_number(c.bucket_mb), true, false);
    s.add("--first-bucket-mb", setting_number(c.first_bucket_mb), true, false);
    s.add("--resume", setting_flag(c.resume), true, false);
    return s;
}

void validate(const TrainDistConfig& c) {
    train::TrainConfig t = c.train;
    // A batch schedule may set batches larger than --batch-size, which micro-batches then split.
    if (!c.schedule.empty() && !c.batch_size_given) t.batch_size = std::max(t.batch_size, t.micro_batch_size);
    train::validate(t);
    const int modes = (c.compress ? 1 : 0) + (!c.schedule.empty() ? 1 : 0) + (c.accordion ? 1 : 0) +
                      (c.gravac ? 1 : 0);
    if (modes + (c.automatic ? 1 : 0) > 1)
        throw UsageError("--compress, --schedule, --accordion, --gravac and --auto: choose one");
    if (!c.accordion_option.empty() && !c.accordion && !c.automatic)
        throw UsageError(c.accordion_option + ": needs --accordion or --auto");
    if (c.gravac) regime::validate(gravac_settings(c, 1));
    if (c.schedule_extend_last && c.schedule.empty()) throw UsageError("--schedule-extend: needs --schedule");
    if (c.accordion || c.automatic) {
        const AccordionConfig& a = c.accordion_config;
        regime::validate(regime::Options{a.eta, a.interval});
    }
    if (c.automatic) {
        check_plannable("--low", c.accordion_config.low);
        check_plannable("--high", c.accordion_config.high);
        plan::check_auto_options(c.auto_config.margin, c.auto_config.drift, "--auto-margin", "--auto-drift");
    }
    comm::run_backend(c.backend, c.train.device);
    if (!(c.bucket_mb > 0) || !std::isfinite(c.bucket_mb)) throw UsageError("--bucket-mb: must be a number > 0");
    if (!(c.first_bucket_mb > 0) || !std::isfinite(c.first_bucket_mb))
        throw UsageError("--first-bucket-mb: must be a number > 0");
    if (c.dgc_warmup_epochs < 0) throw UsageError("--dgc-warmup-epochs: must be >= 0");
    if (c.metrics.empty()) throw UsageError("--metrics: must name a file");
    check_distinct_files({{"--schedule", c.schedule}},
                         {{"--metrics", c.metrics}, {"checkpoint", checkpoint_path(c)}, {"--trace", c.train.trace}});
}

std::string checkpoint_path(const TrainDistConfig& c) {
    // Named after the metrics file, so that runs sharing a directory keep their own.
    const std::filesystem::path metrics(c.metrics);
    const std::filesystem::path dir =
        c.checkpoint_dir.empty() ? metrics.parent_path() : std::filesystem::path(c.checkpoint_dir);
    return (dir / checkpoint_beside(metrics.filename().string())).string();
}

void add_train_dist_options(CLI::App& app, TrainDistConfig& c) {
    add_train_options(app, c.train);
    CLI::Option* batch = app.get_option("--batch-size");
    batch->description("Samples per step and rank (text: parallel streams per rank); a batch schedule sets it");
    batch->each([&c](const std::string&) { c.batch_size_given = true; });
    const auto [accordion, gravac] = add_level_options(app, c);
    (void)accordion;
    add_accordion_options(app, c);
    add_auto_options(app, c);
    add_gravac_options(app, c, gravac);
    add_network_options(app, c);
    add_output_options(app, c);
    add_rendezvous_options(app, c.rendezvous);
}

}  // namespace acc::app
