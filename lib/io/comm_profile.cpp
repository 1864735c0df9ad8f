#include "io/comm_profile.hpp"
#include "io/h5.hpp"

#include "base/text.hpp"

#include <cmath>

namespace acc::io {
namespace {

const char* const kRowDatasets[] = {"size", "count", "time_min", "time_median", "time_max", "algbw", "busbw", "wrong"};

std::string row_text(const CollectiveProfile& c, size_t i) { return "at size " + std::to_string(c.size[i]) + " B"; }

void check_collective(const H5File& f, const std::string& group, const CollectiveProfile& c) {
    for (size_t i = 0; i < c.size.size(); ++i) {
        if (c.size[i] < 1)
            f.fail(group + "/size is " + std::to_string(c.size[i]) + " in row " + std::to_string(i) +
                   "; sizes are >= 1 byte");
        if (i > 0 && c.size[i] <= c.size[i - 1])
            f.fail(group + "/size is not strictly increasing at row " + std::to_string(i));
        if (c.count[i] < 1) f.fail(group + "/count is " + std::to_string(c.count[i]) + " " + row_text(c, i));
        const double t[] = {c.time_min[i], c.time_median[i], c.time_max[i], c.time_mean[i]};
        for (double v : t)
            if (!(v > 0 && v <= kMaxProfileSeconds))
                f.fail(group + ": a time is " + printf_text("%.10g", v) + " s " + row_text(c, i) +
                       "; times are numbers in (0, " + printf_text("%g", kMaxProfileSeconds) + "] seconds");
        if (!(t[0] <= t[1] && t[1] <= t[2]))
            f.fail(group + ": time_min <= time_median <= time_max does not hold " + row_text(c, i));
        if (!(t[0] <= t[3] && t[3] <= t[2]))
            f.fail(group + ": time_min <= time_mean <= time_max does not hold " + row_text(c, i));
        if (!std::isfinite(c.algbw[i]) || c.algbw[i] < 0 || !std::isfinite(c.busbw[i]) || c.busbw[i] < 0)
            f.fail(group + ": algbw or busbw is not a finite number >= 0 " + row_text(c, i));
        if (c.wrong[i] < -1)
            f.fail(group + "/wrong is " + std::to_string(c.wrong[i]) + " " + row_text(c, i) +
                   "; use -1 for not checked");
    }
    if (!(c.alpha >= 0 && c.alpha <= kMaxProfileSeconds))
        f.fail(group + ": alpha is " + printf_text("%.10g", c.alpha) + "; it is a latency in [0, " +
               printf_text("%g", kMaxProfileSeconds) + "] seconds");
    if (!(c.bandwidth >= kMinProfileBandwidth))
        f.fail(group + ": bandwidth is " + printf_text("%.10g", c.bandwidth) + "; it is at least " +
               printf_text("%g", kMinProfileBandwidth) + " byte/s (inf: no time per byte)");
    if (c.fit_from < 0)
        f.fail(group + ": fit_from is " + std::to_string(c.fit_from) +
               "; it is the size in bytes the fit starts from, >= 0 (0: every size)");
    // A world of one rank moves nothing over links: its bus factor and bus bandwidth may be 0.
    if (std::isnan(c.bus_bandwidth) || c.bus_bandwidth < 0) f.fail(group + ": bus_bandwidth is not a number >= 0");
    if (!std::isfinite(c.bus_factor) || c.bus_factor < 0) f.fail(group + ": bus_factor is not a finite number >= 0");
}

void write_compute(H5File& f, const ComputeProfile& c) {
    const std::string g = "/compute";
    f.create_group(g);
    f.write_attr(g, "model", c.model);
    f.write_attr(g, "batch_size", c.batch_size);
    f.write_attr(g, "classes", c.classes);
    f.write_attr(g, "input", c.input);
    f.write_attr(g, "warmup_steps", c.warmup_steps);
    f.write_attr(g, "threads", c.threads);
    f.write_attr(g, "forward_seconds", c.forward_seconds);
    f.write_attr(g, "backward_seconds", c.backward_seconds);
    f.write(g + "/input_shape", c.input_shape, Dims{c.input_shape.size()});
    f.write(g + "/forward", c.forward, Dims{c.forward.size()});
    f.write(g + "/backward", c.backward, Dims{c.backward.size()});
}

ComputeProfile read_compute(const H5File& f) {
    const std::string g = "/compute";
    ComputeProfile c;
    c.model = f.read_attr_string(g, "model");
    c.batch_size = f.read_attr_int(g, "batch_size");
    if (f.has_attr(g, "classes")) c.classes = f.read_attr_int(g, "classes");
    if (f.has_attr(g, "input")) c.input = f.read_attr_string(g, "input");
    if (f.has_attr(g, "warmup_steps")) c.warmup_steps = f.read_attr_int(g, "warmup_steps");
    if (f.has_attr(g, "threads")) c.threads = f.read_attr_int(g, "threads");
    c.forward_seconds = f.read_attr_double(g, "forward_seconds");
    c.backward_seconds = f.read_attr_double(g, "backward_seconds");
    if (f.exists(g + "/input_shape")) c.input_shape = f.read<std::int64_t>(g + "/input_shape");
    for (const char* name : {"forward", "backward"})
        if (!f.exists(g + "/" + name)) f.fail("dataset " + g + "/" + name + " is missing");
    Dims dims;
    c.forward = f.read<double>(g + "/forward", &dims);
    if (dims.size() != 1 || dims[0] < 1) f.fail(g + "/forward has shape " + dims_text(dims) + ", expected at least one step");
    c.backward = f.read_shaped<double>(g + "/backward", dims, "one per timed step");
    if (c.model.empty()) f.fail(g + ": model is empty");
    if (c.batch_size < 1) f.fail(g + ": batch_size is " + std::to_string(c.batch_size) + "; it must be at least 1");
    auto positive = [](double v) { return v > 0 && v <= kMaxProfileSeconds; };
    const std::string range = "numbers in (0, " + printf_text("%g", kMaxProfileSeconds) + "] seconds";
    for (size_t i = 0; i < c.forward.size(); ++i)
        if (!positive(c.forward[i]) || !positive(c.backward[i]))
            f.fail(g + ": a time is not among " + range + " at step " + std::to_string(i) + " (forward " +
                   printf_text("%.10g", c.forward[i]) + ", backward " + printf_text("%.10g", c.backward[i]) + ")");
    if (!positive(c.forward_seconds) || !positive(c.backward_seconds))
        f.fail(g + ": forward_seconds and backward_seconds must be " + range);
    return c;
}

}  // namespace

double CollectiveProfile::predict(double bytes) const {
    return std::isinf(bandwidth) ? alpha : alpha + bytes / bandwidth;
}

const CollectiveProfile* CommProfile::find(const std::string& name) const {
    for (const auto& c : collectives)
        if (c.name == name) return &c;
    return nullptr;
}

void write_comm_profile(const std::string& path, const CommProfile& p) {
    write_file(path, p.header, kCommProfileFormat, kCommProfileMajor, kCommProfileMinor, [&](H5File& f) {
        f.write_attr("/", "world_size", p.world_size);
        f.write_attr("/", "backend", p.backend);
        f.write_attr("/", "device", p.device);
        f.write_attr("/", "iterations", p.iterations);
        f.write_attr("/", "warmup_iterations", p.warmup_iterations);
        f.write_attr("/", "agg_iters", p.agg_iters);
        f.write_attr("/", "checked", std::int64_t{p.checked ? 1 : 0});
        f.write_strings("/hosts", p.hosts);
        f.create_group("/collectives");
        for (const auto& c : p.collectives) {
            const std::string g = "/collectives/" + c.name;
            const Dims rows{c.size.size()};
            f.write(g + "/size", c.size, rows);
            f.write(g + "/count", c.count, rows);
            f.write(g + "/time_min", c.time_min, rows);
            f.write(g + "/time_median", c.time_median, rows);
            f.write(g + "/time_max", c.time_max, rows);
            f.write(g + "/time_mean", c.time_mean, rows);
            f.write(g + "/algbw", c.algbw, rows);
            f.write(g + "/busbw", c.busbw, rows);
            f.write(g + "/wrong", c.wrong, rows);
            f.write_attr(g, "op", c.op);
            f.write_attr(g, "dtype", c.dtype);
            f.write_attr(g, "bus_factor", c.bus_factor);
            f.write_attr(g, "alpha", c.alpha);
            f.write_attr(g, "bandwidth", c.bandwidth);
            f.write_attr(g, "bus_bandwidth", c.bus_bandwidth);
            f.write_attr(g, "r2", c.r2);
            f.write_attr(g, "rms_relative_residual", c.rms_relative_residual);
            f.write_attr(g, "max_relative_residual", c.max_relative_residual);
            f.write_attr(g, "fit_points", c.fit_points);
            f.write_attr(g, "fit_from", c.fit_from);
        }
        if (p.compute) write_compute(f, *p.compute);
    });
}

CommProfile read_comm_profile(const std::string& path) {
    H5File f = H5File::open(path, false);
    CommProfile p;
    p.header = read_header(f, kCommProfileFormat, kCommProfileMajor);
    p.world_size = f.read_attr_int("/", "world_size");
    if (p.world_size < 1) f.fail("world_size is " + std::to_string(p.world_size) + "; it must be at least 1");
    // Read at its full width and bounded, so that no later conversion wraps it (2^32 + 2 is not 2 ranks).
    if (p.world_size > kMaxProfileRanks)
        f.fail("world_size is " + std::to_string(p.world_size) + "; no run has more than " +
               std::to_string(kMaxProfileRanks) + " ranks");
    if (f.has_attr("/", "backend")) p.backend = f.read_attr_string("/", "backend");
    if (f.has_attr("/", "device")) p.device = f.read_attr_string("/", "device");
    if (f.has_attr("/", "iterations")) p.iterations = f.read_attr_int("/", "iterations");
    if (f.has_attr("/", "warmup_iterations")) p.warmup_iterations = f.read_attr_int("/", "warmup_iterations");
    if (f.has_attr("/", "agg_iters")) p.agg_iters = f.read_attr_int("/", "agg_iters");
    if (p.agg_iters < 1) f.fail("agg_iters is " + std::to_string(p.agg_iters) + "; it must be at least 1");
    if (f.has_attr("/", "checked")) p.checked = f.read_attr_int("/", "checked") != 0;
    if (f.exists("/hosts")) {
        p.hosts = f.read_strings("/hosts");
        if (static_cast<std::int64_t>(p.hosts.size()) != p.world_size)
            f.fail("/hosts lists " + std::to_string(p.hosts.size()) + " hosts for a world of " +
                   std::to_string(p.world_size) + " ranks");
    }
    if (!f.exists("/collectives")) f.fail("group /collectives is missing");
    for (const std::string& name : f.list("/collectives")) {
        const std::string g = "/collectives/" + name;
        CollectiveProfile c;
        c.name = name;
        const Dims dims = f.shape(g + "/size");
        if (dims.size() != 1 || dims[0] < 1)
            f.fail(g + "/size has shape " + dims_text(dims) + ", expected at least one message size");
        const hsize_t rows = dims[0];
        for (const char* column : kRowDatasets)
            if (!f.exists(g + "/" + column)) f.fail("dataset " + g + "/" + column + " is missing");
        c.size = f.read_shaped<std::int64_t>(g + "/size", {rows}, "one entry per message size");
        c.count = f.read_shaped<std::int64_t>(g + "/count", {rows}, "one entry per message size");
        c.time_min = f.read_shaped<double>(g + "/time_min", {rows}, "one entry per message size");
        c.time_median = f.read_shaped<double>(g + "/time_median", {rows}, "one entry per message size");
        c.time_max = f.read_shaped<double>(g + "/time_max", {rows}, "one entry per message size");
        c.time_mean = f.exists(g + "/time_mean")
                          ? f.read_shaped<double>(g + "/time_mean", {rows}, "one entry per message size")
                          : c.time_median;
        c.algbw = f.read_shaped<double>(g + "/algbw", {rows}, "one entry per message size");
        c.busbw = f.read_shaped<double>(g + "/busbw", {rows}, "one entry per message size");
        c.wrong = f.read_shaped<std::int64_t>(g + "/wrong", {rows}, "one entry per message size");
        if (f.has_attr(g, "op")) c.op = f.read_attr_string(g, "op");
        if (f.has_attr(g, "dtype")) c.dtype = f.read_attr_string(g, "dtype");
        c.bus_factor = f.read_attr_double(g, "bus_factor");
        c.alpha = f.read_attr_double(g, "alpha");
        c.bandwidth = f.read_attr_double(g, "bandwidth");
        c.bus_bandwidth = f.read_attr_double(g, "bus_bandwidth");
        if (f.has_attr(g, "r2")) c.r2 = f.read_attr_double(g, "r2");
        if (f.has_attr(g, "rms_relative_residual"))
            c.rms_relative_residual = f.read_attr_double(g, "rms_relative_residual");
        if (f.has_attr(g, "max_relative_residual"))
            c.max_relative_residual = f.read_attr_double(g, "max_relative_residual");
        if (f.has_attr(g, "fit_points")) c.fit_points = f.read_attr_int(g, "fit_points");
        if (f.has_attr(g, "fit_from")) c.fit_from = f.read_attr_int(g, "fit_from");
        check_collective(f, g, c);
        p.collectives.push_back(std::move(c));
    }
    if (p.collectives.empty()) f.fail("/collectives holds no collective");
    if (f.exists("/compute")) p.compute = read_compute(f);
    return p;
}

}  // namespace acc::io
