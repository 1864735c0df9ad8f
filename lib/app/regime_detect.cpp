#include "app/regime_detect.hpp"

#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "compress/spec.hpp"
#include "io/atomic.hpp"
#include "io/grads.hpp"
#include "io/schedule.hpp"
#include "regime/detect.hpp"
#include "regime/levels.hpp"
#include "regime/summary.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iostream>

namespace acc::regime {
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

void validate(DetectConfig& c) {
    if (!(c.eta > 0) || !std::isfinite(c.eta)) throw UsageError("--eta: must be a number > 0");
    if (c.interval < 1) throw UsageError("--interval: must be at least 1 epoch");
    if (c.mode != "compression" && c.mode != "batch")
        throw UsageError("--mode: must be 'compression' or 'batch', not '" + c.mode + "'");
    const bool batch = c.mode == "batch";
    if (c.granularity.empty()) c.granularity = batch ? "model" : "layer";
    if (c.granularity != "layer" && c.granularity != "model")
        throw UsageError("--granularity: must be 'layer' or 'model', not '" + c.granularity + "'");
    if (batch && c.granularity == "layer")
        throw UsageError("--granularity layer: batch mode decides on the whole model; use --granularity model");
    if (c.monotone && !batch) throw UsageError("--monotone: applies only to --mode batch");
    if (c.low.empty()) c.low = batch ? "512" : "powersgd:2";
    if (c.high.empty()) c.high = batch ? "4096" : "powersgd:1";
    if (batch) {
        std::int64_t low = parse_batch("--low", c.low), high = parse_batch("--high", c.high);
        if (high < low)
            throw UsageError("--high " + c.high + " is smaller than --low " + c.low +
                             "; the small batch is for critical epochs");
        c.low = std::to_string(low);
        c.high = std::to_string(high);
    } else {
        try {
            c.low = compress::parse_spec(c.low).text();
        } catch (const UsageError& e) {
            throw UsageError(std::string("--low: ") + e.what());
        }
        try {
            c.high = compress::parse_spec(c.high).text();
        } catch (const UsageError& e) {
            throw UsageError(std::string("--high: ") + e.what());
        }
    }
    check_distinct_files({{"GRADS.h5", c.input}}, {{"--output", c.output}});
    create_parent_directories(c.output);
    io::check_writable_destination(c.output);
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

}  // namespace

int run_detect(DetectConfig c) {
    validate(c);
    io::GradStats grads = io::read_grads(c.input);
    const std::int64_t E = static_cast<std::int64_t>(grads.epochs.size());
    const std::int64_t P = static_cast<std::int64_t>(grads.parameters.size());
    const bool batch = c.mode == "batch";

    std::vector<std::string> warnings;
    auto warn = [&](const std::string& text) {
        spdlog::warn(text);
        warnings.push_back(text);
    };
    if (!grads.complete)
        warn(c.input + " is marked incomplete: its run stopped after " + std::to_string(E) +
             " epochs; the schedule covers those epochs only");
    if (E <= c.interval + 1)
        warn(c.input + " holds " + std::to_string(E) + " epochs, no more than one interval (" +
             std::to_string(c.interval) + ") after epoch 0: every epoch is critical");

    NormTable norms;
    norms.epochs = E;
    norms.columns = P;
    std::vector<double> lr;
    std::vector<std::int64_t> steps;
    for (const auto& epoch : grads.epochs) {
        norms.values.insert(norms.values.end(), epoch.norm.begin(), epoch.norm.end());
        lr.push_back(epoch.lr);
        steps.push_back(epoch.steps);
    }
    Options options{c.eta, c.interval};
    const bool model = c.granularity == "model";
    Decisions decisions = model ? detect(whole_model(norms), lr, options) : detect(norms, lr, options);
    Decisions per_parameter = model ? decisions.broadcast(P) : decisions;

    std::vector<bool> is_matrix;
    std::vector<std::vector<std::int64_t>> shapes;
    std::int64_t values = 0;
    for (const auto& p : grads.parameters) {
        is_matrix.push_back(p.is_matrix());
        shapes.push_back(p.shape);
        values += p.numel();
    }

    io::Schedule s;
    s.header.provenance = c.provenance;
    s.mode = c.mode;
    s.eta = c.eta;
    s.interval = c.interval;
    s.granularity = c.granularity;
    s.low = c.low;
    s.high = c.high;
    s.monotone = c.monotone;
    s.source = c.input;
    s.parameters = grads.parameters;
    s.epochs = E;
    s.critical = per_parameter.critical;
    s.ratio = per_parameter.ratio;
    for (Reason r : per_parameter.reason) s.reason.push_back(static_cast<std::int8_t>(r));

    nlohmann::json report;
    std::vector<bool> counted;
    std::vector<Regime> regimes;
    std::string line;
    std::int64_t block = timeline_block(E, c.interval);
    Communication comm;
    std::string levels_line;
    if (batch) {
        counted = {true};
        BatchPlan plan = plan_batch(decisions, std::stoll(c.low), std::stoll(c.high), c.monotone);
        s.batch_size = plan.batch_size;
        s.lr_scale = plan.lr_scale;
        regimes = find_regimes(decisions, counted);
        line = timeline(decisions, counted, block);
        double samples = static_cast<double>(grads.epochs[0].samples * std::max<std::int64_t>(1, grads.run.world_size));
        comm = batch_communication(plan, static_cast<double>(values), samples, std::stoll(c.low), std::stoll(c.high));
        std::int64_t small = std::count(plan.batch_size.begin(), plan.batch_size.end(), std::stoll(c.low));
        levels_line = "batch " + c.low + " in " + std::to_string(small) + " epochs, batch " + c.high + " in " +
                      std::to_string(E - small);
        report["batch_size"] = plan.batch_size;
        report["lr_scale"] = plan.lr_scale;
    } else {
        counted = is_matrix;
        if (std::none_of(counted.begin(), counted.end(), [](bool b) { return b; }))
            warn("no parameter of " + c.input + " is a matrix: every parameter is scheduled 'none'");
        CompressionPlan plan = plan_compression(per_parameter, is_matrix, c.low, c.high);
        s.levels = plan.levels;
        s.level = plan.level;
        regimes = find_regimes(per_parameter, counted);
        line = timeline(per_parameter, counted, block);
        comm = compression_communication(plan, shapes, steps, c.low, c.high);
        std::vector<std::string> parts;
        nlohmann::json shares = nlohmann::json::object();
        for (const auto& share : level_shares(plan, counted)) {
            parts.push_back(share.level + " " + percent_text(share.share));
            shares[share.level] = share.share;
        }
        levels_line = join(parts, ", ") + " of compressible parameter-epochs";
        const std::int64_t vectors = P - std::count(counted.begin(), counted.end(), true);
        if (vectors > 0) levels_line += "; " + std::to_string(vectors) + " vector parameters always none";
        report["level_share"] = shares;
        if (comm.low < comm.high)
            warn("--low " + c.low + " sends less than --high " + c.high +
                 ": critical regimes will get the stronger compression");
    }
    io::write_schedule(c.output, s);

    const std::int64_t counted_columns = std::count(counted.begin(), counted.end(), true);
    std::string decided = batch ? "whole-model decisions"
                                : model ? "whole-model decisions" : "per-parameter decisions";
    std::string unit = comm.per_step ? " per step (the input has no step counts)" : "";
    spdlog::info("{} -> {}", c.input, c.output);
    spdlog::info("  {} epochs, {} parameters ({} values); eta {}, interval {}, {}", E, P, with_commas(values),
                 short_number(c.eta), c.interval, decided);
    spdlog::info("  timeline, 1 character = {} epoch{} (# all critical, + most, - some, . none):", block,
                 block == 1 ? "" : "s");
    spdlog::info("    epoch 0 |{}| {}", line, E - 1);
    spdlog::info("  critical regimes (epochs{}): {}", batch || counted_columns <= 1 ? "" : ", peak critical/compressible parameters",
                 regimes_text(regimes, batch ? 1 : counted_columns));
    // Why each run of critical epochs is critical: the rule's reasons, so that
    // a critical epoch after a learning-rate decay does not look like a norm change.
    const std::vector<CriticalReasons> why = critical_reasons(batch ? decisions : per_parameter, counted, lr);
    const std::int64_t why_columns = batch || model ? 1 : counted_columns;
    constexpr size_t kWhyLines = 12;
    if (!why.empty()) spdlog::info("  why critical:");
    for (size_t i = 0; i < why.size() && i < kWhyLines; ++i)
        spdlog::info("    {}", reasons_text(why[i], lr, c.eta, c.interval, why_columns));
    if (why.size() > kWhyLines)
        spdlog::info("    ... and {} more (--json lists them all)", why.size() - kWhyLines);
    spdlog::info("  levels: {}", levels_line);
    spdlog::info("  data sent per worker{}: {} floats ({} throughout: {}, {} more; {} throughout: {})", unit,
                 si_count(comm.schedule), batch ? "batch " + c.low : c.low, si_count(comm.low),
                 ratio_text(comm.low, comm.schedule), batch ? "batch " + c.high : c.high, si_count(comm.high));

    if (c.json) {
        report["input"] = c.input;
        report["output"] = c.output;
        report["mode"] = c.mode;
        report["eta"] = c.eta;
        report["interval"] = c.interval;
        report["granularity"] = c.granularity;
        report["low"] = c.low;
        report["high"] = c.high;
        report["monotone"] = c.monotone;
        report["epochs"] = E;
        report["parameters"] = P;
        report["values"] = values;
        report["complete_input"] = grads.complete;
        report["timeline"] = {{"epochs_per_character", block}, {"line", line}};
        report["critical_per_epoch"] = critical_per_epoch(batch ? decisions : per_parameter, counted);
        report["counted_parameters"] = batch ? 1 : counted_columns;
        nlohmann::json list = nlohmann::json::array();
        for (const auto& r : regimes) list.push_back({{"first", r.first}, {"last", r.last}, {"peak_critical", r.peak_critical}});
        report["critical_regimes"] = list;
        nlohmann::json reasons = nlohmann::json::array();
        for (const auto& run : why) {
            nlohmann::json names = nlohmann::json::array();
            for (const auto& [reason, n] : run.reasons)
                names.push_back({{"reason", reason_name(reason)}, {"parameters", n}});
            nlohmann::json entry = {{"first", run.first}, {"last", run.last}, {"reasons", names},
                                    {"text", reasons_text(run, lr, c.eta, c.interval, why_columns)}};
            if (run.decay_epoch >= 0) entry["decay_epoch"] = run.decay_epoch;
            reasons.push_back(entry);
        }
        report["critical_reasons"] = reasons;
        report["communication"] = {{"unit", comm.per_step ? "floats per step" : "floats per worker"},
                                   {"schedule", comm.schedule},
                                   {"low", comm.low},
                                   {"high", comm.high},
                                   {"low_over_schedule", comm.schedule > 0 ? comm.low / comm.schedule : 0.0}};
        report["warnings"] = warnings;
        std::cout << report.dump(2) << std::endl;
    }
    return 0;
}

}  // namespace acc::regime
