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

}  // namespace

// --low and --high as the schedule and the summary print them.
std::string low_text(const DetectConfig& c) {
    return c.mode == ScheduleMode::batch ? std::to_string(c.low_batch) : c.low.text();
}
std::string high_text(const DetectConfig& c) {
    return c.mode == ScheduleMode::batch ? std::to_string(c.high_batch) : c.high.text();
}

std::vector<std::string> spec_texts(const std::vector<compress::Spec>& levels) {
    std::vector<std::string> out;
    for (const auto& level : levels) out.push_back(level.text());
    return out;
}

namespace {

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

}  // namespace

// The program's checks: the settings', and no output written over an input.
void validate_detect(DetectConfig& c) {
    validate_settings(c);
    std::vector<NamedPath> inputs = {{"GRADS.h5", c.input}};
    if (!c.planner.comm.empty()) inputs.push_back({"--comm", c.planner.comm});
    check_distinct_files(inputs, {{"--output", c.output}});
}

namespace {


DetectInputs read_inputs(const io::GradStats& grads) {
    DetectInputs in;
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


DetectOutcome plan_batch_mode(const DetectConfig& c, const Decisions& decisions, const io::GradStats& grads,
                        const DetectInputs& in, std::int64_t block, io::Schedule& s) {
    DetectOutcome o;
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

DetectOutcome plan_compression_mode(const DetectConfig& c, const Decisions& per_parameter, const io::GradStats& grads,
                              const DetectInputs& in, std::int64_t block, io::Schedule& s,
                              const std::function<void(std::string)>& warn) {
    DetectOutcome o;
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
    s.levels = spec_texts(plan.levels);
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

// Accordion's rule (and --plan's planner) on `grads` with settings already checked.
Detection detect_all(const DetectConfig& c, const io::GradStats& grads) {
    Detection d;
    d.in = read_inputs(grads);
    const DetectInputs& in = d.in;
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
