#include "compress-bench/what_if.hpp"

#include "app/comm_network.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "compress/codecs.hpp"
#include "compress/shapes.hpp"
#include "io/comm_profile.hpp"
#include "io/metrics.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <utility>

namespace acc::app {

using namespace compress;

perf::PlanStep plan_step(const std::vector<TensorInfo>& tensors, const std::vector<Spec>& levels, double& wire_bytes_out) {
    if (levels.size() != tensors.size())
        throw Error("plan: " + std::to_string(levels.size()) + " levels for " + std::to_string(tensors.size()) + " tensors");
    perf::PlanStep step;
    // Bytes of each channel's buffer, in Channel's order; PowerSGD's P and Q apart.
    std::array<double, 5> used{};
    double p = 0, q = 0;
    bool compressed = false;
    wire_bytes_out = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const auto& shape = tensors[i].shape;
        step.tensor_bytes.push_back(4.0 * static_cast<double>(tensors[i].numel()));
        wire_bytes_out += static_cast<double>(wire_bytes(levels[i], shape));
        if (!(levels[i] == no_compression())) compressed = true;
        const auto codec = make_codec(levels[i], shape, CodecOptions{});
        if (codec->channel() == Channel::low_rank) {
            const LowRank r = codec->low_rank();
            p += 4.0 * static_cast<double>(r.rows) * r.rank;
            q += 4.0 * static_cast<double>(r.cols) * r.rank;
        } else {
            used[static_cast<size_t>(codec->channel())] += static_cast<double>(codec->buffer_bytes());
        }
    }
    step.uncompressed = !compressed;
    if (!compressed) return step;
    auto add = [&](double bytes, perf::Collective kind) {
        if (bytes > 0) step.transfers.push_back({kind, bytes});
    };
    for (Channel c : {Channel::fp32_sum, Channel::fp16_sum, Channel::sparse_sum})
        add(used[static_cast<size_t>(c)], perf::Collective::allreduce);
    add(p, perf::Collective::allreduce);
    add(used[static_cast<size_t>(Channel::gather)], perf::Collective::allgather);
    add(q, perf::Collective::allreduce);
    return step;
}

namespace {

constexpr double kGbit = 1e9 / 8;  // bytes per second in one Gbit/s

std::vector<std::int64_t> default_worlds() { return {8, 16, 32, 64, 128, 256, 512, 1024}; }
std::vector<double> default_links() { return {1, 10, 25, 100}; }

// One plan priced: the run's, or every compressible parameter at one level.
struct Plan {
    std::string name;
    std::vector<std::string> levels;  // the distinct levels it sends at, none left out
    std::vector<perf::PlanPart> parts;
    double steps = 0;
    double wire_bytes = 0;  // per step, the mean over the steps
    double encode_seconds = 0, decode_seconds = 0;  // per step, the mean, compute speed applied
    bool codec_measured = false;
};

struct Cell {
    double bandwidth = 0, baseline_seconds = 0, seconds = 0, speedup = 0;
};

struct Priced {
    std::int64_t world = 0;
    perf::BreakEven break_even;
    std::vector<Cell> cells;  // one per bandwidth
};

void validate_what_if(BenchConfig& c) {
    auto refuse = [](const std::string& option) {
        throw UsageError(option + ": does not apply with --what-if, which runs no compressor");
    };
    if (!c.from.empty()) refuse("--from");
    if (!c.snapshots.empty()) refuse("--snapshots");
    if (!c.output.empty()) refuse("--output");
    if (!c.trace.empty()) refuse("--trace");
    if (c.force) refuse("--force");
    if (c.reps != 5) refuse("--reps");
    if (c.threads != 1) refuse("--threads");
    if (c.device != Device::cpu) refuse("--device");
    if (c.path) refuse("--path");
    if (c.topk_selection != TopkSelection::exact) refuse("--topk-selection");
    if (c.comm_model != CommModel::fit)
        throw UsageError("--comm-model measured: does not apply with --what-if, which prices bandwidths and world "
                         "sizes the profile did not measure");
    if (!c.metrics.empty() && !c.shapes.empty())
        throw UsageError("--metrics and --shapes exclude each other (both give the model's parameters)");
    if (c.metrics.empty() && c.shapes.empty()) c.shapes = "resnet18";
    if (!c.comm.empty() && (c.alpha_given || c.bandwidth_given))
        throw UsageError("--comm and --alpha/--bandwidth exclude each other (both describe the network)");
    if (c.bandwidth_given && !c.links.empty())
        throw UsageError("--bandwidth and --links exclude each other (both give the bandwidth)");
    if (!(c.alpha >= 0) || !std::isfinite(c.alpha)) throw UsageError("--alpha: must be a finite number of seconds >= 0");
    if (!(c.bandwidth > 0) || !std::isfinite(c.bandwidth))
        throw UsageError("--bandwidth: must be a finite number of bytes per second > 0");
    for (double g : c.links)
        if (!(g > 0) || !(g <= 1e6)) throw UsageError("--links: " + short_number(g) + " is not a bandwidth in (0, 1e6] Gbit/s");
    if (!(c.compute_speed > 0) || !(c.compute_speed <= 1e6))
        throw UsageError("--compute-speed: must be a number in (0, 1e6]");
    if (!(c.compute_ms >= 0) || !std::isfinite(c.compute_ms))
        throw UsageError("--compute-ms: must be a finite number of milliseconds >= 0");
    if (c.csv && c.json) throw UsageError("--csv and --json exclude each other (both write to standard output)");
    if (c.worlds.empty()) c.worlds = default_worlds();
    for (auto w : c.worlds)
        if (w < 1 || w > 1000000) throw UsageError("--world: " + std::to_string(w) + " is not a world size from 1 to 1000000");
}

std::string gbit_text(double bytes_per_second) {
    const double g = bytes_per_second / kGbit;
    return short_number(g, g >= 100 ? 4 : 3);
}

std::string seconds_text(double seconds) { return short_number(seconds * 1e3, 4) + " ms"; }

class WhatIf {
public:
    explicit WhatIf(BenchConfig config) : c_(std::move(config)) {}

    int run() {
        validate_what_if(c_);
        set_network();
        if (!c_.metrics.empty()) load_run();
        else load_shapes();
        if (c_.compute_ms_given) {
            compute_.seconds = c_.compute_ms / 1000.0;
            compute_source_ = "flag";
        }
        compute_.seconds /= c_.compute_speed;
        for (auto w : c_.worlds)
            if (w > 0) worlds_.push_back(w);
        if (!c_.links.empty())
            for (double g : c_.links) bandwidths_.push_back(g * kGbit);
        else if (c_.bandwidth_given || !c_.comm.empty())
            bandwidths_.push_back(link_.allreduce.bandwidth);
        else
            for (double g : default_links()) bandwidths_.push_back(g * kGbit);
        price();
        predict_run();
        print_header();
        if (c_.csv) print_csv();
        else if (c_.json) print_json();
        else print_tables();
        return 0;
    }

private:
    void warn(const std::string& text) {
        spdlog::warn(text);
        warnings_.push_back(text);
    }

    // The link's latencies (and, where a bandwidth is not given, its bandwidth): --comm's
    // fits, else --alpha and --bandwidth or their defaults.
    void set_network() {
        link_.allreduce = link_.allgather = perf::Network{c_.alpha, c_.bandwidth};
        network_source_ = c_.alpha_given ? "flags" : "default";
        if (c_.comm.empty()) return;
        ProfiledNetworks profiled = read_profiled_networks(c_.comm, CommModel::fit);
        profiled_compute_ = std::move(profiled.compute);
        link_.allreduce = profiled.allreduce;
        link_.allgather = profiled.allgather;
        if (!std::isfinite(link_.allreduce.bandwidth) || !std::isfinite(link_.allgather.bandwidth))
            throw FileError(c_.comm, "has a fit whose bandwidth is infinite (the time did not grow with the size); "
                                     "profile larger sizes, or give --alpha and --links");
        network_source_ = "comm";
    }

    // The compute of a step: a --comm profile's (--model), else none; --compute-ms overrides it.
    void compute_from_profile() {
        if (!profiled_compute_) return;
        compute_ = profiled_compute(*profiled_compute_, compute_);
        compute_source_ = "comm";
    }

    Plan uniform_plan(const Spec& level, const std::vector<bool>& compressible, double steps) const {
        std::vector<Spec> levels(tensors_.size(), no_compression());
        for (size_t i = 0; i < tensors_.size(); ++i)
            if (compressible[i]) levels[i] = level;
        Plan plan;
        plan.name = level.text();
        plan.levels = {level.text()};
        perf::PlanPart part;
        part.steps = steps;
        part.step = plan_step(tensors_, levels, plan.wire_bytes);
        // The codec's time where the run sent exactly these levels in some epochs.
        for (const auto& e : epoch_plans_)
            if (e.levels == levels) {
                part.step.encode_seconds = e.encode_seconds / e.steps / c_.compute_speed;
                part.step.decode_seconds = e.decode_seconds / e.steps / c_.compute_speed;
                plan.codec_measured = true;
            }
        plan.encode_seconds = part.step.encode_seconds;
        plan.decode_seconds = part.step.decode_seconds;
        plan.steps = steps;
        plan.parts.push_back(std::move(part));
        return plan;
    }

    void load_shapes() {
        const auto& presets = model_presets();
        const bool preset = std::find(presets.begin(), presets.end(), c_.shapes) != presets.end();
        if (!preset && !std::filesystem::exists(c_.shapes))
            throw UsageError("--shapes: '" + c_.shapes + "' is neither a model (" + join(presets, ", ") +
                             ") nor an existing shapes file");
        tensors_ = preset ? preset_shapes(c_.shapes) : read_shapes_file(c_.shapes);
        source_ = c_.shapes;
        if (preset) model_ = c_.shapes;
        compute_from_profile();
        std::vector<bool> compressible;
        for (const auto& t : tensors_) compressible.push_back(c_.vectors == VectorLevel::compress || t.shape.size() > 1);
        const std::vector<Spec> levels = c_.compressors.empty() ? default_specs() : c_.compressors;
        for (const auto& level : levels) plans_.push_back(uniform_plan(level, compressible, 1));
    }

    struct EpochPlan {
        std::vector<Spec> levels;
        double steps = 0, encode_seconds = 0, decode_seconds = 0;
    };

    void load_run() {
        const std::string& path = c_.metrics;
        const io::Metrics m = io::read_metrics(path);  // FileError for a file that is not a metrics file
        source_ = path;
        model_ = m.run.model;
        run_ = m.run;
        if (m.gravac.enabled || m.run.mode == "gravac")
            throw FileError(path, "is a GraVAC run: its level changes every step and /epochs/level holds none of "
                                  "them; price its family's levels with --shapes and --compressors");
        tensors_ = m.parameters;
        std::vector<Spec> specs;
        for (size_t i = 0; i < m.levels.size(); ++i) {
            try {
                specs.push_back(parse_spec(m.levels[i]));
            } catch (const UsageError& e) {
                throw FileError(path, "/levels entry " + std::to_string(i) + " '" + m.levels[i] +
                                          "' is not a level this toolkit knows: " + first_line(e.what()));
            }
        }
        // Each distinct set of levels, in the order the epochs first used it, with its steps
        // and codec seconds; the compute per step over all epochs.
        std::map<std::vector<std::int32_t>, size_t> index;
        std::vector<bool> used(specs.size(), false), compressible(tensors_.size(), false);
        double compute = 0, recorded_bytes = 0, seconds = 0;
        for (size_t e = 0; e < m.epochs.size(); ++e) {
            const io::MetricsEpoch& epoch = m.epochs[e];
            for (const auto& [name, value] : {std::pair<const char*, double>{"compute_seconds", epoch.compute_seconds},
                                              {"encode_seconds", epoch.encode_seconds},
                                              {"decode_seconds", epoch.decode_seconds}})
                if (!std::isfinite(value) || value < 0)
                    throw FileError(path, std::string("/epochs/") + name + " is " + short_number(value) + " at epoch " +
                                              std::to_string(e) + "; the what-if needs a number of seconds >= 0");
            if (epoch.steps == 0) continue;
            auto [it, fresh] = index.emplace(epoch.level, epoch_plans_.size());
            if (fresh) {
                EpochPlan p;
                for (auto l : epoch.level) p.levels.push_back(specs[static_cast<size_t>(l)]);
                epoch_plans_.push_back(std::move(p));
            }
            EpochPlan& p = epoch_plans_[it->second];
            p.steps += static_cast<double>(epoch.steps);
            p.encode_seconds += epoch.encode_seconds;
            p.decode_seconds += epoch.decode_seconds;
            compute += epoch.compute_seconds;
            recorded_bytes += static_cast<double>(epoch.bytes_sent);
            if (std::isfinite(epoch.seconds)) seconds += epoch.seconds;
            for (size_t i = 0; i < epoch.level.size(); ++i) {
                const auto l = static_cast<size_t>(epoch.level[i]);
                used[l] = true;
                if (!(specs[l] == no_compression())) compressible[i] = true;
            }
        }
        for (const auto& p : epoch_plans_) run_steps_ += p.steps;
        if (run_steps_ == 0) throw FileError(path, "records no training steps (/epochs/steps is 0 in every epoch)");
        compute_.seconds = run_compute_seconds_ = compute / run_steps_;
        compute_source_ = "run";
        run_seconds_per_step_ = seconds / run_steps_;

        // The run's own plan, epoch by epoch.
        Plan run;
        run.name = "run";
        double planned_bytes = 0;
        for (const auto& p : epoch_plans_) {
            perf::PlanPart part;
            part.steps = p.steps;
            double bytes = 0;
            part.step = plan_step(tensors_, p.levels, bytes);
            part.step.encode_seconds = p.encode_seconds / p.steps / c_.compute_speed;
            part.step.decode_seconds = p.decode_seconds / p.steps / c_.compute_speed;
            planned_bytes += bytes * p.steps;
            run.encode_seconds += part.step.encode_seconds * p.steps;
            run.decode_seconds += part.step.decode_seconds * p.steps;
            run.parts.push_back(std::move(part));
        }
        run.steps = run_steps_;
        run.wire_bytes = planned_bytes / run_steps_;
        run.encode_seconds /= run_steps_;
        run.decode_seconds /= run_steps_;
        run.codec_measured = true;
        for (size_t l = 0; l < specs.size(); ++l)
            if (used[l] && !(specs[l] == no_compression())) run.levels.push_back(specs[l].text());
        if (std::fabs(planned_bytes - recorded_bytes) > 0.005 * std::max(planned_bytes, recorded_bytes))
            warn(path + ": the levels' wire sizes give " + short_number(planned_bytes) + " bytes per worker over the run, "
                 "the run recorded " + short_number(recorded_bytes) + " (DGC's warm-up sends more); the what-if prices the "
                 "levels' sizes");
        plans_.push_back(std::move(run));

        // Every compressed parameter of the run at each level it used, then at each --compressors level.
        if (std::none_of(compressible.begin(), compressible.end(), [](bool b) { return b; }))
            for (size_t i = 0; i < tensors_.size(); ++i)
                compressible[i] = c_.vectors == VectorLevel::compress || tensors_[i].shape.size() > 1;
        std::vector<Spec> levels;
        for (size_t l = 0; l < specs.size(); ++l)
            if (used[l] && !(specs[l] == no_compression())) levels.push_back(specs[l]);
        for (const auto& s : c_.compressors)
            if (std::find(levels.begin(), levels.end(), s) == levels.end()) levels.push_back(s);
        for (const auto& level : levels) plans_.push_back(uniform_plan(level, compressible, run_steps_));
    }

    void price() {
        for (const auto& t : tensors_) tensor_bytes_.push_back(4.0 * static_cast<double>(t.numel()));
        for (const auto& plan : plans_) {
            const auto baseline = perf::uncompressed_plan(plan.parts, tensor_bytes_);
            std::vector<Priced> rows;
            for (auto w : worlds_) {
                Priced row;
                row.world = w;
                const int world = static_cast<int>(w);
                row.break_even = perf::break_even(plan.parts, baseline, link_, world, compute_);
                for (double bandwidth : bandwidths_) {
                    const perf::Link at = link_.at_bandwidth(bandwidth);
                    Cell cell;
                    cell.bandwidth = bandwidth;
                    cell.baseline_seconds = perf::plan_seconds(baseline, at, world, compute_) / plan.steps;
                    cell.seconds = perf::plan_seconds(plan.parts, at, world, compute_) / plan.steps;
                    cell.speedup = cell.baseline_seconds / cell.seconds;
                    row.cells.push_back(cell);
                }
                rows.push_back(std::move(row));
            }
            priced_.push_back(std::move(rows));
        }
    }

    // The run's own step as the model prices it on the given link at the run's world size
    // (its time and codecs as measured): against its measured step, a check of the model
    // on the run's link when --comm profiled it.
    void predict_run() {
        if (c_.metrics.empty() || c_.compute_speed != 1 || c_.compute_ms_given || run_.world_size < 1) return;
        const int world = static_cast<int>(run_.world_size);
        run_predicted_seconds_ = perf::plan_seconds(plans_.front().parts, link_, world, compute_) / run_steps_;
    }

    // Where the plan pays, in Gbit/s: "< 12.3", "> 4.5", "1.2 to 30", "never", "always";
    // the bandwidths split the range into regions that pay and do not pay by turns.
    static std::string pays_text(const perf::BreakEven& b) {
        if (b.bandwidths.empty()) return b.pays_at_low_bandwidth ? "always" : "never";
        const size_t n = b.bandwidths.size();
        std::vector<std::string> regions;
        for (size_t i = 0; i <= n; ++i) {
            if (b.pays_at_low_bandwidth != (i % 2 == 0)) continue;
            if (i == 0) regions.push_back("< " + gbit_text(b.bandwidths[0]));
            else if (i == n) regions.push_back("> " + gbit_text(b.bandwidths[n - 1]));
            else regions.push_back(gbit_text(b.bandwidths[i - 1]) + " to " + gbit_text(b.bandwidths[i]));
        }
        return join(regions, ", ");
    }

    std::string network_text() const {
        std::string text = "alpha " + short_number(link_.allreduce.alpha * 1e6) + " us per ring step";
        if (network_source_ == "comm")
            text += " (allgather " + short_number(link_.allgather.alpha * 1e6) + " us; allgather bandwidth " +
                    short_number(link_.allgather.bandwidth / link_.allreduce.bandwidth, 3) + "x allreduce's) from " +
                    c_.comm;
        else if (network_source_ == "default")
            text += " (default: pass --alpha, or --comm)";
        return text;
    }

    void print_header() const {
        std::int64_t values = 0;
        for (const auto& t : tensors_) values += t.numel();
        spdlog::info("what-if: {}: {} tensors, {} values ({} per worker and step uncompressed)", source_,
                     tensors_.size(), with_commas(values), bytes_text(4.0 * static_cast<double>(values)));
        if (!c_.metrics.empty())
            spdlog::info("  the run: {} on {} ranks, mode {}, {} steps; {} per step measured, of which compute {}",
                         run_.model, run_.world_size, run_.mode, short_number(run_steps_),
                         seconds_text(run_seconds_per_step_), seconds_text(run_compute_seconds_));
        if (std::isfinite(run_predicted_seconds_))
            spdlog::info("  the model on this link at the run's {} ranks: {} per step (the run measured {})",
                         run_.world_size, seconds_text(run_predicted_seconds_), seconds_text(run_seconds_per_step_));
        spdlog::info("  network: {}", network_text());
        spdlog::info("  compute {} per step{} (backward pass {}%){}", seconds_text(compute_.seconds),
                     compute_source_ == "run" ? " from the run" : compute_source_ == "comm" ? " from " + c_.comm : "",
                     short_number(compute_.backward_share * 100, 3),
                     c_.compute_speed != 1 ? ", compute and codec " + short_number(c_.compute_speed) + "x faster" : "");
        for (const auto& plan : plans_)
            spdlog::info("  {}: {} per worker and step, encode {} decode {} per step ({})", plan.name,
                         bytes_text(plan.wire_bytes), seconds_text(plan.encode_seconds),
                         seconds_text(plan.decode_seconds), plan.codec_measured ? "measured" : "not measured: 0");
    }

    void print_tables() const {
        size_t name_width = 4;
        for (const auto& plan : plans_) name_width = std::max(name_width, plan.name.size());
        auto pad_left = [](const std::string& s, size_t w) { return s.size() < w ? s + std::string(w - s.size(), ' ') : s; };
        auto pad_right = [](const std::string& s, size_t w) { return s.size() < w ? std::string(w - s.size(), ' ') + s : s; };
        std::ostream& out = std::cout;
        out << "Break-even bandwidth in Gbit/s: where compression pays (its predicted step faster than uncompressed DDP's)\n";
        std::vector<std::vector<std::string>> cells;
        std::vector<size_t> widths(worlds_.size(), 0);
        for (size_t w = 0; w < worlds_.size(); ++w) widths[w] = std::to_string(worlds_[w]).size() + 2;
        for (size_t p = 0; p < plans_.size(); ++p) {
            std::vector<std::string> row;
            for (size_t w = 0; w < worlds_.size(); ++w) {
                row.push_back(pays_text(priced_[p][w].break_even));
                widths[w] = std::max(widths[w], row.back().size());
            }
            cells.push_back(row);
        }
        out << "  " << pad_left("plan", name_width);
        for (size_t w = 0; w < worlds_.size(); ++w) out << "  " << pad_right("W=" + std::to_string(worlds_[w]), widths[w]);
        out << '\n';
        for (size_t p = 0; p < plans_.size(); ++p) {
            out << "  " << pad_left(plans_[p].name, name_width);
            for (size_t w = 0; w < worlds_.size(); ++w) out << "  " << pad_right(cells[p][w], widths[w]);
            out << '\n';
        }
        out << "\nPredicted speedup over uncompressed DDP\n";
        std::vector<size_t> cell_widths(worlds_.size(), 6);
        for (size_t w = 0; w < worlds_.size(); ++w)
            cell_widths[w] = std::max<size_t>(6, std::to_string(worlds_[w]).size() + 2);
        out << "  " << pad_left("plan", name_width) << "  " << pad_right("Gbit/s", 7);
        for (size_t w = 0; w < worlds_.size(); ++w)
            out << "  " << pad_right("W=" + std::to_string(worlds_[w]), cell_widths[w]);
        out << '\n';
        for (size_t p = 0; p < plans_.size(); ++p)
            for (size_t b = 0; b < bandwidths_.size(); ++b) {
                out << "  " << pad_left(b == 0 ? plans_[p].name : "", name_width) << "  "
                    << pad_right(gbit_text(bandwidths_[b]), 7);
                for (size_t w = 0; w < worlds_.size(); ++w) {
                    const double s = priced_[p][w].cells[b].speedup;
                    out << "  " << pad_right(s < 1000 ? printf_text("%.2fx", s) : printf_text("%.3gx", s), cell_widths[w]);
                }
                out << '\n';
            }
        out.flush();
    }

    void print_csv() const {
        auto g = [](double v) { return std::isfinite(v) ? printf_text("%.10g", v) : std::string(); };
        std::cout << "plan,world_size,bandwidth,alpha,allgather_alpha,allgather_bandwidth,compute_seconds,"
                     "bytes_per_worker,encode_seconds,decode_seconds,baseline_seconds,seconds,speedup,"
                     "break_even_bandwidth,pays_at_low_bandwidth\n";
        for (size_t p = 0; p < plans_.size(); ++p)
            for (const auto& row : priced_[p])
                for (const auto& cell : row.cells) {
                    const perf::Link at = link_.at_bandwidth(cell.bandwidth);
                    const auto& b = row.break_even;
                    std::cout << plans_[p].name << ',' << row.world << ',' << g(cell.bandwidth) << ','
                              << g(at.allreduce.alpha) << ',' << g(at.allgather.alpha) << ','
                              << g(at.allgather.bandwidth) << ',' << g(compute_.seconds) << ','
                              << g(plans_[p].wire_bytes) << ',' << g(plans_[p].encode_seconds) << ','
                              << g(plans_[p].decode_seconds) << ',' << g(cell.baseline_seconds) << ','
                              << g(cell.seconds) << ',' << g(cell.speedup) << ','
                              << (b.bandwidths.empty() ? std::string() : g(b.bandwidths.front())) << ','
                              << (b.pays_at_low_bandwidth ? 1 : 0) << '\n';
                }
        std::cout.flush();
    }

    void print_json() const {
        nlohmann::json report;
        report["what_if"] = true;
        report["source"] = source_;
        report["model"] = cli::json_text_or_null(model_);
        report["parameters"] = tensors_.size();
        if (!c_.metrics.empty())
            report["run"] = {{"metrics", c_.metrics},
                             {"model", run_.model},
                             {"dataset", run_.dataset},
                             {"mode", run_.mode},
                             {"world_size", run_.world_size},
                             {"steps", run_steps_},
                             {"seconds_per_step", cli::json_number(run_seconds_per_step_)},
                             {"predicted_seconds_per_step", cli::json_number(run_predicted_seconds_)}};
        else
            report["run"] = nullptr;
        report["network"] = {{"alpha", link_.allreduce.alpha},
                             {"allgather_alpha", link_.allgather.alpha},
                             {"allgather_bandwidth_factor", link_.allgather.bandwidth / link_.allreduce.bandwidth},
                             {"source", network_source_},
                             {"comm_profile", cli::json_text_or_null(c_.comm)}};
        report["compute_seconds"] = compute_.seconds;
        report["backward_share"] = compute_.backward_share;
        report["compute_source"] = compute_source_;
        report["compute_speed"] = c_.compute_speed;
        report["world_sizes"] = worlds_;
        report["bandwidths"] = bandwidths_;
        nlohmann::json plans = nlohmann::json::array();
        for (size_t p = 0; p < plans_.size(); ++p) {
            const Plan& plan = plans_[p];
            nlohmann::json rows = nlohmann::json::array();
            for (const auto& row : priced_[p]) {
                nlohmann::json cells = nlohmann::json::array();
                for (const auto& cell : row.cells)
                    cells.push_back({{"bandwidth", cell.bandwidth},
                                     {"baseline_seconds", cli::json_number(cell.baseline_seconds)},
                                     {"seconds", cli::json_number(cell.seconds)},
                                     {"speedup", cli::json_number(cell.speedup)},
                                     {"pays", cell.speedup > 1}});
                rows.push_back({{"world_size", row.world},
                                {"break_even_bandwidths", row.break_even.bandwidths},
                                {"pays_at_low_bandwidth", row.break_even.pays_at_low_bandwidth},
                                {"speedup", cells}});
            }
            plans.push_back({{"name", plan.name},
                             {"levels", plan.levels},
                             {"bytes_per_worker", plan.wire_bytes},
                             {"encode_seconds", plan.encode_seconds},
                             {"decode_seconds", plan.decode_seconds},
                             {"codec_measured", plan.codec_measured},
                             {"worlds", rows}});
        }
        report["plans"] = plans;
        report["warnings"] = warnings_;
        std::cout << report.dump(2) << std::endl;
    }

    static std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

    BenchConfig c_;
    perf::Link link_;
    std::string network_source_, source_, model_, compute_source_ = "none";
    std::optional<io::ComputeProfile> profiled_compute_;
    perf::Compute compute_;
    std::vector<TensorInfo> tensors_;
    std::vector<double> tensor_bytes_;
    io::MetricsRun run_;
    double run_steps_ = 0, run_seconds_per_step_ = 0, run_compute_seconds_ = 0;
    double run_predicted_seconds_ = std::numeric_limits<double>::quiet_NaN();  // see predict_run()
    std::vector<EpochPlan> epoch_plans_;
    std::vector<Plan> plans_;
    std::vector<std::int64_t> worlds_;
    std::vector<double> bandwidths_;
    std::vector<std::vector<Priced>> priced_;  // per plan, per world size
    std::vector<std::string> warnings_;
};

}  // namespace

int run_what_if(BenchConfig config) { return WhatIf(std::move(config)).run(); }

}  // namespace acc::app
