#include "app/regime_detect.hpp"

#include "base/choice.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "cli/tool.hpp"
#include "compress/spec.hpp"
#include "io/grads.hpp"
#include "io/output.hpp"
#include "io/schedule.hpp"
#include "regime/levels.hpp"
#include "regime/summary.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <iostream>

namespace acc::app {

using namespace regime;

namespace {

// The largest batch size a schedule may set, as train-dist's --batch-size allows.
constexpr long long kMaxBatch = 1 << 20;

std::int64_t parse_batch(const std::string& option, const std::string& text) {
    try {
        size_t used = 0;
        long long value = std::stoll(text, &used);
        if (used == text.size() && value >= 1 && value <= kMaxBatch) return value;
    } catch (const std::exception&) {
    }
    throw UsageError(option + ": in batch mode this is a batch size, a whole number in [1, " +
                     std::to_string(kMaxBatch) + "], not '" + text + "'");
}

// --low or --high as read: a batch size in batch mode, else a level.
void read_level(const DetectConfig& c, const std::string& option, const std::string& text, compress::Spec& level,
                std::int64_t& batch) {
    if (c.mode == ScheduleMode::batch) {
        batch = parse_batch(option, text);
        return;
    }
    try {
        level = compress::parse_spec(text);
    } catch (const UsageError& e) {
        throw UsageError(option + ": " + e.what());
    }
}

// --low and --high as the schedule and the summary print them.
std::string low_text(const DetectConfig& c) {
    return c.mode == ScheduleMode::batch ? std::to_string(c.low_batch) : c.low.text();
}
std::string high_text(const DetectConfig& c) {
    return c.mode == ScheduleMode::batch ? std::to_string(c.high_batch) : c.high.text();
}

std::vector<std::string> texts(const std::vector<compress::Spec>& levels) {
    std::vector<std::string> out;
    for (const auto& level : levels) out.push_back(level.text());
    return out;
}

// The settings' checks, whatever gives them.
void validate_settings(DetectConfig& c) {
    regime::validate(regime::Options{c.eta, c.interval});
    const bool batch = c.mode == ScheduleMode::batch;
    if (!c.granularity) c.granularity = batch ? Granularity::model : Granularity::layer;
    if (batch && *c.granularity == Granularity::layer)
        throw UsageError("--granularity layer: batch mode decides on the whole model; use --granularity model");
    if (c.monotone && !batch) throw UsageError("--monotone: applies only to --mode batch");
    if (batch && c.high_batch < c.low_batch)
        throw UsageError("--high " + high_text(c) + " is smaller than --low " + low_text(c) +
                         "; the small batch is for critical epochs");
    if (!c.plan && !c.plan_only.empty()) throw UsageError(c.plan_only.front() + ": applies only with --plan");
    if (c.plan) {
        if (batch) throw UsageError("--plan: plans compression levels; it does not apply to --mode batch");
        // The budget is the error of Accordion's own levels, so they need an error model too.
        check_plannable("--low", c.low);
        check_plannable("--high", c.high);
    }
}

// The program's checks: the settings', and no output written over an input.
void validate(DetectConfig& c) {
    validate_settings(c);
    std::vector<NamedPath> inputs = {{"GRADS.h5", c.input}};
    if (!c.planner.comm.empty()) inputs.push_back({"--comm", c.planner.comm});
    check_distinct_files(inputs, {{"--output", c.output}});
}

std::string ratio_text(double a, double b) {
    if (!(b > 0)) return "-";
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2fx", a / b);
    return buffer;
}

std::string regimes_text(const std::vector<Regime>& regimes, std::int64_t counted) {
    if (regimes.empty()) return "none";
    std::vector<std::string> parts;
    for (const auto& r : regimes) {
        std::string span = r.first == r.last ? std::to_string(r.first)
                                             : std::to_string(r.first) + "-" + std::to_string(r.last);
        if (counted > 1) span += " (" + std::to_string(r.peak_critical) + "/" + std::to_string(counted) + ")";
        parts.push_back(span);
    }
    return join(parts, ", ");
}

// The input's norms, learning rates and steps per epoch, epoch-major.
struct Inputs {
    NormTable norms;
    std::vector<double> lr;
    std::vector<std::int64_t> steps;
    std::vector<bool> is_matrix;
    std::vector<std::vector<std::int64_t>> shapes;
    std::int64_t values = 0;  // floats in the model
};

Inputs read_inputs(const io::GradStats& grads) {
    Inputs in;
    in.norms.epochs = static_cast<std::int64_t>(grads.epochs.size());
    in.norms.columns = static_cast<std::int64_t>(grads.parameters.size());
    for (const auto& epoch : grads.epochs) {
        in.norms.values.insert(in.norms.values.end(), epoch.norm.begin(), epoch.norm.end());
        in.lr.push_back(epoch.lr);
        in.steps.push_back(epoch.steps);
    }
    for (const auto& p : grads.parameters) {
        in.is_matrix.push_back(p.is_matrix());
        in.shapes.push_back(p.shape);
        in.values += p.numel();
    }
    return in;
}

// What a mode's plan gives the summary, besides the schedule it fills.
struct Outcome {
    Decisions decisions;          // per parameter, or the model's one column in batch mode
    std::vector<bool> counted;    // the columns the summary counts
    std::vector<Regime> regimes;
    std::string line;             // the timeline
    Communication comm;
    std::string levels_line;
    nlohmann::json report;        // the mode's own JSON fields
    std::optional<PlannedSchedule> planned;  // --plan
};

Outcome plan_batch_mode(const DetectConfig& c, const Decisions& decisions, const io::GradStats& grads,
                        const Inputs& in, std::int64_t block, io::Schedule& s) {
    Outcome o;
    o.decisions = decisions;
    o.counted = {true};
    const std::int64_t low = c.low_batch, high = c.high_batch;
    BatchPlan plan = plan_batch(decisions, low, high, c.monotone);
    s.batch_size = plan.batch_size;
    s.lr_scale = plan.lr_scale;
    o.regimes = find_regimes(decisions, o.counted);
    o.line = timeline(decisions, o.counted, block);
    const double samples =
        static_cast<double>(grads.epochs[0].samples * std::max<std::int64_t>(1, grads.run.world_size));
    o.comm = batch_communication(plan, static_cast<double>(in.values), samples, low, high);
    const std::int64_t small = std::count(plan.batch_size.begin(), plan.batch_size.end(), low);
    o.levels_line = "batch " + low_text(c) + " in " + std::to_string(small) + " epochs, batch " + high_text(c) + " in " +
                    std::to_string(in.norms.epochs - small);
    o.report["batch_size"] = plan.batch_size;
    o.report["lr_scale"] = plan.lr_scale;
    return o;
}

Outcome plan_compression_mode(const DetectConfig& c, const Decisions& per_parameter, const io::GradStats& grads,
                              const Inputs& in, std::int64_t block, io::Schedule& s,
                              const std::function<void(std::string)>& warn) {
    Outcome o;
    o.decisions = per_parameter;
    o.counted = in.is_matrix;
    if (std::none_of(o.counted.begin(), o.counted.end(), [](bool b) { return b; }))
        warn("no parameter of " + c.input + " is a matrix: every parameter is scheduled 'none'");
    CompressionPlan plan = plan_compression(per_parameter, in.is_matrix, c.low, c.high);
    if (c.plan) {
        o.planned = plan_schedule(c.planner, c.low, c.high, c.input, grads, per_parameter);
        plan.levels = o.planned->levels;
        plan.level = o.planned->level;
    }
    s.levels = texts(plan.levels);
    s.level = plan.level;
    o.regimes = find_regimes(per_parameter, o.counted);
    o.line = timeline(per_parameter, o.counted, block);
    o.comm = compression_communication(plan, in.shapes, in.steps, c.low, c.high);
    std::vector<std::string> parts;
    nlohmann::json shares = nlohmann::json::object();
    for (const auto& share : level_shares(plan, o.counted)) {
        parts.push_back(share.level + " " + percent_text(share.share));
        shares[share.level] = cli::json_number(share.share);
    }
    o.levels_line = join(parts, ", ") + " of compressible parameter-epochs";
    const std::int64_t vectors = in.norms.columns - std::count(o.counted.begin(), o.counted.end(), true);
    if (vectors > 0) o.levels_line += "; " + std::to_string(vectors) + " vector parameters always none";
    o.report["level_share"] = shares;
    if (o.comm.low < o.comm.high)
        warn("--low " + c.low.text() + " sends less than --high " + c.high.text() +
             ": critical regimes will get the stronger compression");
    return o;
}

// The schedule's fields that do not depend on the mode.
io::Schedule schedule_header(const DetectConfig& c, const io::GradStats& grads, const Decisions& per_parameter) {
    io::Schedule s;
    s.header.provenance = c.provenance;
    s.mode = c.mode;
    s.eta = c.eta;
    s.interval = c.interval;
    s.granularity = granularity_name(*c.granularity);
    s.low = low_text(c);
    s.high = high_text(c);
    s.monotone = c.monotone;
    s.source = c.input;
    s.parameters = grads.parameters;
    s.epochs = static_cast<std::int64_t>(grads.epochs.size());
    s.critical = per_parameter.critical;
    s.ratio = per_parameter.ratio;
    for (Reason r : per_parameter.reason) s.reason.push_back(static_cast<std::int8_t>(r));
    return s;
}

// --plan's totals over the run: floats sent per worker, and the cost (floats or
// modelled seconds), for the planned levels and for Accordion's, weighted by each
// epoch's steps (as the data-sent line; per step when the input has none).
struct PlanTotals {
    double floats = 0, uniform_floats = 0, cost = 0, uniform_cost = 0;
    std::int64_t kept_uniform = 0;
};

PlanTotals plan_totals(const PlannedSchedule& plan, const Inputs& in) {
    PlanTotals t;
    std::int64_t steps = 0;
    for (auto n : in.steps) steps += n;
    for (const auto& r : plan.epochs) {
        const double w = steps == 0 ? 1.0 / static_cast<double>(plan.epochs.size())
                                    : static_cast<double>(in.steps[static_cast<size_t>(r.epoch)]);
        t.floats += w * r.floats;
        t.uniform_floats += w * r.uniform_floats;
        t.cost += w * r.cost;
        t.uniform_cost += w * r.uniform_cost;
        t.kept_uniform += r.kept_uniform ? 1 : 0;
    }
    return t;
}

std::string seconds_text(double seconds) { return short_number(seconds * 1e3) + " ms"; }

// One epoch's comparison with Accordion's levels, per step.
std::string planned_epoch_text(const PlannedSchedule& plan, const PlannedEpoch& r) {
    std::string text = si_count(r.floats) + " floats/step vs " + si_count(r.uniform_floats) + " (" +
                       ratio_text(r.uniform_floats, r.floats) + " less)";
    if (plan.seconds)
        text = "exchange " + seconds_text(r.cost) + " vs " + seconds_text(r.uniform_cost) + " (" +
               ratio_text(r.uniform_cost, r.cost) + " faster), " + text;
    if (r.kept_uniform) text += ", Accordion's levels kept (" + std::string(plan_status_name(r.status)) + ")";
    return text;
}

void print_plan(const DetectConfig& c, const Inputs& in, const PlannedSchedule& plan) {
    spdlog::info("  planned per layer: {} within {} x the {} of Accordion's levels; cost {}; epoch e predicted by "
                 "the profile of epoch e-1",
                 join(texts(c.planner.candidates), ", "), short_number(c.planner.budget_factor),
                 error_measure_name(c.planner.error), plan.seconds ? "modelled exchange time" : "floats sent");
    if (plan.seconds) spdlog::info("    network: {}", plan.network);
    // Runs of epochs with the same line, so that long runs stay readable.
    for (size_t i = 0; i < plan.epochs.size();) {
        const std::string text = planned_epoch_text(plan, plan.epochs[i]);
        size_t j = i + 1;
        while (j < plan.epochs.size() && planned_epoch_text(plan, plan.epochs[j]) == text) ++j;
        const std::string span = j == i + 1 ? "epoch " + std::to_string(i)
                                            : "epochs " + std::to_string(i) + "-" + std::to_string(j - 1);
        spdlog::info("    {}: {}", span, text);
        i = j;
    }
    const PlanTotals t = plan_totals(plan, in);
    std::string total = si_count(t.floats) + " floats per worker vs Accordion's " + si_count(t.uniform_floats) +
                        " (" + ratio_text(t.uniform_floats, t.floats) + " less)";
    if (plan.seconds)
        total = "modelled exchange " + short_number(t.cost) + " s vs " + short_number(t.uniform_cost) + " s (" +
                ratio_text(t.uniform_cost, t.cost) + " faster), " + total;
    spdlog::info("  planned in total: {}; {} of {} epochs kept Accordion's levels", total, t.kept_uniform,
                 plan.epochs.size());
}

nlohmann::json plan_json(const DetectConfig& c, const Inputs& in, const PlannedSchedule& plan) {
    nlohmann::json epochs = nlohmann::json::array();
    for (const auto& r : plan.epochs)
        epochs.push_back({{"epoch", r.epoch},
                          {"profile_epoch", r.profile_epoch},
                          {"budget", cli::json_number(r.budget)},
                          {"uniform_error", cli::json_number(r.uniform_error)},
                          {"error", cli::json_number(r.error)},
                          {"floats_per_step", cli::json_number(r.floats)},
                          {"uniform_floats_per_step", cli::json_number(r.uniform_floats)},
                          {"cost_per_step", cli::json_number(r.cost)},
                          {"uniform_cost_per_step", cli::json_number(r.uniform_cost)},
                          {"status", plan_status_name(r.status)},
                          {"kept_uniform", r.kept_uniform}});
    const PlanTotals t = plan_totals(plan, in);
    nlohmann::json out = {{"candidates", texts(c.planner.candidates)},
                          {"error", error_measure_name(c.planner.error)},
                          {"budget_factor", cli::json_number(c.planner.budget_factor)},
                          {"bins", c.planner.bins},
                          {"cost", plan.seconds ? "seconds" : "floats"},
                          {"epochs", epochs},
                          {"total",
                           {{"floats", cli::json_number(t.floats)},
                            {"uniform_floats", cli::json_number(t.uniform_floats)},
                            {"cost", cli::json_number(t.cost)},
                            {"uniform_cost", cli::json_number(t.uniform_cost)},
                            {"kept_uniform_epochs", t.kept_uniform}}}};
    if (plan.seconds) out["comm"] = c.planner.comm;
    return out;
}

// How many columns a reason's count is out of: 1 for whole-model decisions.
std::int64_t reason_columns(const DetectConfig& c, const Outcome& o) {
    if (c.mode == ScheduleMode::batch || *c.granularity == Granularity::model) return 1;
    return std::count(o.counted.begin(), o.counted.end(), true);
}

void print_summary(const DetectConfig& c, const Inputs& in, const Outcome& o, std::int64_t block,
                   const std::vector<CriticalReasons>& why) {
    const bool batch = c.mode == ScheduleMode::batch;
    const std::int64_t E = in.norms.epochs, counted = std::count(o.counted.begin(), o.counted.end(), true);
    const std::string decided = batch || *c.granularity == Granularity::model ? "whole-model decisions" : "per-parameter decisions";
    const std::string unit = o.comm.per_step ? " per step (the input has no step counts)" : "";
    spdlog::info("{} -> {}", c.input, c.output);
    spdlog::info("  {} epochs, {} parameters ({} values); eta {}, interval {}, {}", E, in.norms.columns,
                 with_commas(in.values), short_number(c.eta), c.interval, decided);
    spdlog::info("  timeline, 1 character = {} epoch{} (# all critical, + most, - some, . none):", block,
                 block == 1 ? "" : "s");
    spdlog::info("    epoch 0 |{}| {}", o.line, E - 1);
    spdlog::info("  critical regimes (epochs{}): {}",
                 batch || counted <= 1 ? "" : ", peak critical/compressible parameters",
                 regimes_text(o.regimes, batch ? 1 : counted));
    // Why each run of critical epochs is critical: the rule's reasons, so that
    // a critical epoch after a learning-rate decay does not look like a norm change.
    constexpr size_t kWhyLines = 12;
    if (!why.empty()) spdlog::info("  why critical:");
    for (size_t i = 0; i < why.size() && i < kWhyLines; ++i)
        spdlog::info("    {}", reasons_text(why[i], in.lr, c.eta, c.interval, reason_columns(c, o)));
    if (why.size() > kWhyLines) spdlog::info("    ... and {} more (--json lists them all)", why.size() - kWhyLines);
    spdlog::info("  levels: {}", o.levels_line);
    if (o.planned) print_plan(c, in, *o.planned);
    spdlog::info("  data sent per worker{}: {} floats ({} throughout: {}, {} more; {} throughout: {})", unit,
                 si_count(o.comm.schedule), (batch ? "batch " : "") + low_text(c), si_count(o.comm.low),
                 ratio_text(o.comm.low, o.comm.schedule), (batch ? "batch " : "") + high_text(c), si_count(o.comm.high));
}

nlohmann::json reasons_json(const DetectConfig& c, const Inputs& in, const Outcome& o,
                            const std::vector<CriticalReasons>& why) {
    nlohmann::json reasons = nlohmann::json::array();
    for (const auto& run : why) {
        nlohmann::json names = nlohmann::json::array();
        for (const auto& [reason, n] : run.reasons) names.push_back({{"reason", reason_name(reason)}, {"parameters", n}});
        nlohmann::json entry = {{"first", run.first},
                                {"last", run.last},
                                {"reasons", names},
                                {"text", reasons_text(run, in.lr, c.eta, c.interval, reason_columns(c, o))}};
        if (run.decay_epoch >= 0) entry["decay_epoch"] = run.decay_epoch;
        reasons.push_back(entry);
    }
    return reasons;
}

void print_json(const DetectConfig& c, const io::GradStats& grads, const Inputs& in, const Outcome& o,
                std::int64_t block, const std::vector<CriticalReasons>& why, const std::vector<std::string>& warnings) {
    nlohmann::json report = o.report;
    report["input"] = c.input;
    report["output"] = c.output;
    report["mode"] = io::schedule_mode_name(c.mode);
    report["eta"] = cli::json_number(c.eta);
    report["interval"] = c.interval;
    report["granularity"] = granularity_name(*c.granularity);
    report["low"] = low_text(c);
    report["high"] = high_text(c);
    report["monotone"] = c.monotone;
    report["epochs"] = in.norms.epochs;
    report["parameters"] = in.norms.columns;
    report["values"] = in.values;
    report["complete_input"] = grads.complete;
    report["timeline"] = {{"epochs_per_character", block}, {"line", o.line}};
    report["critical_per_epoch"] = critical_per_epoch(o.decisions, o.counted);
    report["counted_parameters"] = c.mode == ScheduleMode::batch ? 1 : std::count(o.counted.begin(), o.counted.end(), true);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : o.regimes)
        list.push_back({{"first", r.first}, {"last", r.last}, {"peak_critical", r.peak_critical}});
    report["critical_regimes"] = list;
    report["critical_reasons"] = reasons_json(c, in, o, why);
    report["communication"] = {
        {"unit", o.comm.per_step ? "floats per step" : "floats per worker"},
        {"schedule", cli::json_number(o.comm.schedule)},
        {"low", cli::json_number(o.comm.low)},
        {"high", cli::json_number(o.comm.high)},
        {"low_over_schedule", cli::json_number(o.comm.schedule > 0 ? o.comm.low / o.comm.schedule : 0.0)}};
    if (o.planned) report["plan"] = plan_json(c, in, *o.planned);
    report["warnings"] = warnings;
    std::cout << report.dump(2) << std::endl;
}

}  // namespace

const std::vector<std::string>& granularity_names() {
    static const std::vector<std::string> names{"layer", "model"};
    return names;
}

const std::string& granularity_name(Granularity granularity) { return choice_name(granularity_names(), granularity); }

namespace {

Granularity parse_granularity(const std::string& text) {
    return parse_choice<Granularity>(granularity_names(), text, "--granularity");
}

ScheduleMode parse_mode(const std::string& text) { return io::parse_schedule_mode(text, "--mode"); }

}  // namespace

void add_detect_options(CLI::App& app, DetectConfig& config) {
    app.add_option("GRADS.h5", config.input, "Gradient-statistics file written by grad-dump")->required();
    app.add_option("--eta", config.eta, "Critical when the relative change of the gradient norm is >= ETA")
        ->check(cli::number(0, kMaxEta, true));
    app.add_option("--interval", config.interval, "Epochs between decisions")
        ->check(cli::whole_number(1, kMaxInterval));
    cli::add_typed_option(app, "--mode", config.mode, parse_mode,
                          "What the schedule switches: compression level or batch size: " +
                              choice_list(io::schedule_mode_names()) + " [" + io::schedule_mode_name(config.mode) +
                              "]")
        ->type_name("MODE");
    // After --mode, so that its value is known when these are read.
    app.add_option_function<std::string>(
        "--low", [&config](const std::string& text) { read_level(config, "--low", text, config.low, config.low_batch); },
        "Level for critical epochs: a compressor spec [" + compress::kDefaultLow.text() +
            "], or in batch mode the small batch size [512]");
    app.add_option_function<std::string>(
        "--high",
        [&config](const std::string& text) { read_level(config, "--high", text, config.high, config.high_batch); },
        "Level elsewhere: a compressor spec [" + compress::kDefaultHigh.text() +
            "], or in batch mode the large batch size [4096]");
    cli::add_typed_option(app, "--granularity", config.granularity, parse_granularity,
                          "Decide per parameter tensor (layer) or on the whole model (model) [layer; model in "
                          "batch mode]")
        ->type_name("GRANULARITY");
    app.add_flag("--monotone", config.monotone, "Batch mode: never return to the small batch once grown");
    const std::string plan = "Per-layer planning (docs/planner.md)";
    app.add_option_function<std::string>(
           "--plan",
           [&config](const std::string& v) {
               config.planner.candidates = parse_plan_candidates(v);
               config.plan = true;
           },
           "Plan each parameter's level per epoch among these levels (e.g. powersgd:1,powersgd:2,powersgd:4: "
           "none, powersgd:RANK, topk:F) within the error of Accordion's levels; needs grad-dump --profile")
        ->group(plan);
    app.add_option_function<std::string>(
           "--plan-error",
           [&config](const std::string& v) {
               config.planner.error = regime::parse_error_measure(v);
               config.plan_only.push_back("--plan-error");
           },
           "How residual norms add up to the error the budget limits [summed_norms]")
        ->type_name("MEASURE")
        ->group(plan);
    app.add_option_function<double>(
           "--plan-budget-factor",
           [&config](double v) {
               config.planner.budget_factor = v;
               config.plan_only.push_back("--plan-budget-factor");
           },
           "Budget: this times the error of Accordion's levels in each epoch [1]")
        ->check(cli::number(0, 1e6))
        ->group(plan);
    app.add_option_function<std::int64_t>(
           "--plan-bins",
           [&config](std::int64_t v) {
               config.planner.bins = v;
               config.plan_only.push_back("--plan-bins");
           },
           "Error bins of the dynamic program; it loses at most layers/bins of the budget [10000]")
        ->check(cli::whole_number(1, regime::kMaxErrorBins))
        ->group(plan);
    app.add_option_function<std::string>(
           "--comm",
           [&config](const std::string& v) {
               config.planner.comm = v;
               config.plan_only.push_back("--comm");
           },
           "Cost the levels by the modelled time of their collectives on this comm-profile file, not by "
           "floats sent")
        ->group(plan);
    app.add_option("-o,--output", config.output, "Schedule file to write");
    app.add_flag("--force", config.force, "Replace an output file that is read-only or not an HDF5 file");
    app.add_flag("--json", config.json, "Also print the summary as JSON on stdout");
    app.footer("Compressor specs:\n" + compress::spec_help());
}

namespace {

// A schedule made from gradient statistics, with what the summary reports of it.
struct Detection {
    io::Schedule schedule;
    Inputs in;
    Outcome outcome;
    std::int64_t block = 1;
    std::vector<std::string> warnings;
};

// Accordion's rule (and --plan's planner) on `grads` with settings already checked.
Detection detect_all(const DetectConfig& c, const io::GradStats& grads) {
    Detection d;
    d.in = read_inputs(grads);
    const Inputs& in = d.in;
    const std::int64_t E = in.norms.epochs;
    auto warn = [&](const std::string& text) {
        spdlog::warn(text);
        d.warnings.push_back(text);
    };
    if (!grads.complete)
        warn(c.input + " is marked incomplete: its run stopped after " + std::to_string(E) +
             " epochs; the schedule covers those epochs only");
    if (E <= c.interval + 1)
        warn(c.input + " holds " + std::to_string(E) + " epochs, no more than one interval (" +
             std::to_string(c.interval) + ") after epoch 0: every epoch is critical");

    const Options options{c.eta, c.interval};
    const bool model = *c.granularity == Granularity::model;
    const Decisions decisions = model ? detect(whole_model(in.norms), in.lr, options) : detect(in.norms, in.lr, options);
    const Decisions per_parameter = model ? decisions.broadcast(in.norms.columns) : decisions;
    d.schedule = schedule_header(c, grads, per_parameter);
    d.block = timeline_block(E, c.interval);
    d.outcome = c.mode == ScheduleMode::batch
                    ? plan_batch_mode(c, decisions, grads, in, d.block, d.schedule)
                    : plan_compression_mode(c, per_parameter, grads, in, d.block, d.schedule, warn);
    return d;
}

}  // namespace

int run_detect(DetectConfig c) {
    validate(c);
    const std::vector<io::OutputClaim> claims = io::claim_outputs({c.output}, "regime-detect", c.force);
    const io::GradStats grads = io::read_grads(c.input);
    const Detection d = detect_all(c, grads);
    io::write_schedule(c.output, d.schedule);

    const std::vector<CriticalReasons> why = critical_reasons(d.outcome.decisions, d.outcome.counted, d.in.lr);
    print_summary(c, d.in, d.outcome, d.block, why);
    if (c.json) print_json(c, grads, d.in, d.outcome, d.block, why, d.warnings);
    return 0;
}

namespace {

// The shortest text that reads back as `value` exactly.
std::string exact_text(double value) {
    for (int digits = 1; digits < 17; ++digits) {
        std::string text = short_number(value, digits);
        if (std::strtod(text.c_str(), nullptr) == value) return text;
    }
    return short_number(value, 17);
}

}  // namespace

std::vector<std::string> detect_arguments(const DetectRequest& r) {
    std::vector<std::string> args{r.grads};
    auto add = [&](const char* option, const std::optional<std::string>& value) {
        if (value) args.insert(args.end(), {option, *value});
    };
    if (r.eta) args.insert(args.end(), {"--eta", exact_text(*r.eta)});
    if (r.interval) args.insert(args.end(), {"--interval", std::to_string(*r.interval)});
    add("--mode", r.mode);
    add("--low", r.low);
    add("--high", r.high);
    add("--granularity", r.granularity);
    if (r.monotone) args.push_back("--monotone");
    return args;
}

DetectConfig detect_config(const DetectRequest& r) {
    DetectConfig c;
    c.input = r.grads;
    if (r.eta) c.eta = *r.eta;
    if (r.interval) c.interval = *r.interval;
    // In the options' order: --mode decides how --low and --high read.
    if (r.mode) c.mode = parse_mode(*r.mode);
    if (r.low) read_level(c, "--low", *r.low, c.low, c.low_batch);
    if (r.high) read_level(c, "--high", *r.high, c.high, c.high_batch);
    if (r.granularity) c.granularity = parse_granularity(*r.granularity);
    c.monotone = r.monotone;
    c.provenance.producer = std::string("regime-detect ") + cli::version();
    std::vector<std::string> argv{"regime-detect"};
    for (const std::string& a : detect_arguments(r)) argv.push_back(a);
    std::vector<const char*> pointers;
    for (const std::string& a : argv) pointers.push_back(a.c_str());
    c.provenance.command_line = command_line(static_cast<int>(pointers.size()), pointers.data());
    validate_settings(c);
    return c;
}

io::Schedule detect_schedule(DetectConfig c, const io::GradStats& grads) {
    validate_settings(c);
    return detect_all(c, grads).schedule;
}

}  // namespace acc::app
