#include "regime-detect/driver.hpp"

#include "base/text.hpp"
#include "cli/json.hpp"
#include "io/grads.hpp"
#include "io/output.hpp"
#include "io/schedule.hpp"
#include "regime/summary.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace acc::app {

using namespace regime;

namespace {

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


// --plan's totals over the run: floats sent per worker, and the cost (floats or
// modelled seconds), for the planned levels and for Accordion's, weighted by each
// epoch's steps (as the data-sent line; per step when the input has none).
struct PlanTotals {
    double floats = 0, uniform_floats = 0, cost = 0, uniform_cost = 0;
    std::int64_t kept_uniform = 0;
};

PlanTotals plan_totals(const PlannedSchedule& plan, const DetectInputs& in) {
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

void print_plan(const DetectConfig& c, const DetectInputs& in, const PlannedSchedule& plan) {
    spdlog::info("  planned per layer: {} within {} x the {} of Accordion's levels; cost {}; epoch e predicted by "
                 "the profile of epoch e-1",
                 join(spec_texts(c.planner.candidates), ", "), short_number(c.planner.budget_factor),
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

nlohmann::json plan_json(const DetectConfig& c, const DetectInputs& in, const PlannedSchedule& plan) {
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
    nlohmann::json out = {{"candidates", spec_texts(c.planner.candidates)},
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
std::int64_t reason_columns(const DetectConfig& c, const DetectOutcome& o) {
    if (c.mode == ScheduleMode::batch || *c.granularity == Granularity::model) return 1;
    return std::count(o.counted.begin(), o.counted.end(), true);
}

void print_summary(const DetectConfig& c, const DetectInputs& in, const DetectOutcome& o, std::int64_t block,
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

nlohmann::json reasons_json(const DetectConfig& c, const DetectInputs& in, const DetectOutcome& o,
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

void print_json(const DetectConfig& c, const io::GradStats& grads, const DetectInputs& in, const DetectOutcome& o,
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

int run_detect(DetectConfig c) {
    validate_detect(c);
    const std::vector<io::OutputClaim> claims = io::claim_outputs({c.output}, "regime-detect", c.force);
    const io::GradStats grads = io::read_grads(c.input);
    const Detection d = detect_all(c, grads);
    io::write_schedule(c.output, d.schedule);

    const std::vector<CriticalReasons> why = critical_reasons(d.outcome.decisions, d.outcome.counted, d.in.lr);
    print_summary(c, d.in, d.outcome, d.block, why);
    if (c.json) print_json(c, grads, d.in, d.outcome, d.block, why, d.warnings);
    return 0;
}

}  // namespace acc::app
