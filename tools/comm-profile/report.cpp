#include "comm-profile/report.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

namespace acc::app {
namespace {

std::string right(const std::string& text, size_t width) {
    return text.size() >= width ? text : std::string(width - text.size(), ' ') + text;
}

const char* op_of(perf::Collective c) { return perf::collective_info(c).op; }

// nccl-tests' S per float passed to the call.
std::int64_t bytes_per_count(perf::Collective c, int world_size) {
    return 4 * (perf::collective_info(c).size_counts_ranks ? world_size : 1);
}

}  // namespace

std::int64_t parse_size(const std::string& text, const std::string& option) {
    const std::string problem =
        option + ": '" + text + "' is not a size in bytes (a whole number, optionally with K, M or G)";
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    if (digits == 0 || digits > 15) throw UsageError(problem);
    std::int64_t value = std::stoll(text.substr(0, digits));
    const std::string suffix = text.substr(digits);
    std::int64_t unit = 1;
    if (suffix == "K" || suffix == "k")
        unit = std::int64_t{1} << 10;
    else if (suffix == "M" || suffix == "m")
        unit = std::int64_t{1} << 20;
    else if (suffix == "G" || suffix == "g")
        unit = std::int64_t{1} << 30;
    else if (!suffix.empty())
        throw UsageError(problem);
    // 64 GiB: more than any device's memory holds for one message and its result.
    if (value > (std::int64_t{1} << 36) / unit)
        throw UsageError(option + ": " + text + " is too large; sizes go from 1 byte to 64G");
    if (value < 1) throw UsageError(option + ": the size must be at least 1 byte");
    return value * unit;
}

std::string size_text(std::int64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = static_cast<double>(bytes);
    int unit = 0;
    while (value >= 1024 && unit < 4) {
        value /= 1024;
        ++unit;
    }
    return short_number(value, 4) + " " + units[unit];
}

void SweepPlan::validate() const {
    if (collectives.empty()) throw UsageError("--collectives: name at least one collective");
    for (size_t i = 0; i < collectives.size(); ++i)
        for (size_t j = 0; j < i; ++j)
            if (collectives[i] == collectives[j])
                throw UsageError(std::string("--collectives: ") + perf::collective_name(collectives[i]) +
                                 " is listed twice");
    if (min_bytes < 1) throw UsageError("-b/--min-bytes: the size must be at least 1 byte");
    if (max_bytes < min_bytes)
        throw UsageError("-e/--max-bytes " + std::to_string(max_bytes) + " is smaller than -b/--min-bytes " +
                         std::to_string(min_bytes));
    if (factor < 2) throw UsageError("-f/--step-factor: must be at least 2");
    if (iterations < 1) throw UsageError("-n/--iters: must be at least 1");
    if (warmup < 0) throw UsageError("-w/--warmup-iters: must be at least 0");
    if (agg_iters < 1) throw UsageError("-m/--agg-iters: must be at least 1");
    if (fit_from < 0) throw UsageError("--fit-from: must be at least 0 bytes");
    if (fit_from > max_bytes)
        throw UsageError("--fit-from " + std::to_string(fit_from) + " is larger than -e/--max-bytes " +
                         std::to_string(max_bytes) + ": no size to fit the bandwidth over");
    if (fit_from > min_bytes) {
        int past = 0;
        for (std::int64_t size = min_bytes; size <= max_bytes; size *= factor) {
            if (size >= fit_from) ++past;
            if (size > max_bytes / factor) break;
        }
        if (past < 2)
            throw UsageError("--fit-from " + size_text(fit_from) + " leaves " + std::to_string(past) +
                             " of the sweep's sizes to fit the bandwidth over, which needs two; lower it or raise "
                             "-e/--max-bytes");
    }
}

std::string SweepPlan::signature() const {
    std::string text;
    for (perf::Collective c : collectives) text += std::string(perf::collective_name(c)) + ",";
    return text + " " + std::to_string(min_bytes) + " " + std::to_string(max_bytes) + " " + std::to_string(factor) +
           " " + std::to_string(iterations) + " " + std::to_string(warmup) + " " + std::to_string(agg_iters) + " " +
           (check ? "check" : "nocheck");
}

std::int64_t collective_bytes(perf::Collective collective, std::int64_t count, int world_size) {
    return count * bytes_per_count(collective, world_size);
}

std::vector<std::int64_t> plan_counts(perf::Collective collective, const SweepPlan& plan, int world_size) {
    const std::int64_t divisor = bytes_per_count(collective, world_size);
    std::vector<std::int64_t> counts;
    for (std::int64_t size = plan.min_bytes; size <= plan.max_bytes; size *= plan.factor) {
        const std::int64_t count = std::max<std::int64_t>(1, size / divisor);
        if (counts.empty() || counts.back() != count) counts.push_back(count);
        if (size > plan.max_bytes / plan.factor) break;
    }
    return counts;
}

void set_bandwidths(SizeResult& row, perf::Collective collective, int world_size) {
    row.algbw = perf::algbw(static_cast<double>(row.size), row.time.median);
    row.busbw = row.algbw * perf::bus_factor(collective, world_size);
}

double fit_bus_bandwidth(const CollectiveResult& result) {
    // On one rank the factor is 0, even where the fitted bandwidth is unbounded.
    return result.bus_factor == 0 ? 0 : result.fit.bandwidth * result.bus_factor;
}

void fit_rows(CollectiveResult& result, std::int64_t fit_from) {
    result.fit = perf::AlphaBetaFit{};
    result.fit_from = fit_from;
    result.burst_end = 0;
    if (result.rows.size() < 2) return;
    std::vector<double> bytes, seconds, means;
    std::size_t past = 0;
    for (const auto& row : result.rows) {
        bytes.push_back(static_cast<double>(row.size));
        seconds.push_back(row.time.median);
        means.push_back(row.time.mean);
        if (row.size >= fit_from) ++past;
    }
    if (fit_from > result.rows.front().size && past < 2)
        throw UsageError("--fit-from: " + size_text(fit_from) + " leaves " + std::to_string(past) + " of " +
                         perf::collective_name(result.collective) +
                         "'s sizes to fit the bandwidth over, which needs two; lower it or raise -e/--max-bytes");
    result.fit = perf::fit_past_burst(bytes, seconds, static_cast<double>(fit_from), means);
    if (fit_from == 0) result.burst_end = static_cast<std::int64_t>(perf::burst_end(bytes, seconds));
}

std::string fit_number(double value, int width) {
    for (const char* format : {"%.2f", "%.1f", "%.0f"}) {
        std::string text = printf_text(format, value);
        if (static_cast<int>(text.size()) <= width) return text;
    }
    for (int precision = std::max(0, width - 6); precision >= 0; --precision) {
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, "%.*e", precision, value);
        if (static_cast<int>(std::string(buffer).size()) <= width || precision == 0) return buffer;
    }
    return printf_text("%e", value);
}

std::string table_header(perf::Collective collective) {
    const perf::CollectiveInfo& info = perf::collective_info(collective);
    const std::string title = std::string(info.name) + " (" + info.detail + ")";
    std::string line1 = "#" + right("size", 11) + right("count", 12) + right("type", 8) + right("time min", 11) +
                        right("time med", 11) + right("time max", 11) +
                        right("time mean", 11) + right("algbw", 11) + right("busbw", 11) +
                        right("#wrong", 8);
    std::string line2 = "#" + right("(B)", 11) + right("(elements)", 12) + right("", 8) + right("(us)", 11) +
                        right("(us)", 11) + right("(us)", 11) +
                        right("(us)", 11) + right("(GB/s)", 11) + right("(GB/s)", 11);
    return "# " + title + "\n" + line1 + "\n" + line2 + "\n";
}

std::string table_row(const SizeResult& row) {
    return right(std::to_string(row.size), 12) + right(std::to_string(row.count), 12) + right("float", 8) +
           right(fit_number(row.time.min * 1e6, 10), 11) + right(fit_number(row.time.median * 1e6, 10), 11) +
           right(fit_number(row.time.max * 1e6, 10), 11) + right(fit_number(row.time.mean * 1e6, 10), 11) +
           right(fit_number(row.algbw / 1e9, 10), 11) +
           right(fit_number(row.busbw / 1e9, 10), 11) + right(row.wrong < 0 ? "-" : std::to_string(row.wrong), 8) +
           "\n";
}

std::string fit_line(const CollectiveResult& result) {
    const std::string name = perf::collective_name(result.collective);
    const perf::AlphaBetaFit& f = result.fit;
    if (f.points < 2) return "# " + name + " fit: needs two or more message sizes\n";
    const std::string bandwidth = std::isinf(f.bandwidth)
                                      ? std::string("unbounded (time does not grow with size)")
                                      : printf_text("%.4g GB/s", f.bandwidth / 1e9) + " (busbw " +
                                            printf_text("%.4g GB/s", fit_bus_bandwidth(result) / 1e9) + ")";
    std::string out = "# " + name + " fit t(S) = alpha + S/B: alpha " + printf_text("%.1f us", f.alpha * 1e6) +
                      ", B " + bandwidth + "; R^2 " + printf_text("%.4f", f.r2) + ", relative residuals rms " +
                      printf_text("%.1f%%", f.rms_relative_residual * 100) + ", max " +
                      printf_text("%.1f%%", f.max_relative_residual * 100) + "\n";
    if (f.latency_points > 0)
        out += "#   B over the " + std::to_string(f.points) + " sizes from " + size_text(result.fit_from) +
               " on (--fit-from); alpha the median of the " + std::to_string(f.latency_points) +
               " smaller sizes' mean times\n";
    if (result.burst_end > 0)
        out += "# warning: " + name + " messages of up to " + size_text(result.burst_end) +
               " ran more than 1.25x faster than the largest: if the link lets a burst through (a token bucket), "
               "this fit is not its sustained rate; fit past the burst with --fit-from\n";
    return out;
}

std::string compute_lines(const io::ComputeProfile& c, int world_size) {
    const perf::TimingStats forward = perf::summarize(c.forward), backward = perf::summarize(c.backward);
    std::vector<double> sums;
    for (size_t i = 0; i < c.forward.size(); ++i) sums.push_back(c.forward[i] + c.backward[i]);
    const perf::TimingStats step = perf::summarize(sums);
    std::string shape;
    for (size_t i = 0; i < c.input_shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(c.input_shape[i]);
    const bool text = c.input_shape.size() == 1;
    std::string out = "# compute: " + c.model + ", batch " + std::to_string(c.batch_size) +
                      (text ? " streams of " + shape + " tokens (vocabulary " + with_commas(c.classes) + ")"
                            : " of " + shape + " in " + std::to_string(c.classes) + " classes") +
                      " per rank (" + c.input + "'s shape, random values), " + std::to_string(c.threads) +
                      (c.threads == 1 ? " thread" : " threads") + " per rank\n";
    out += "# " + std::to_string(c.forward.size()) + " timed steps after " + std::to_string(c.warmup_steps) +
           " warm-up" + (world_size > 1 ? ", each the slowest rank's" : "") + "\n";
    char buffer[96];
    std::snprintf(buffer, sizeof buffer, "#  %-9s %12s %12s %12s\n", "ms/step", "min", "median", "max");
    out += buffer;
    auto line = [&](const char* name, const perf::TimingStats& t) {
        std::snprintf(buffer, sizeof buffer, "   %-9s %12.3f %12.3f %12.3f\n", name, t.min * 1e3, t.median * 1e3,
                      t.max * 1e3);
        return std::string(buffer);
    };
    return out + line("forward", forward) + line("backward", backward) + line("step", step) + "#\n";
}

std::string results_csv(const std::vector<CollectiveResult>& results) {
    std::string out =
        "collective,size_bytes,count,type,time_min_s,time_median_s,time_max_s,time_mean_s,algbw_Bps,busbw_Bps,wrong\n";
    for (const auto& r : results)
        for (const auto& row : r.rows)
            out += std::string(perf::collective_name(r.collective)) + "," + std::to_string(row.size) + "," +
                   std::to_string(row.count) + ",float32," + printf_text("%.9g", row.time.min) + "," +
                   printf_text("%.9g", row.time.median) + "," + printf_text("%.9g", row.time.max) + "," +
                   printf_text("%.9g", row.time.mean) + "," + printf_text("%.9g", row.algbw) + "," +
                   printf_text("%.9g", row.busbw) + "," +
                   (row.wrong < 0 ? "" : std::to_string(row.wrong)) + "\n";
    return out;
}

double average_busbw(const std::vector<CollectiveResult>& results) {
    double sum = 0;
    size_t rows = 0;
    for (const auto& r : results)
        for (const auto& row : r.rows) {
            sum += row.busbw;
            ++rows;
        }
    return rows ? sum / static_cast<double>(rows) : 0;
}

std::int64_t total_wrong(const std::vector<CollectiveResult>& results) {
    std::int64_t total = -1;
    for (const auto& r : results)
        for (const auto& row : r.rows)
            if (row.wrong >= 0) total = std::max<std::int64_t>(total, 0) + row.wrong;
    return total;
}

namespace {

// One collective of the JSON report: its rows and its fit.
nlohmann::json collective_json(const CollectiveResult& r) {
    nlohmann::json c;
    c["name"] = perf::collective_name(r.collective);
    c["op"] = op_of(r.collective);
    c["type"] = "float32";
    c["bus_factor"] = cli::json_number(r.bus_factor);
    c["results"] = nlohmann::json::array();
    for (const auto& row : r.rows)
        c["results"].push_back({{"size", row.size},
                                {"count", row.count},
                                {"time_min_s", cli::json_number(row.time.min)},
                                {"time_median_s", cli::json_number(row.time.median)},
                                {"time_max_s", cli::json_number(row.time.max)},
                                {"time_mean_s", cli::json_number(row.time.mean)},
                                {"algbw_Bps", cli::json_number(row.algbw)},
                                {"busbw_Bps", cli::json_number(row.busbw)},
                                {"wrong", row.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(row.wrong)}});
    if (r.fit.points >= 2)
        c["fit"] = {{"alpha_s", cli::json_number(r.fit.alpha)},
                    {"bandwidth_Bps", cli::json_number(r.fit.bandwidth)},
                    {"bus_bandwidth_Bps", cli::json_number(fit_bus_bandwidth(r))},
                    {"r2", cli::json_number(r.fit.r2)},
                    {"rms_relative_residual", cli::json_number(r.fit.rms_relative_residual)},
                    {"max_relative_residual", cli::json_number(r.fit.max_relative_residual)},
                    {"points", r.fit.points},
                    {"fit_from_bytes", r.fit_from},
                    {"latency_points", r.fit.latency_points}};
    else
        c["fit"] = nullptr;
    return c;
}

// The compute section of the JSON report.
nlohmann::json compute_json(const io::ComputeProfile& c) {
    return {{"model", c.model},
            {"batch_size", c.batch_size},
            {"input_shape", c.input_shape},
            {"classes", c.classes},
            {"input", c.input},
            {"threads", c.threads},
            {"warmup_steps", c.warmup_steps},
            {"steps", c.forward.size()},
            {"forward_s", cli::json_number(c.forward_seconds)},
            {"backward_s", cli::json_number(c.backward_seconds)},
            {"forward_min_s", cli::json_number(perf::summarize(c.forward).min)},
            {"forward_max_s", cli::json_number(perf::summarize(c.forward).max)},
            {"backward_min_s", cli::json_number(perf::summarize(c.backward).min)},
            {"backward_max_s", cli::json_number(perf::summarize(c.backward).max)}};
}

}  // namespace

std::string results_json(const std::vector<CollectiveResult>& results, const ProfileMeta& meta) {
    nlohmann::json report;
    report["world_size"] = meta.world_size;
    report["backend"] = comm::backend_name(meta.backend);
    report["device"] = device_name(meta.device);
    report["hosts"] = meta.hosts;
    report["iterations"] = meta.plan.iterations;
    report["warmup_iterations"] = meta.plan.warmup;
    report["agg_iters"] = meta.plan.agg_iters;
    report["checked"] = meta.plan.check;
    report["collectives"] = nlohmann::json::array();
    for (const auto& r : results) report["collectives"].push_back(collective_json(r));
    report["average_busbw_Bps"] = cli::json_number(average_busbw(results));
    const std::int64_t wrong = total_wrong(results);
    report["wrong"] = wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(wrong);
    report["compute"] = meta.compute ? compute_json(*meta.compute) : nlohmann::json(nullptr);
    report["output"] = cli::json_text_or_null(meta.output);
    return report.dump(2) + "\n";
}

io::CommProfile to_comm_profile(const std::vector<CollectiveResult>& results, const ProfileMeta& meta) {
    io::CommProfile p;
    p.header.provenance = meta.provenance;
    p.world_size = meta.world_size;
    p.backend = comm::backend_name(meta.backend);
    p.device = device_name(meta.device);
    p.iterations = meta.plan.iterations;
    p.warmup_iterations = meta.plan.warmup;
    p.agg_iters = meta.plan.agg_iters;
    p.checked = meta.plan.check;
    p.hosts = meta.hosts;
    for (const auto& r : results) {
        io::CollectiveProfile c;
        c.name = perf::collective_name(r.collective);
        c.op = op_of(r.collective);
        c.bus_factor = r.bus_factor;
        for (const auto& row : r.rows) {
            c.size.push_back(row.size);
            c.count.push_back(row.count);
            c.time_min.push_back(row.time.min);
            c.time_median.push_back(row.time.median);
            c.time_max.push_back(row.time.max);
            c.time_mean.push_back(row.time.mean);
            c.algbw.push_back(row.algbw);
            c.busbw.push_back(row.busbw);
            c.wrong.push_back(row.wrong);
        }
        if (r.fit.points >= 2) {
            c.alpha = r.fit.alpha;
            c.bandwidth = r.fit.bandwidth;
            c.bus_bandwidth = fit_bus_bandwidth(r);
            c.r2 = r.fit.r2;
            c.rms_relative_residual = r.fit.rms_relative_residual;
            c.max_relative_residual = r.fit.max_relative_residual;
            c.fit_points = static_cast<std::int64_t>(r.fit.points);
            c.fit_from = r.fit_from;
        } else {
            // A single size cannot separate latency from bandwidth: the whole
            // time goes to bandwidth, which predicts large messages best.
            c.alpha = 0;
            c.bandwidth = r.rows.front().algbw;
            c.bus_bandwidth = r.rows.front().busbw;
            c.r2 = 1;
            c.fit_points = static_cast<std::int64_t>(r.rows.size());
        }
        p.collectives.push_back(std::move(c));
    }
    p.compute = meta.compute;
    return p;
}

}  // namespace acc::app
