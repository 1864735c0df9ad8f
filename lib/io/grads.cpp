#include "io/grads.hpp"
#include "io/h5.hpp"

#include "base/error.hpp"
#include "io/atomic.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <functional>
#include <optional>


namespace acc::io {
namespace {

const char* kDoubleColumns[] = {"lr", "loss", "accuracy", "test_loss", "test_accuracy", "seconds"};

std::string snapshot_group(std::int64_t epoch) { return "/snapshots/epoch_" + std::to_string(epoch); }

const char* const kProfileFractions = "/profile/topk_fraction";
const char* const kProfileTail = "/profile/topk_tail";
const char* const kProfileSpectra = "/profile/singular_values";

std::string singular_values_dataset(const std::string& parameter) { return std::string(kProfileSpectra) + "/" + parameter; }

// Length of a matrix parameter's spectrum: the smaller side of PowerSGD's view,
// shape[0] rows by numel / shape[0] columns (docs/formats.md).
hsize_t spectrum_length(const Parameter& p) {
    const std::int64_t rows = p.shape[0];
    return static_cast<hsize_t>(std::min(rows, p.numel() / rows));
}

std::string at_epoch(size_t e, const Parameter& p) {
    return " at epoch " + std::to_string(e) + ", parameter '" + p.name + "'";
}

// /profile, checked whole: every epoch and parameter, finite values in range,
// tails that never grow with the fraction kept, spectra largest first.
GradProfile read_profile(const H5File& f, const std::vector<Parameter>& parameters, size_t epochs) {
    GradProfile out;
    if (!f.exists(kProfileFractions)) f.fail(std::string("dataset ") + kProfileFractions + " is missing");
    Dims fd = f.shape(kProfileFractions);
    if (fd.size() != 1 || fd[0] == 0)
        f.fail(std::string(kProfileFractions) + " has shape " + dims_text(fd) + ", expected one or more fractions");
    out.topk_fractions = f.read<double>(kProfileFractions);
    for (size_t k = 0; k < out.topk_fractions.size(); ++k) {
        const double x = out.topk_fractions[k];
        if (!(x > 0 && x <= 1) || (k > 0 && !(x > out.topk_fractions[k - 1])))
            f.fail(std::string(kProfileFractions) + " must increase within (0, 1]; entry " + std::to_string(k) +
                   " is " + std::to_string(x));
    }
    const size_t count = parameters.size(), fractions = out.topk_fractions.size();
    if (!f.exists(kProfileTail)) f.fail(std::string("dataset ") + kProfileTail + " is missing");
    std::vector<double> tail = f.read_shaped<double>(kProfileTail, {epochs, count, fractions},
                                                     "epochs x parameters x fractions of /profile/topk_fraction");
    out.topk_tail.assign(epochs, std::vector<std::vector<double>>(count));
    out.singular_values.assign(epochs, std::vector<std::vector<double>>(count));
    for (size_t e = 0; e < epochs; ++e)
        for (size_t p = 0; p < count; ++p) {
            auto first = tail.begin() + static_cast<std::ptrdiff_t>((e * count + p) * fractions);
            std::vector<double>& row = out.topk_tail[e][p];
            row.assign(first, first + static_cast<std::ptrdiff_t>(fractions));
            for (size_t k = 0; k < fractions; ++k) {
                if (!(row[k] >= 0 && row[k] <= 1))
                    f.fail(std::string(kProfileTail) + " is " + std::to_string(row[k]) + at_epoch(e, parameters[p]) +
                           "; tail fractions lie in [0, 1]");
                if (k > 0 && row[k] > row[k - 1])
                    f.fail(std::string(kProfileTail) + " grows with the fraction kept" + at_epoch(e, parameters[p]));
                // Top-k keeps every entry at fraction 1, and of a tensor of one entry at any fraction.
                if (row[k] != 0 && (out.topk_fractions[k] == 1 || parameters[p].numel() <= 1))
                    f.fail(std::string(kProfileTail) + " is " + std::to_string(row[k]) + at_epoch(e, parameters[p]) +
                           " at fraction " + std::to_string(out.topk_fractions[k]) +
                           ", where Top-k leaves nothing out; it must be 0");
            }
        }
    if (f.exists(kProfileSpectra))
        for (const std::string& name : f.list(kProfileSpectra)) {
            const bool known = std::any_of(parameters.begin(), parameters.end(),
                                           [&](const Parameter& p) { return p.name == name; });
            if (!known) f.fail(singular_values_dataset(name) + " names no parameter of /parameters");
        }
    for (size_t p = 0; p < count; ++p) {
        const std::string ds = singular_values_dataset(parameters[p].name);
        if (!parameters[p].is_matrix()) {
            if (f.exists(ds)) f.fail(ds + " is present, but parameter '" + parameters[p].name + "' is not a matrix");
            continue;
        }
        if (!f.exists(ds)) f.fail("dataset " + ds + " is missing (parameter '" + parameters[p].name + "' is a matrix)");
        const hsize_t length = spectrum_length(parameters[p]);
        std::vector<double> values = f.read_shaped<double>(ds, {epochs, length}, "epochs x min(rows, columns)");
        for (size_t e = 0; e < epochs; ++e) {
            auto first = values.begin() + static_cast<std::ptrdiff_t>(e * length);
            std::vector<double>& s = out.singular_values[e][p];
            s.assign(first, first + static_cast<std::ptrdiff_t>(length));
            for (size_t i = 0; i < s.size(); ++i) {
                if (!std::isfinite(s[i]) || s[i] < 0)
                    f.fail(ds + " holds " + std::to_string(s[i]) + " at epoch " + std::to_string(e) +
                           "; singular values are finite and >= 0");
                if (i > 0 && s[i] > s[i - 1])
                    f.fail(ds + " is not sorted largest first at epoch " + std::to_string(e) + " (value " +
                           std::to_string(i) + ")");
            }
        }
    }
    return out;
}

// Copies `from` to the new file `to`, reporting the system's reason on failure.
void copy_file(const std::string& from, const std::string& to) {
    auto failed = [&](const char* what) {
        throw FileError(from, std::string("cannot copy the file to update it (") + what + ": " + std::strerror(errno) + ")");
    };
    int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) failed("open");
    int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        ::close(in);
        failed("create");
    }
    std::vector<char> buffer(1 << 20);
    for (;;) {
        ssize_t n = ::read(in, buffer.data(), buffer.size());
        if (n == 0) break;
        ssize_t written = 0;
        while (n > 0 && written < n) {
            ssize_t w = ::write(out, buffer.data() + written, static_cast<size_t>(n - written));
            if (w < 0) break;
            written += w;
        }
        if (n < 0 || written < n) {
            int saved = errno;
            ::close(in);
            ::close(out);
            errno = saved;
            failed(n < 0 ? "read" : "write");
        }
    }
    ::close(in);
    if (::close(out) != 0) failed("write");
}

// Changes an existing file without ever touching it in place: the change is made
// to a copy beside it, which then replaces it in one rename. A change that fails
// half-way (a full disk, a crash) leaves the previous file whole.
void update_file(const std::string& path, const std::function<void(H5File&)>& change) {
    AtomicPath atomic(path);
    copy_file(path, atomic.temp());
    H5File f = H5File::open(atomic.temp(), true, path);
    change(f);
    f.close();
    atomic.commit();
}

// Reads an optional per-epoch column; returns nullopt if absent.
template <class T>
std::optional<std::vector<T>> optional_column(const H5File& f, const std::string& name, size_t epochs) {
    std::string path = "/epochs/" + name;
    if (!f.exists(path)) return std::nullopt;
    return f.read_shaped<T>(path, {epochs}, "one value per epoch of /epochs/norm");
}

template <class T>
std::vector<T> required_column(const H5File& f, const std::string& name, size_t epochs) {
    auto values = optional_column<T>(f, name, epochs);
    if (!values) f.fail("dataset /epochs/" + name + " is missing");
    return *values;
}

}  // namespace

namespace {

// /epochs: one row of statistics per completed epoch, checked whole against /parameters.
std::vector<EpochStats> read_epochs(const H5File& f, const std::vector<Parameter>& parameters) {
    const size_t count = parameters.size();
    // Shapes first: the table of norms is read only once the columns that must
    // agree with it do, so a damaged row count is refused before it is allocated.
    Dims dims = f.shape("/epochs/norm");
    if (dims.size() != 2) f.fail("/epochs/norm has shape " + dims_text(dims) + ", expected epochs x parameters");
    if (dims[1] != count)
        f.fail("/epochs/norm has " + std::to_string(dims[1]) + " columns but /parameters lists " +
               std::to_string(count) + " parameters");
    const size_t epochs = dims[0];
    if (epochs == 0) f.fail("holds no completed epoch (/epochs/norm has zero rows)");
    for (const char* column : {"/epochs/lr", "/epochs/steps"}) {
        if (!f.exists(column)) f.fail(std::string("dataset ") + column + " is missing");
        Dims d = f.shape(column);
        if (d != Dims{epochs})
            f.fail(std::string(column) + " has shape " + dims_text(d) + ", expected " + std::to_string(epochs) +
                   " (one value per epoch of /epochs/norm)");
    }
    std::vector<double> norm = f.read_shaped<double>("/epochs/norm", dims, "epochs x parameters");

    auto lr = required_column<double>(f, "lr", epochs);
    auto steps = required_column<std::int64_t>(f, "steps", epochs);
    auto loss = optional_column<double>(f, "loss", epochs);
    auto accuracy = optional_column<double>(f, "accuracy", epochs);
    auto test_loss = optional_column<double>(f, "test_loss", epochs);
    auto test_accuracy = optional_column<double>(f, "test_accuracy", epochs);
    auto seconds = optional_column<double>(f, "seconds", epochs);
    auto samples = optional_column<std::int64_t>(f, "samples", epochs);
    if (auto epoch_index = optional_column<std::int64_t>(f, "epoch", epochs)) {
        for (size_t e = 0; e < epochs; ++e)
            if ((*epoch_index)[e] != static_cast<std::int64_t>(e))
                f.fail("/epochs/epoch row " + std::to_string(e) + " is " + std::to_string((*epoch_index)[e]) +
                       "; epochs must be numbered 0, 1, 2, ...");
    }

    std::vector<EpochStats> rows(epochs);
    for (size_t e = 0; e < epochs; ++e) {
        EpochStats& s = rows[e];
        s.lr = lr[e];
        s.steps = steps[e];
        if (loss) s.loss = (*loss)[e];
        if (accuracy) s.accuracy = (*accuracy)[e];
        if (test_loss) s.test_loss = (*test_loss)[e];
        if (test_accuracy) s.test_accuracy = (*test_accuracy)[e];
        if (seconds) s.seconds = (*seconds)[e];
        if (samples) s.samples = (*samples)[e];
        s.norm.assign(norm.begin() + static_cast<std::ptrdiff_t>(e * count),
                      norm.begin() + static_cast<std::ptrdiff_t>((e + 1) * count));
        const std::string problem = epoch_problem(s, e, parameters);
        if (!problem.empty()) f.fail(problem);
    }
    return rows;
}

// One parameter's snapshot in `group`: present, at the parameter's exact shape (a
// transposed 784x256 for a 256x784 weight would be compressed as the wrong matrix),
// and finite. Returns its values.
std::vector<float> check_snapshot(const H5File& f, const std::string& group, const Parameter& p) {
    const std::string ds = group + "/" + p.name;
    if (!f.exists(ds)) f.fail("dataset " + ds + " is missing (every parameter has a snapshot)");
    const Dims expected(p.shape.begin(), p.shape.end());
    const Dims dims = f.shape(ds);
    if (dims != expected)
        f.fail(ds + " has shape " + dims_text(dims) + ", expected " + dims_text(expected) +
               " (the shape of parameter '" + p.name + "')");
    std::vector<float> values = f.read<float>(ds);
    for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
            f.fail(ds + " holds " + std::to_string(values[i]) + " at value " + std::to_string(i) +
                   "; a gradient snapshot is finite");
    return values;
}

}  // namespace

std::string epoch_problem(const EpochStats& s, size_t e, const std::vector<Parameter>& parameters) {
    if (!std::isfinite(s.lr) || s.lr < 0)
        return "learning rate of epoch " + std::to_string(e) + " is " + std::to_string(s.lr) +
               "; it must be a finite number >= 0";
    if (s.steps < 0) return "epoch " + std::to_string(e) + " has a negative step count";
    for (size_t p = 0; p < s.norm.size() && p < parameters.size(); ++p) {
        const double n = s.norm[p];
        if (std::isnan(n))
            return "gradient norm is NaN at epoch " + std::to_string(e) + ", parameter '" + parameters[p].name +
                   "' (the training run diverged?)";
        if (std::isinf(n) || n < 0)
            return "gradient norm is " + std::to_string(n) + " at epoch " + std::to_string(e) + ", parameter '" +
                   parameters[p].name + "'; norms must be finite and >= 0";
    }
    return "";
}

GradStats read_grads(const std::string& path) {
    H5File f = H5File::open(path, false);
    GradStats g;
    g.header = read_header(f, kGradsFormat, kGradsMajor);
    g.complete = !f.has_attr("/", "complete") || f.read_attr_int("/", "complete") != 0;
    if (f.has_attr("/", "model")) g.run.model = f.read_attr_string("/", "model");
    if (f.has_attr("/", "dataset")) g.run.dataset = f.read_attr_string("/", "dataset");
    if (f.has_attr("/", "batch_size")) g.run.batch_size = f.read_attr_int("/", "batch_size");
    if (f.has_attr("/", "world_size")) {
        g.run.world_size = f.read_attr_int("/", "world_size");
        if (g.run.world_size < 1) f.fail("world_size is " + std::to_string(g.run.world_size) + "; it must be at least 1");
    }
    if (f.has_attr("/", "seed")) g.run.seed = f.read_attr_int("/", "seed");
    g.parameters = read_parameters(f);
    g.epochs = read_epochs(f, g.parameters);
    const size_t epochs = g.epochs.size();
    g.has_step_norms = f.exists("/steps/norm");
    if (f.exists("/snapshots")) {
        for (const auto& name : f.list("/snapshots")) {
            std::string group = "/snapshots/" + name;
            if (!f.has_attr(group, "epoch")) f.fail(group + " has no 'epoch' attribute");
            const std::int64_t epoch = f.read_attr_int(group, "epoch");
            if (epoch < 0 || epoch >= static_cast<std::int64_t>(epochs) || group != snapshot_group(epoch))
                f.fail(group + " has epoch " + std::to_string(epoch) + "; a snapshot is named /snapshots/epoch_E " +
                       "for one of the file's epochs, 0-" + std::to_string(epochs - 1));
            // Every reader takes the same snapshots: each parameter's, at its exact shape, finite.
            for (const auto& p : g.parameters) check_snapshot(f, group, p);
            g.snapshot_epochs.push_back(epoch);
        }
    }
    g.has_profile = f.exists("/profile");
    if (g.has_profile && g.header.major == 1 && g.header.minor < 1)
        f.fail("/profile is present, but format_version " + std::to_string(g.header.major) + "." +
               std::to_string(g.header.minor) + " has no profile (it came with 1.1); write format_version 1.1");
    if (g.has_profile) g.profile = read_profile(f, g.parameters, epochs);
    return g;
}

std::vector<std::vector<float>> read_snapshot(const std::string& path, std::int64_t epoch) {
    H5File f = H5File::open(path, false);
    read_header(f, kGradsFormat, kGradsMajor);
    std::vector<Parameter> parameters = read_parameters(f);
    std::string group = snapshot_group(epoch);
    if (!f.exists(group)) f.fail("has no gradient snapshot of epoch " + std::to_string(epoch));
    std::vector<std::vector<float>> out;
    for (const auto& p : parameters) out.push_back(check_snapshot(f, group, p));
    return out;
}

struct GradsWriter::State {
    std::string path;
    Provenance provenance;
    RunInfo run;
    std::vector<Parameter> parameters;
    bool step_norms = false;
    std::vector<double> profile_fractions;  // empty: no /profile
    std::int64_t epochs = 0;
    bool finished = false;
    // Buffered for the current epoch.
    std::vector<std::int64_t> step_index;
    std::vector<double> step_values;
    std::vector<std::pair<size_t, std::vector<float>>> snapshot;
    std::vector<std::optional<std::pair<std::vector<double>, std::vector<double>>>> profile;  // per parameter

    void write_layout(H5File& f) const {
        FileHeader h{kGradsFormat, kGradsMajor, kGradsMinor, provenance, ""};
        write_header(f, h);
        f.write_attr("/", "complete", std::int64_t{0});
        f.write_attr("/", "model", run.model);
        f.write_attr("/", "dataset", run.dataset);
        f.write_attr("/", "batch_size", run.batch_size);
        f.write_attr("/", "world_size", run.world_size);
        f.write_attr("/", "seed", run.seed);
        write_parameters(f, parameters);
        const hsize_t count = parameters.size();
        f.create_growing<double>("/epochs/norm", {count}, 16);
        f.create_growing<std::int64_t>("/epochs/epoch", {}, 64);
        f.create_growing<std::int64_t>("/epochs/steps", {}, 64);
        f.create_growing<std::int64_t>("/epochs/samples", {}, 64);
        for (const char* column : kDoubleColumns) f.create_growing<double>(std::string("/epochs/") + column, {}, 64);
        if (step_norms) {
            f.create_growing<double>("/steps/norm", {count}, 256);
            f.create_growing<std::int64_t>("/steps/epoch", {}, 256);
            f.create_growing<std::int64_t>("/steps/step", {}, 256);
        }
        if (!profile_fractions.empty()) {
            f.write(kProfileFractions, profile_fractions, {profile_fractions.size()});
            f.create_growing<double>(kProfileTail, {count, profile_fractions.size()}, 16);
            for (const auto& p : parameters)
                if (p.is_matrix()) f.create_growing<double>(singular_values_dataset(p.name), {spectrum_length(p)}, 16);
        }
    }

    void write_epoch(H5File& f, const EpochStats& s) {
        // Snapshots and step norms go first: the epoch row is what marks the epoch as written.
        if (!snapshot.empty()) {
            std::string group = snapshot_group(epochs);
            f.create_group("/snapshots");
            f.create_group(group);
            f.write_attr(group, "epoch", epochs);
            f.write_attr(group, "steps", s.steps);
            for (auto& [index, values] : snapshot) {
                Dims dims(parameters[index].shape.begin(), parameters[index].shape.end());
                f.write(group + "/" + parameters[index].name, values, dims, 4);
            }
        }
        if (step_norms && !step_index.empty()) {
            const hsize_t rows = step_index.size();
            f.append_rows("/steps/norm", step_values, rows);
            f.append_rows("/steps/step", step_index, rows);
            f.append_rows("/steps/epoch", std::vector<std::int64_t>(rows, epochs), rows);
        }
        if (!profile_fractions.empty()) {
            std::vector<double> tails;
            for (size_t p = 0; p < parameters.size(); ++p) {
                const auto& [values, tail] = *profile[p];
                tails.insert(tails.end(), tail.begin(), tail.end());
                if (parameters[p].is_matrix()) f.append_rows(singular_values_dataset(parameters[p].name), values, 1);
            }
            f.append_rows(kProfileTail, tails, 1);
        }
        f.append_rows("/epochs/norm", s.norm, 1);
        f.append_rows("/epochs/epoch", std::vector<std::int64_t>{epochs}, 1);
        f.append_rows("/epochs/steps", std::vector<std::int64_t>{s.steps}, 1);
        f.append_rows("/epochs/samples", std::vector<std::int64_t>{s.samples}, 1);
        const double values[] = {s.lr, s.loss, s.accuracy, s.test_loss, s.test_accuracy, s.seconds};
        for (size_t i = 0; i < std::size(kDoubleColumns); ++i)
            f.append_rows(std::string("/epochs/") + kDoubleColumns[i], std::vector<double>{values[i]}, 1);
        step_index.clear();
        step_values.clear();
        snapshot.clear();
        profile.assign(parameters.size(), std::nullopt);
    }
};

GradsWriter::GradsWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

GradsWriter::GradsWriter(std::string path, Provenance provenance, RunInfo run, std::vector<Parameter> parameters,
                         bool step_norms, std::vector<double> profile_fractions)
    : state_(std::make_unique<State>()) {
    if (parameters.empty()) throw Error(path + ": cannot record gradients of a model without parameters");
    check_writable_destination(path);
    state_->path = std::move(path);
    state_->provenance = std::move(provenance);
    state_->run = std::move(run);
    state_->parameters = std::move(parameters);
    state_->step_norms = step_norms;
    state_->profile_fractions = std::move(profile_fractions);
    state_->profile.assign(state_->parameters.size(), std::nullopt);
}

GradsWriter GradsWriter::resume(std::string path, std::vector<Parameter> parameters, std::int64_t keep_epochs,
                                bool step_norms, std::vector<double> profile_fractions) {
    auto state = std::make_unique<State>();
    update_file(path, [&](H5File& f) {
        read_header(f, kGradsFormat, kGradsMajor);
        std::string mismatch = compare_parameters(parameters, read_parameters(f));
        if (!mismatch.empty()) f.fail("does not belong to this model: " + mismatch);
        hsize_t rows = f.shape("/epochs/norm")[0];
        if (static_cast<std::int64_t>(rows) < keep_epochs)
            f.fail("holds " + std::to_string(rows) + " epochs but the checkpoint is at epoch " +
                   std::to_string(keep_epochs) + "; it cannot be continued");
        state->step_norms = step_norms && f.exists("/steps/norm");
        for (const char* column : {"norm", "epoch", "steps", "samples"})
            f.set_rows(std::string("/epochs/") + column, static_cast<hsize_t>(keep_epochs));
        for (const char* column : kDoubleColumns)
            f.set_rows(std::string("/epochs/") + column, static_cast<hsize_t>(keep_epochs));
        if (f.exists("/steps/norm")) {
            // Drop per-step rows of epochs after the checkpoint.
            auto epoch_of_step = f.read<std::int64_t>("/steps/epoch");
            hsize_t keep = 0;
            while (keep < epoch_of_step.size() && epoch_of_step[keep] < keep_epochs) ++keep;
            for (const char* column : {"/steps/norm", "/steps/epoch", "/steps/step"}) f.set_rows(column, keep);
        }
        // /profile covers every epoch or none: a run resumed with another choice would break that.
        if (f.exists("/profile") != !profile_fractions.empty())
            f.fail(f.exists("/profile") ? "records a compressibility profile (/profile); resume with --profile"
                                        : "records no compressibility profile; resume without --profile");
        if (!profile_fractions.empty()) {
            if (f.read<double>(kProfileFractions) != profile_fractions)
                f.fail(std::string(kProfileFractions) + " differs from the fractions this program records");
            f.set_rows(kProfileTail, static_cast<hsize_t>(keep_epochs));
            for (const auto& p : parameters)
                if (p.is_matrix()) f.set_rows(singular_values_dataset(p.name), static_cast<hsize_t>(keep_epochs));
        }
        if (f.exists("/snapshots")) {
            for (const auto& name : f.list("/snapshots")) {
                std::string group = "/snapshots/" + name;
                if (f.read_attr_int(group, "epoch") >= keep_epochs) H5Ldelete(f.id(), group.c_str(), H5P_DEFAULT);
            }
        }
        f.write_attr("/", "complete", std::int64_t{0});
    });
    state->path = std::move(path);
    state->parameters = std::move(parameters);
    state->epochs = keep_epochs;
    state->profile_fractions = std::move(profile_fractions);
    state->profile.assign(state->parameters.size(), std::nullopt);
    return GradsWriter(std::move(state));
}

GradsWriter::~GradsWriter() = default;
GradsWriter::GradsWriter(GradsWriter&&) noexcept = default;
GradsWriter& GradsWriter::operator=(GradsWriter&&) noexcept = default;

void GradsWriter::add_step_norms(std::int64_t step, const std::vector<double>& norms) {
    if (!state_->step_norms) return;
    if (norms.size() != state_->parameters.size())
        throw Error(state_->path + ": step norms for " + std::to_string(norms.size()) + " parameters, expected " +
                    std::to_string(state_->parameters.size()));
    state_->step_index.push_back(step);
    state_->step_values.insert(state_->step_values.end(), norms.begin(), norms.end());
}

void GradsWriter::add_snapshot(size_t parameter, std::vector<float> values) {
    if (parameter >= state_->parameters.size() ||
        static_cast<std::int64_t>(values.size()) != state_->parameters[parameter].numel())
        throw Error(state_->path + ": snapshot does not match parameter " + std::to_string(parameter));
    state_->snapshot.emplace_back(parameter, std::move(values));
}

void GradsWriter::add_profile(size_t parameter, std::vector<double> singular_values, std::vector<double> topk_tail) {
    State& s = *state_;
    if (s.profile_fractions.empty()) throw Error(s.path + ": a profile was added, but the file records none");
    if (parameter >= s.parameters.size() || topk_tail.size() != s.profile_fractions.size() ||
        singular_values.size() != (s.parameters[parameter].is_matrix() ? spectrum_length(s.parameters[parameter]) : 0))
        throw Error(s.path + ": profile does not match parameter " + std::to_string(parameter));
    s.profile[parameter].emplace(std::move(singular_values), std::move(topk_tail));
}

bool GradsWriter::records_profile() const { return !state_->profile_fractions.empty(); }

void GradsWriter::append_epoch(const EpochStats& stats) {
    State& s = *state_;
    if (stats.norm.size() != s.parameters.size())
        throw Error(s.path + ": epoch statistics for " + std::to_string(stats.norm.size()) + " parameters, expected " +
                    std::to_string(s.parameters.size()));
    if (!s.profile_fractions.empty())
        for (size_t p = 0; p < s.parameters.size(); ++p)
            if (!s.profile[p]) throw Error(s.path + ": no profile of parameter '" + s.parameters[p].name + "' this epoch");
    if (s.epochs == 0) {
        AtomicPath atomic(s.path);
        H5File f = H5File::create(atomic.temp(), s.path);
        s.write_layout(f);
        s.write_epoch(f, stats);
        f.close();
        atomic.commit();
    } else {
        update_file(s.path, [&](H5File& f) { s.write_epoch(f, stats); });
    }
    ++s.epochs;
}

void GradsWriter::finish() {
    State& s = *state_;
    if (s.epochs == 0 || s.finished) return;
    update_file(s.path, [](H5File& f) { f.write_attr("/", "complete", std::int64_t{1}); });
    s.finished = true;
}

std::int64_t GradsWriter::epochs_written() const { return state_->epochs; }
const std::string& GradsWriter::path() const { return state_->path; }

}  // namespace acc::io
