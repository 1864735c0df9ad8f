#include "compress-bench/driver.hpp"
#include "compress-bench/what_if.hpp"

#include "app/build_info.hpp"
#include "app/comm_network.hpp"
#include "app/training_options.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "cli/tool.hpp"
#include "cli/progress.hpp"
#include "comm/loopback.hpp"
#include "compress/shapes.hpp"
#include "exchange/gradient_exchange.hpp"
#include "io/bench.hpp"
#include "io/comm_profile.hpp"
#include "io/grads.hpp"
#include "io/output.hpp"
#include "perf/model.hpp"
#include "perf/stats.hpp"
#include "trace/trace.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <optional>
#include <utility>

namespace acc::app {

using namespace compress;
using comm::LoopbackCollectives;

namespace {

struct Input {
    std::string name;
    std::vector<std::vector<float>> values;  // per tensor
    double norm = 0;
};

struct Quality {
    double relative_error = 0, cosine = 0, gain = 0;
};

std::string number_text(double v, const char* format) { return std::isfinite(v) ? printf_text(format, v) : "-"; }

// Fixed-point below 1000, where it is easiest to read; %.3g above, so that the text stays short.
std::string bounded_text(double v, const char* fixed, const char* large = "%.3g") {
    return number_text(v, std::fabs(v) < 1000 ? fixed : large);
}

// The results table: the first column left-aligned, the last unpadded, the others
// right-aligned in widths that hold their values, so that every row lines up.
struct TableLayout {
    std::vector<size_t> widths;
    std::string line(const std::vector<std::string>& cells) const {
        std::string out = " ";
        for (size_t i = 0; i < cells.size(); ++i) {
            const size_t width = i < widths.size() ? widths[i] : 0;
            const size_t pad = cells[i].size() < width ? width - cells[i].size() : 0;
            out += ' ';
            if (i == 0) out += cells[i] + std::string(pad, ' ');
            else out += std::string(pad, ' ') + cells[i];
        }
        return out;
    }
};

double finite_or_nan(double v) { return std::isfinite(v) ? v : std::numeric_limits<double>::quiet_NaN(); }

// Single-threaded memcpy bandwidth (bytes copied per second), the yardstick for encode throughput.
double measure_memcpy() {
    const size_t bytes = 64u << 20;
    std::vector<char> a(bytes, 1), b(bytes, 2);
    double best = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 5; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        std::memcpy(b.data(), a.data(), bytes);
        best = std::min(best, seconds_since(t0));
        a[static_cast<size_t>(rep)] = b[bytes - 1 - static_cast<size_t>(rep)];  // keep the copies observable
    }
    return static_cast<double>(bytes) / best;
}

void validate(BenchConfig& c) {
    if (!c.metrics.empty()) throw UsageError("--metrics: applies only with --what-if");
    if (!c.links.empty()) throw UsageError("--links: applies only with --what-if");
    if (c.compute_speed_given) throw UsageError("--compute-speed: applies only with --what-if");
    if (!c.from.empty() && !c.shapes.empty()) throw UsageError("--shapes and --from exclude each other");
    if (!c.snapshots.empty() && c.from.empty()) throw UsageError("--snapshots: applies only with --from");
    if (c.from.empty() && c.shapes.empty()) c.shapes = "resnet18";
    if (c.compressors.empty()) c.compressors = default_specs();
    if (c.worlds.empty()) c.worlds = {4, 16, 64};
    for (auto w : c.worlds)
        if (w < 1 || w > 1000000) throw UsageError("--world: " + std::to_string(w) + " is not a world size from 1 to 1000000");
    if (c.reps < 1) throw UsageError("--reps: must be at least 1");
    if (!c.comm.empty() && (c.alpha_given || c.bandwidth_given))
        throw UsageError("--comm and --alpha/--bandwidth exclude each other (both describe the network)");
    if (c.comm_model != CommModel::fit && c.comm.empty())
        throw UsageError(std::string("--comm-model ") + comm_model_name(c.comm_model) +
                         ": needs --comm, whose measured times it prices with");
    if (c.alpha_given != c.bandwidth_given)
        throw UsageError(c.alpha_given ? "--alpha needs --bandwidth" : "--bandwidth needs --alpha");
    if (!(c.alpha >= 0) || !std::isfinite(c.alpha)) throw UsageError("--alpha: must be a finite number of seconds >= 0");
    if (!(c.bandwidth > 0) || !std::isfinite(c.bandwidth))
        throw UsageError("--bandwidth: must be a finite number of bytes per second > 0");
    if (!(c.compute_ms >= 0) || !std::isfinite(c.compute_ms))
        throw UsageError("--compute-ms: must be a finite number of milliseconds >= 0");
    if (c.threads < 1 || c.threads > cli::kMaxThreads)
        throw UsageError("--threads: must be a whole number in [1, " + std::to_string(cli::kMaxThreads) + "]");
    if (c.csv && c.json) throw UsageError("--csv and --json exclude each other (both write to standard output)");
    if (!c.path) c.path = c.device == Device::cuda ? CompressorPath::device : CompressorPath::host;
    if (c.device == Device::cuda && *c.path == CompressorPath::host)
        throw UsageError("--path host: the host path runs on CPU tensors; use --device cpu, or --path device");
    check_device_available(c.device);
    if (!c.output.empty() || !c.trace.empty()) {
        const auto& presets = model_presets();
        const bool preset = std::find(presets.begin(), presets.end(), c.shapes) != presets.end();
        check_distinct_files({{"--from", c.from}, {"--shapes", preset ? "" : c.shapes}, {"--comm", c.comm}},
                             {{"--output", c.output}, {"--trace", c.trace}});
    }
}

// Fills `tensors`, `source` (what the inputs came from) and `model` (the model's name, when known).
std::vector<Input> load_inputs(const BenchConfig& c, std::vector<TensorInfo>& tensors, std::string& source,
                               std::string& model) {
    std::vector<Input> inputs;
    if (!c.from.empty()) {
        source = c.from;
        io::GradStats grads = io::read_grads(c.from);
        model = grads.run.model;
        for (const auto& p : grads.parameters) tensors.push_back({p.name, p.shape});
        if (grads.snapshot_epochs.empty())
            throw FileError(c.from, "holds no gradient snapshots; run grad-dump with --snapshot-epochs");
        std::vector<std::int64_t> epochs = c.snapshots.empty() ? grads.snapshot_epochs : c.snapshots;
        for (auto e : epochs) {
            if (std::find(grads.snapshot_epochs.begin(), grads.snapshot_epochs.end(), e) == grads.snapshot_epochs.end()) {
                std::vector<std::string> have;
                for (auto h : grads.snapshot_epochs) have.push_back(std::to_string(h));
                throw FileError(c.from, "has no gradient snapshot of epoch " + std::to_string(e) + " (it has epochs " +
                                            join(have, ", ") + ")");
            }
            Input in;
            in.name = "epoch " + std::to_string(e);
            in.values = io::read_snapshot(c.from, e);  // finite, at each parameter's shape (io refuses others)
            inputs.push_back(std::move(in));
        }
    } else {
        const auto& presets = model_presets();
        const bool preset = std::find(presets.begin(), presets.end(), c.shapes) != presets.end();
        if (!preset && !std::filesystem::exists(c.shapes))
            throw UsageError("--shapes: '" + c.shapes + "' is neither a model (" + join(presets, ", ") +
                             ") nor an existing shapes file");
        tensors = preset ? preset_shapes(c.shapes) : read_shapes_file(c.shapes);
        source = c.shapes;
        if (preset) model = c.shapes;
        // Synthetic gradients: i.i.d. standard normal values (a hard case for low-rank and
        // sparse compressors; --from gives real gradients).
        Input in;
        in.name = "synthetic";
        auto generator = at::make_generator<at::CPUGeneratorImpl>(0);
        for (const auto& t : tensors) {
            at::Tensor v = at::randn({t.numel()}, generator);
            in.values.emplace_back(v.data_ptr<float>(), v.data_ptr<float>() + v.numel());
        }
        inputs.push_back(std::move(in));
    }
    for (auto& in : inputs) {
        double squares = 0;
        for (const auto& v : in.values)
            for (float x : v) squares += static_cast<double>(x) * x;
        in.norm = std::sqrt(squares);
    }
    return inputs;
}

Quality quality_of(const Input& in, const std::vector<at::Tensor>& compressed) {
    double dot = 0, squares_c = 0, squares_d = 0;
    for (size_t i = 0; i < compressed.size(); ++i) {
        const float* c = compressed[i].data_ptr<float>();
        const auto& g = in.values[i];
        for (size_t j = 0; j < g.size(); ++j) {
            double a = c[j], b = g[j];
            dot += a * b;
            squares_c += a * a;
            squares_d += (a - b) * (a - b);
        }
    }
    const double g2 = in.norm * in.norm;
    Quality q;
    q.relative_error = finite_or_nan(std::sqrt(squares_d) / in.norm);
    q.cosine = finite_or_nan(dot / (std::sqrt(squares_c) * in.norm));
    q.gain = finite_or_nan(squares_c / g2);
    return q;
}

void copy_into(const Input& in, std::vector<at::Tensor>& work) {
    for (size_t i = 0; i < work.size(); ++i) {
        if (work[i].is_cpu()) {
            std::memcpy(work[i].data_ptr<float>(), in.values[i].data(), in.values[i].size() * sizeof(float));
            continue;
        }
        auto& v = const_cast<std::vector<float>&>(in.values[i]);
        work[i].copy_(at::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, at::kFloat));
    }
}

std::vector<at::Tensor> on_host(const std::vector<at::Tensor>& work) {
    std::vector<at::Tensor> out;
    for (const auto& t : work) out.push_back(t.to(at::kCPU).contiguous());
    return out;
}

std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) return text;
    std::string out = "\"";
    for (char ch : text) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return out + "\"";
}

}  // namespace

const std::vector<std::string>& compressor_path_names() {
    // In CompressorPath's order.
    static const std::vector<std::string> names = {"host", "device"};
    return names;
}

const char* compressor_path_name(CompressorPath path) {
    return compressor_path_names().at(static_cast<size_t>(path)).c_str();
}

CompressorPath parse_compressor_path(const std::string& name) {
    const auto& names = compressor_path_names();
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return static_cast<CompressorPath>(i);
    throw UsageError("--path: must be " + join(names, " or ") + ", not '" + name + "'");
}

const char* vector_level_name(VectorLevel level) { return level == VectorLevel::compress ? "compress" : "none"; }

const char* topk_selection_name(TopkSelection selection) {
    return selection == TopkSelection::sampled ? "sampled" : "exact";
}

namespace {

// One run of the benchmark, in the order of its output: the inputs, the network and
// the compute the model predicts with, the header lines, one table per input (a row
// per compressor and world size), then the results file, CSV and JSON.
class Bench {
public:
    explicit Bench(BenchConfig config) : c_(std::move(config)) {}

    int run() {
        validate(c_);
        claims_ = io::claim_outputs({c_.output}, "compress-bench", c_.force);
        if (!c_.trace.empty()) trace::check_destination(c_.trace);  // before any work, as --output
        at::set_num_threads(static_cast<int>(c_.threads));
        inputs_ = load_inputs(c_, tensors_, source_, model_);
        for (const auto& t : tensors_) {
            values_ += t.numel();
            tensor_bytes_.push_back(4.0 * static_cast<double>(t.numel()));
        }
        dense_bytes_ = 4.0 * static_cast<double>(values_);
        set_network();
        set_compute();
        memcpy_bandwidth_ = measure_memcpy();
        set_exchange_options();
        describe_file();
        for (auto w : c_.worlds)
            baseline_[w] = perf::predict_ddp(net_, static_cast<int>(w), tensor_bytes_, compute_);
        print_header();
        std::unique_ptr<trace::Trace> recording;
        if (!c_.trace.empty()) recording = std::make_unique<trace::Trace>(c_.trace, c_.device == Device::cuda);
        measure_all();
        if (recording) {
            const std::size_t events = recording->finish();
            spdlog::info("");
            spdlog::info("wrote {} ({} events)", c_.trace, events);
        }
        if (!c_.output.empty()) {
            io::write_bench(c_.output, file_);
            spdlog::info("");
            spdlog::info("wrote {}", c_.output);
        }
        if (c_.csv) print_csv();
        if (c_.json) print_json();
        return 0;
    }

private:
    void warn(const std::string& text) {
        spdlog::warn(text);
        warnings_.push_back(text);
    }

    // The network: a comm-profile file's fits, or --alpha and --bandwidth (or their defaults).
    void set_network() {
        network_source_ = c_.alpha_given ? "flags" : "default";
        net_ = gather_net_ = perf::Network{c_.alpha, c_.bandwidth};
        if (c_.comm.empty()) {
            network_line_ = "  network: bandwidth " + bytes_text(net_.bandwidth) + "/s, alpha " +
                            short_number(net_.alpha * 1e6) + " us" +
                            (c_.alpha_given ? "" : " (defaults: pass --comm, or --alpha and --bandwidth)");
            return;
        }
        ProfiledNetworks profiled = read_profiled_networks(c_.comm, c_.comm_model);
        profiled_compute_ = std::move(profiled.compute);
        const int n = profiled.world;
        net_ = profiled.allreduce;
        gather_net_ = profiled.allgather;
        std::string gathered = "allgather as allreduce";
        if (profiled.has_allgather)
            gathered = "allgather: " + bytes_text(gather_net_.bandwidth) + "/s, alpha " +
                       short_number(gather_net_.alpha * 1e6) + " us per step";
        network_source_ = "comm";
        network_line_ = "  network from " + c_.comm + " (" + profiled.backend + ", " + std::to_string(n) +
                        " ranks): allreduce: " + bytes_text(net_.bandwidth) + "/s, alpha " +
                        short_number(net_.alpha * 1e6) + " us per step; " + gathered;
        if (c_.comm_model == CommModel::measured)
            network_line_ += "\n  at " + std::to_string(n) + " ranks, the measured times between " +
                             bytes_text(net_.measured.sizes.front()) + " and " +
                             bytes_text(net_.measured.sizes.back()) + " (--comm-model measured)";
    }

    // The compute: --compute-ms, else what comm-profile --model measured (its split into
    // forward and backward sets the backward pass's share), else none.
    void set_compute() {
        compute_.seconds = c_.compute_ms / 1000.0;
        compute_line_ = "  compute " + short_number(c_.compute_ms) + " ms per iteration" +
                        (c_.compute_ms > 0 ? "" : " (pass --compute-ms, or --comm with a profile taken with --model)");
        if (c_.compute_ms_given || !profiled_compute_) return;
        const io::ComputeProfile& p = *profiled_compute_;
        compute_ = profiled_compute(p, compute_);
        compute_line_ = "  compute " + short_number(compute_.seconds * 1e3) + " ms per iteration (forward " +
                        short_number(p.forward_seconds * 1e3) + " ms, backward " +
                        short_number(p.backward_seconds * 1e3) + " ms) of " + p.model + ", batch " +
                        std::to_string(p.batch_size) + " per rank, from " + c_.comm;
        if (!model_.empty() && model_ != p.model)
            warn(c_.comm + " holds the compute time of " + p.model + ", but the gradients are " + model_ +
                 "'s; pass --compute-ms, or time that model with comm-profile --model");
    }

    void set_exchange_options() {
        options_.compressors.topk.selection = c_.topk_selection;
        options_.device_path_on_cpu = *c_.path == CompressorPath::device;
        options_.time_device_work = c_.device == Device::cuda;
        device_ = c_.device == Device::cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
    }

    // The results file's header: everything but the inputs and rows.
    void describe_file() {
        file_.header.provenance = c_.provenance;
        file_.source = source_;
        file_.network_source = network_source_;
        file_.comm_profile = c_.comm;
        file_.comm_model = comm_model_name(c_.comm_model);
        file_.alpha = net_.alpha;
        file_.bandwidth = net_.bandwidth;
        file_.allgather_alpha = gather_net_.alpha;
        file_.allgather_bandwidth = gather_net_.bandwidth;
        file_.compute_seconds = compute_.seconds;
        file_.backward_share = compute_.backward_share;
        file_.bucket_bytes = compute_.bucket_bytes;
        file_.reps = c_.reps;
        file_.threads = c_.threads;
        file_.memcpy_bandwidth = memcpy_bandwidth_;
        file_.vectors = vector_level_name(c_.vectors);
        file_.topk_selection = topk_selection_name(c_.topk_selection);
        for (const auto& t : tensors_) file_.parameters.push_back({t.name, t.shape});
    }

    void print_header() const {
        spdlog::info("{}: {} tensors, {} values ({} per worker and step uncompressed)", source_, tensors_.size(),
                     with_commas(values_), bytes_text(dense_bytes_));
        spdlog::info("{}", network_line_);
        spdlog::info("{}", compute_line_);
        spdlog::info("  memcpy {}/s on one thread; {} thread{}, {} timed step{} after one warm-up",
                     bytes_text(memcpy_bandwidth_), c_.threads, c_.threads == 1 ? "" : "s", c_.reps,
                     c_.reps == 1 ? "" : "s");
        spdlog::info("  compressors: {} path on {}", compressor_path_name(*c_.path),
                     c_.device == Device::cuda ? "the GPU (cuda:0)" : "the CPU");
        for (auto w : c_.worlds) {
            const perf::Prediction& b = baseline_.at(w);
            spdlog::info("  uncompressed DDP, W={}: {} ms per iteration ({} ms of allreduce, {} ms not hidden by the "
                         "backward pass)",
                         w, number_text(b.iteration_seconds * 1e3, "%.3g"),
                         number_text(b.communication_seconds * 1e3, "%.3g"),
                         number_text(b.exposed_seconds * 1e3, "%.3g"));
        }
    }

    // Every input, compressor and world size: one row each.
    void measure_all() {
        // Widths that hold the longest text each column's format prints: %.3g gives at
        // most 8 characters ("1.23e+03", "0.000123"), bytes_text at most 11.
        size_t name_width = 10, world_width = 1;
        for (const auto& spec : c_.compressors) name_width = std::max(name_width, spec.text().size());
        for (auto w : c_.worlds) world_width = std::max(world_width, std::to_string(w).size());
        table_ = TableLayout{{name_width, world_width, 11, 9, 11, 11, 8, 8, 6, 8, 11, 11, 9, 0}};
        // A sweep of large models takes minutes: say which row is being measured.
        const auto rows = static_cast<std::int64_t>(inputs_.size() * c_.compressors.size() * c_.worlds.size());
        progress_.begin_items(rows, static_cast<double>(rows));
        for (size_t input = 0; input < inputs_.size(); ++input) measure_input(input);
    }

    void measure_input(size_t input) {
        const Input& in = inputs_[input];
        file_.inputs.push_back({in.name, in.norm});
        if (!(in.norm > 0)) warn("input '" + in.name + "' has zero norm: relative error, cosine and gain are undefined");
        spdlog::info("");
        spdlog::info("{} ({}):", in.name, source_);
        spdlog::info("{}", table_.line({"compressor", "W", "sent", "ratio", "encode", "decode", "GB/s", "rel.err",
                                        "cosine", "gain", "comm", "iter", "speedup", "pays"}));
        std::vector<at::Tensor> work;
        for (const auto& t : tensors_) work.push_back(at::empty({t.numel()}, at::TensorOptions().device(device_)));
        for (const auto& spec : c_.compressors) {
            const std::string text = spec.text();
            std::vector<Spec> levels;
            for (const auto& t : tensors_)
                levels.push_back(c_.vectors == VectorLevel::compress || t.shape.size() > 1 ? spec : no_compression());
            for (auto w : c_.worlds) {
                progress_.start_item((inputs_.size() > 1 ? in.name + ": " : "") + text + " W=" + std::to_string(w));
                io::BenchRow row = measure_row(input, text, levels, w, work);
                progress_.finish_item();
                print_row(row);
                file_.rows.push_back(row);
            }
        }
    }

    // One compressor at one world size: a warm-up step from empty state, whose C(g)
    // gives the quality measures, then the timed steps; the model's prediction.
    io::BenchRow measure_row(size_t input, const std::string& text, const std::vector<Spec>& levels, std::int64_t w,
                             std::vector<at::Tensor>& work) {
        const Input& in = inputs_[input];
        LoopbackCollectives comm(static_cast<int>(w));
        exchange::GradientExchange x(tensors_, levels, comm, options_);
        copy_into(in, work);
        x.step(work);
        const Quality q = quality_of(in, on_host(work));
        std::vector<double> encode, decode;
        {
            // --trace: the timed steps in a range named as the progress line names them.
            const auto steps =
                trace::range((inputs_.size() > 1 ? in.name + ": " : "") + text + " W=" + std::to_string(w));
            for (std::int64_t rep = 0; rep < c_.reps; ++rep) {
                copy_into(in, work);
                {
                    const auto one = trace::range("step");
                    x.step(work);
                }
                encode.push_back(x.last_step().encode_seconds);
                decode.push_back(x.last_step().decode_seconds);
            }
        }
        std::vector<perf::Transfer> transfers;
        for (const auto& planned : x.planned_collectives())
            transfers.push_back({planned.kind == Collective::allreduce ? perf::Collective::allreduce
                                                                       : perf::Collective::allgather,
                                 static_cast<double>(planned.bytes)});
        io::BenchRow row;
        row.input = static_cast<std::int64_t>(input);
        row.compressor = text;
        row.world_size = w;
        row.bytes_per_worker = x.last_step().bytes;
        row.compression_ratio = dense_bytes_ / static_cast<double>(std::max<std::int64_t>(1, row.bytes_per_worker));
        const perf::TimingStats encode_stats = perf::summarize(encode), decode_stats = perf::summarize(decode);
        row.encode_median = encode_stats.median;
        row.encode_min = encode_stats.min;
        row.encode_max = encode_stats.max;
        row.decode_median = decode_stats.median;
        row.decode_min = decode_stats.min;
        row.decode_max = decode_stats.max;
        row.throughput = dense_bytes_ / (row.encode_median + row.decode_median);
        row.relative_error = q.relative_error;
        row.cosine = q.cosine;
        row.gain = q.gain;
        const perf::Prediction p = perf::predict_compressed(net_, gather_net_, static_cast<int>(w), transfers,
                                                            row.encode_median, row.decode_median, compute_);
        row.comm_seconds = p.communication_seconds;
        row.iteration_seconds = p.iteration_seconds;
        row.baseline_iteration_seconds = baseline_.at(w).iteration_seconds;
        row.speedup = row.baseline_iteration_seconds / row.iteration_seconds;
        return row;
    }

    void print_row(const io::BenchRow& row) const {
        spdlog::info("{}", table_.line({row.compressor, std::to_string(row.world_size),
                                        bytes_text(static_cast<double>(row.bytes_per_worker)),
                                        number_text(row.compression_ratio, "%.3gx"),
                                        number_text(row.encode_median * 1e3, "%.3g ms"),
                                        number_text(row.decode_median * 1e3, "%.3g ms"),
                                        number_text(row.throughput / 1e9, "%.3g"),
                                        bounded_text(row.relative_error, "%.3f"), number_text(row.cosine, "%.3f"),
                                        bounded_text(row.gain, "%.3f"),
                                        number_text(row.comm_seconds * 1e3, "%.3g ms"),
                                        number_text(row.iteration_seconds * 1e3, "%.3g ms"),
                                        bounded_text(row.speedup, "%.2fx", "%.3gx"), row.speedup > 1 ? "yes" : "no"}));
    }

    void print_csv() const {
        std::cout << "input,compressor,world_size,bytes_per_worker,compression_ratio,encode_seconds_median,"
                     "encode_seconds_min,encode_seconds_max,decode_seconds_median,decode_seconds_min,"
                     "decode_seconds_max,throughput,relative_error,cosine,gain,comm_seconds,iteration_seconds,"
                     "baseline_iteration_seconds,speedup\n";
        auto g = [](double v) { return std::isfinite(v) ? number_text(v, "%.6g") : std::string(); };
        for (const auto& r : file_.rows)
            std::cout << csv_field(file_.inputs[static_cast<size_t>(r.input)].name) << ',' << r.compressor << ','
                      << r.world_size << ',' << r.bytes_per_worker << ',' << g(r.compression_ratio) << ','
                      << g(r.encode_median) << ',' << g(r.encode_min) << ',' << g(r.encode_max) << ','
                      << g(r.decode_median) << ',' << g(r.decode_min) << ',' << g(r.decode_max) << ','
                      << g(r.throughput) << ',' << g(r.relative_error) << ',' << g(r.cosine) << ',' << g(r.gain) << ','
                      << g(r.comm_seconds) << ',' << g(r.iteration_seconds) << ',' << g(r.baseline_iteration_seconds)
                      << ',' << g(r.speedup) << '\n';
        std::cout.flush();
    }

    // What the run used: the inputs, the network and compute, and the settings.
    nlohmann::json json_settings() const {
        nlohmann::json report;
        report["source"] = source_;
        report["parameters"] = tensors_.size();
        report["values"] = values_;
        nlohmann::json list = nlohmann::json::array();
        for (const auto& in : file_.inputs) list.push_back({{"name", in.name}, {"norm", in.norm}});
        report["inputs"] = list;
        report["network"] = {{"alpha", net_.alpha},
                             {"bandwidth", net_.bandwidth},
                             {"allgather_alpha", gather_net_.alpha},
                             {"allgather_bandwidth", gather_net_.bandwidth},
                             {"source", file_.network_source},
                             {"comm_profile", cli::json_text_or_null(c_.comm)},
                             {"comm_model", comm_model_name(c_.comm_model)}};
        report["compute_seconds"] = compute_.seconds;
        report["backward_share"] = compute_.backward_share;
        report["compute_source"] = c_.compute_ms_given ? "flag" : profiled_compute_ ? "comm" : "none";
        report["memcpy_bandwidth"] = memcpy_bandwidth_;
        report["threads"] = c_.threads;
        report["reps"] = c_.reps;
        report["vectors"] = vector_level_name(c_.vectors);
        report["topk_selection"] = topk_selection_name(c_.topk_selection);
        return report;
    }

    void print_json() const {
        nlohmann::json report = json_settings();
        nlohmann::json base = nlohmann::json::array();
        for (auto w : c_.worlds) {
            const perf::Prediction& b = baseline_.at(w);
            base.push_back({{"world_size", w},
                            {"iteration_seconds", b.iteration_seconds},
                            {"communication_seconds", b.communication_seconds},
                            {"exposed_seconds", b.exposed_seconds}});
        }
        report["baseline"] = base;
        nlohmann::json results = nlohmann::json::array();
        for (const auto& r : file_.rows)
            results.push_back({{"input", file_.inputs[static_cast<size_t>(r.input)].name},
                               {"compressor", r.compressor},
                               {"world_size", r.world_size},
                               {"bytes_per_worker", r.bytes_per_worker},
                               {"floats_per_worker", static_cast<double>(r.bytes_per_worker) / 4.0},
                               {"compression_ratio", cli::json_number(r.compression_ratio)},
                               {"encode_seconds", {{"median", r.encode_median}, {"min", r.encode_min}, {"max", r.encode_max}}},
                               {"decode_seconds", {{"median", r.decode_median}, {"min", r.decode_min}, {"max", r.decode_max}}},
                               {"throughput", cli::json_number(r.throughput)},
                               {"relative_error", cli::json_number(r.relative_error)},
                               {"cosine", cli::json_number(r.cosine)},
                               {"gain", cli::json_number(r.gain)},
                               {"comm_seconds", cli::json_number(r.comm_seconds)},
                               {"iteration_seconds", cli::json_number(r.iteration_seconds)},
                               {"baseline_iteration_seconds", cli::json_number(r.baseline_iteration_seconds)},
                               {"speedup", cli::json_number(r.speedup)},
                               {"pays", r.speedup > 1}});
        report["results"] = results;
        report["output"] = cli::json_text_or_null(c_.output);
        report["warnings"] = warnings_;
        std::cout << report.dump(2) << std::endl;
    }

    BenchConfig c_;
    std::vector<io::OutputClaim> claims_;  // --output, for the whole run
    std::vector<TensorInfo> tensors_;
    std::string source_, model_;  // what the inputs came from; the model's name, when known
    std::vector<Input> inputs_;
    std::int64_t values_ = 0;
    std::vector<double> tensor_bytes_;
    double dense_bytes_ = 0;
    std::string network_source_, network_line_, compute_line_;
    perf::Network net_{}, gather_net_{};
    std::optional<io::ComputeProfile> profiled_compute_;
    perf::Compute compute_;
    double memcpy_bandwidth_ = 0;
    exchange::ExchangeOptions options_;
    at::Device device_ = at::kCPU;
    io::BenchFile file_;
    std::map<std::int64_t, perf::Prediction> baseline_;
    TableLayout table_;
    cli::Progress progress_;
    std::vector<std::string> warnings_;
};

}  // namespace

namespace {

// --compressors: each level parsed once, as it is read; a level given twice runs once.
std::vector<Spec> distinct_levels(const std::vector<std::string>& texts) {
    std::vector<Spec> levels;
    for (const auto& text : texts) {
        Spec spec;
        try {
            spec = parse_spec(text);
        } catch (const UsageError& e) {
            throw UsageError(std::string("--compressors: ") + e.what());
        }
        if (std::find(levels.begin(), levels.end(), spec) == levels.end()) levels.push_back(spec);
    }
    return levels;
}

// What to compress: the gradients' shapes or snapshots, the compressors, the world sizes.
void add_input_options(CLI::App& app, BenchConfig& config) {
    app.add_option("--shapes", config.shapes,
                   "Model whose parameter shapes to use (" + join(model_presets(), ", ") +
                       ") or a shapes file of NAME SHAPE lines [resnet18]")
        ->type_name("MODEL|FILE");
    app.add_option("--from", config.from, "Gradient-statistics file whose gradient snapshots to use")
        ->type_name("GRADS.h5");
    cli::add_whole_number_list(app, "--snapshots", config.snapshots, 0, 1000000,
                               "With --from: the snapshot epochs to use [all]")
        ->type_name("EPOCH,...");
    std::vector<std::string> defaults;
    for (const auto& spec : default_specs()) defaults.push_back(spec.text());
    app.add_option_function<std::vector<std::string>>(
           "--compressors",
           [&config](const std::vector<std::string>& texts) { config.compressors = distinct_levels(texts); },
           "Compressor specs, comma-separated [" + join(defaults, ",") + "]")
        ->delimiter(',')
        ->type_name("SPEC,...");
    cli::add_whole_number_list(app, "--world", config.worlds, 1, 1000000,
                               "World sizes to predict for, comma-separated [4,16,64; with --what-if "
                               "8,16,32,...,1024]")
        ->type_name("W,...");
    app.add_option("--reps", config.reps, "Timed steps per compressor and world size, after one warm-up")
        ->check(cli::whole_number(1, 1000000))
        ->type_name("N");
}

// The network and compute time the performance model predicts with; whether --alpha,
// --bandwidth and --compute-ms were given matters, not only their values.
void add_network_options(CLI::App& app, BenchConfig& config) {
    app.add_option("--comm", config.comm,
                   "Communication profile written by comm-profile: the network's latency and bandwidth")
        ->type_name("COMM.h5");
    cli::add_typed_option(
        app, "--comm-model", config.comm_model,
        [](const std::string& name) { return name == "measured" ? CommModel::measured : CommModel::fit; },
        "How --comm prices a collective: fit (alpha + S/B at every size) or measured (at the profile's world size, "
        "between two sizes it measured from its --fit-from on, the time interpolated from theirs; the fit elsewhere)")
        ->check(CLI::IsMember({"fit", "measured"}))
        ->default_str(comm_model_name(config.comm_model));
    app.add_option("--alpha", config.alpha, "Network latency per message step, in seconds (default: 10 Gbit/s Ethernet)")
        ->check(cli::number(0, 60))
        ->each([&config](const std::string&) { config.alpha_given = true; })
        ->type_name("SECONDS");
    app.add_option("--bandwidth", config.bandwidth, "Network bandwidth in bytes per second")
        ->check(cli::number(0, 1e15, true))
        ->each([&config](const std::string&) { config.bandwidth_given = true; })
        ->type_name("BYTES_PER_S");
    app.add_option("--compute-ms", config.compute_ms,
                   "Forward plus backward time of one iteration, in ms [the time comm-profile "
                   "--model stored in --comm, else 0]")
        ->check(cli::number(0, 3.6e6))
        ->each([&config](const std::string&) { config.compute_ms_given = true; })
        ->type_name("MS");
}

// How the compressors run, and where the results go.
void add_run_options(CLI::App& app, BenchConfig& config) {
    cli::add_typed_option(
        app, "--vectors", config.vectors,
        [](const std::string& name) { return name == "compress" ? VectorLevel::compress : VectorLevel::none; },
        "Parameters with fewer than 2 dimensions: sent uncompressed (none) or compressed too")
        ->check(CLI::IsMember({"none", "compress"}))
        ->default_str(vector_level_name(config.vectors));
    cli::add_typed_option(
        app, "--topk-selection", config.topk_selection,
        [](const std::string& name) { return name == "sampled" ? TopkSelection::sampled : TopkSelection::exact; },
        "Top-k selection: exact, or sampled (a DGC-style threshold)")
        ->check(CLI::IsMember({"exact", "sampled"}))
        ->default_str(topk_selection_name(config.topk_selection));
    app.add_option("--threads", config.threads, "LibTorch threads (the compressors' own loops use one)")
        ->check(cli::whole_number(1, cli::kMaxThreads))
        ->type_name("N");
    add_device_option(app, config.device, "Where the gradients live: cpu, or cuda (the device codecs on the GPU) [cpu]");
    // Unset (no default shown) means the device's own path.
    cli::add_typed_option(app, "--path", config.path, parse_compressor_path,
                          "Compressor code: host (raw float loops) or device (ATen operations, as on a GPU) "
                          "[host on cpu, device on cuda]")
        ->check(CLI::IsMember(compressor_path_names()));
    app.add_option("-o,--output", config.output, "Results file to write (format accordion.compress-bench)")
        ->type_name("BENCH.h5");
    app.add_flag("--force", config.force, "Replace an output file that is read-only or not an HDF5 file");
    app.add_option("--trace", config.trace,
                   "Write a trace of the timed steps (Chrome trace JSON, for chrome://tracing or ui.perfetto.dev): "
                   "the host's ATen operations and, on a GPU, each kernel, copy and memset with its device time. "
                   "The profiler slows the host: take timings from a run without it")
        ->type_name("TRACE.json");
    app.add_flag("--csv", config.csv, "Print the results as CSV on stdout");
    app.add_flag("--json", config.json, "Print the results as JSON on stdout");
}

// --what-if: the plans priced by the model on other links, world sizes and compute speeds.
void add_what_if_options(CLI::App& app, BenchConfig& config) {
    app.add_flag("--what-if", config.what_if,
                 "Run no compressor: price a plan with the performance model on other links, world sizes and "
                 "compute speeds (a recorded run's, --metrics, or the model's at each --compressors level), "
                 "with the bandwidth where compression starts to pay");
    app.add_option("--metrics", config.metrics,
                   "With --what-if: a train-dist metrics file whose plan to price (each epoch's level per "
                   "parameter, its compute, encode and decode seconds per step)")
        ->type_name("METRICS.h5");
    app.add_option("--links", config.links,
                   "With --what-if: link bandwidths in Gbit/s, comma-separated [1,10,25,100; --bandwidth's "
                   "or --comm's when given]")
        ->delimiter(',')
        ->check(cli::number(0, 1e6, true))
        ->type_name("GBIT,...");
    app.add_option("--compute-speed", config.compute_speed,
                   "With --what-if: how many times faster than the run (or --compute-ms) the compute, encoding "
                   "and decoding run [1]")
        ->check(cli::number(0, 1e6, true))
        ->each([&config](const std::string&) { config.compute_speed_given = true; })
        ->type_name("FACTOR");
}

}  // namespace

void add_compress_bench_options(CLI::App& app, BenchConfig& config) {
    add_input_options(app, config);
    add_network_options(app, config);
    add_run_options(app, config);
    add_what_if_options(app, config);
    app.footer("Compressor specs:\n" + spec_help());
}

int run_bench(BenchConfig config) {
    if (config.what_if) return run_what_if(std::move(config));
    return Bench(std::move(config)).run();
}

}  // namespace acc::app
