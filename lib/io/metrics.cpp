#include "io/metrics.hpp"
#include "io/h5.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "io/atomic.hpp"
#include "io/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace acc::io {

const std::vector<std::string>& auto_reason_names() {
    static const std::vector<std::string> names = {"pays",   "budget",    "regime",  "does not pay",
                                                   "vector", "measuring", "accuracy"};
    return names;
}

namespace {

const char* kReasonMeaning =
    "0: rate of change below eta (not critical); 1: rate of change at or above eta; 2: first interval; "
    "3: previous norm was zero; 4: learning rate decayed";

// The per-epoch columns, each tied to its field, so that writing and reading list them once.
struct DoubleColumn {
    const char* name;
    double MetricsEpoch::*field;
};
struct IntColumn {
    const char* name;
    std::int64_t MetricsEpoch::*field;
};
const DoubleColumn kDoubleColumns[] = {
    {"lr", &MetricsEpoch::lr},
    {"loss", &MetricsEpoch::loss},
    {"accuracy", &MetricsEpoch::accuracy},
    {"test_loss", &MetricsEpoch::test_loss},
    {"test_accuracy", &MetricsEpoch::test_accuracy},
    {"floats_sent", &MetricsEpoch::floats_sent},
    {"floats_sent_total", &MetricsEpoch::floats_sent_total},
    {"seconds", &MetricsEpoch::seconds},
    {"compute_seconds", &MetricsEpoch::compute_seconds},
    {"compression_seconds", &MetricsEpoch::compression_seconds},
    {"encode_seconds", &MetricsEpoch::encode_seconds},
    {"decode_seconds", &MetricsEpoch::decode_seconds},
    {"communication_seconds", &MetricsEpoch::communication_seconds},
};
const IntColumn kIntColumns[] = {
    {"steps", &MetricsEpoch::steps},
    {"samples", &MetricsEpoch::samples},
    {"batch_size", &MetricsEpoch::batch_size},
    {"bytes_sent", &MetricsEpoch::bytes_sent},
    {"bytes_sent_total", &MetricsEpoch::bytes_sent_total},
};

// The root attributes, likewise.
struct TextAttribute {
    const char* name;
    std::string MetricsRun::*field;
};
struct IntAttribute {
    const char* name;
    std::int64_t MetricsRun::*field;
};
const TextAttribute kTextAttributes[] = {
    {"model", &MetricsRun::model},       {"dataset", &MetricsRun::dataset},
    {"mode", &MetricsRun::mode},         {"compress", &MetricsRun::compress},
    {"schedule", &MetricsRun::schedule}, {"schedule_mode", &MetricsRun::schedule_mode},
    {"low", &MetricsRun::low},           {"high", &MetricsRun::high},
    {"backend", &MetricsRun::backend},   {"device", &MetricsRun::device},
};
const IntAttribute kIntAttributes[] = {
    {"batch_size", &MetricsRun::batch_size},
    {"world_size", &MetricsRun::world_size},
    {"seed", &MetricsRun::seed},
    {"interval", &MetricsRun::interval},
};

template <class T>
std::vector<T> table(const std::vector<MetricsEpoch>& epochs, std::vector<T> MetricsEpoch::*field) {
    std::vector<T> out;
    for (const auto& e : epochs) out.insert(out.end(), (e.*field).begin(), (e.*field).end());
    return out;
}

template <class T>
std::vector<T> read_shaped(const H5File& f, const std::string& name, const Dims& expected, const std::string& what) {
    Dims dims;
    auto values = f.read<T>(name, &dims);
    if (dims != expected)
        f.fail(name + " has shape " + dims_text(dims) + ", expected " + dims_text(expected) + " (" + what + ")");
    return values;
}

template <class T>
void spread(std::vector<MetricsEpoch>& epochs, std::vector<T> MetricsEpoch::*field, const std::vector<T>& values,
            size_t count) {
    for (size_t e = 0; e < epochs.size(); ++e)
        (epochs[e].*field)
            .assign(values.begin() + static_cast<std::ptrdiff_t>(e * count),
                    values.begin() + static_cast<std::ptrdiff_t>((e + 1) * count));
}

template <class T, class R>
std::vector<T> pick(const std::vector<R>& rows, T R::*field) {
    std::vector<T> out;
    for (const auto& r : rows) out.push_back(r.*field);
    return out;
}

const char* kChoiceMeaning = "0: candidate factor; 1: theta_min; 2: dense (Algorithm 1, lines 10-24)";

// /gravac: the settings as attributes, every step, the throughput table per epoch, and
// per-epoch summaries derived from the steps (for readers that want one row per epoch).
void write_gravac(H5File& f, const MetricsGravac& g, size_t epochs) {
    const Dims steps{g.steps.size()};
    f.write("/gravac/steps/epoch", pick(g.steps, &regime::GravacStep::epoch), steps);
    f.write("/gravac/steps/factor", pick(g.steps, &regime::GravacStep::factor), steps);
    f.write("/gravac/steps/choice", pick(g.steps, &regime::GravacStep::choice), steps);
    f.write_attr("/gravac/steps/choice", "meaning", std::string(kChoiceMeaning));
    f.write("/gravac/steps/theta_min", pick(g.steps, &regime::GravacStep::theta_min), steps);
    f.write("/gravac/steps/candidate", pick(g.steps, &regime::GravacStep::candidate), steps);
    f.write("/gravac/steps/gain_min", pick(g.steps, &regime::GravacStep::gain_min), steps);
    f.write("/gravac/steps/gain_candidate", pick(g.steps, &regime::GravacStep::gain_candidate), steps);
    const Dims rows{g.throughput.size()};
    f.write("/gravac/throughput/epoch", pick(g.throughput, &regime::GravacThroughputRow::epoch), rows);
    f.write("/gravac/throughput/factor", pick(g.throughput, &regime::GravacThroughputRow::factor), rows);
    f.write("/gravac/throughput/throughput", pick(g.throughput, &regime::GravacThroughputRow::throughput), rows);
    std::vector<std::int64_t> counts[3];
    std::vector<double> last[4];
    for (auto& c : counts) c.assign(epochs, 0);
    for (auto& l : last) l.assign(epochs, regime::GravacStep::kNaN);
    for (const auto& s : g.steps) {
        if (s.epoch < 0 || static_cast<size_t>(s.epoch) >= epochs) continue;
        const auto e = static_cast<size_t>(s.epoch);
        if (s.choice >= 0 && s.choice < 3) ++counts[s.choice][e];
        last[0][e] = s.theta_min;
        last[1][e] = s.candidate;
        last[2][e] = s.gain_min;
        last[3][e] = s.gain_candidate;
    }
    const Dims column{epochs};
    f.write("/gravac/epochs/steps_candidate", counts[0], column);
    f.write("/gravac/epochs/steps_theta_min", counts[1], column);
    f.write("/gravac/epochs/steps_dense", counts[2], column);
    f.write("/gravac/epochs/theta_min", last[0], column);
    f.write("/gravac/epochs/candidate", last[1], column);
    f.write("/gravac/epochs/gain_min", last[2], column);
    f.write("/gravac/epochs/gain_candidate", last[3], column);
    f.write_attr("/gravac", "family", g.family);
    f.write_attr("/gravac", "policy", g.policy);
    f.write_attr("/gravac", "theta_min", g.theta_min);
    f.write_attr("/gravac", "theta_max", g.theta_max);
    f.write_attr("/gravac", "epsilon", g.epsilon);
    f.write_attr("/gravac", "omega", g.omega);
    f.write_attr("/gravac", "theta_s", g.theta_s);
    f.write_attr("/gravac", "smoothing", g.smoothing);
    f.write_attr("/gravac", "window", g.window);
}

// /auto: train-dist --auto's plan per epoch (format 1.3).
struct AutoColumn {
    const char* name;
    double MetricsAuto::*field;
};
constexpr AutoColumn kAutoColumns[] = {
    {"measure_seconds", &MetricsAuto::measure_seconds},
    {"predicted_seconds", &MetricsAuto::predicted_seconds},
    {"overhead_seconds", &MetricsAuto::overhead_seconds},
    {"uncompressed_seconds", &MetricsAuto::uncompressed_seconds},
    {"compressed_seconds", &MetricsAuto::compressed_seconds},
    {"measured_seconds", &MetricsAuto::measured_seconds},
    {"compute_seconds", &MetricsAuto::compute_seconds},
    {"allreduce_alpha", &MetricsAuto::allreduce_alpha},
    {"allreduce_bandwidth", &MetricsAuto::allreduce_bandwidth},
    {"allgather_alpha", &MetricsAuto::allgather_alpha},
    {"allgather_bandwidth", &MetricsAuto::allgather_bandwidth},
    {"burst_seconds", &MetricsAuto::burst_seconds},  // optional on reading: absent before it was measured
    {"budget", &MetricsAuto::budget},
    {"error", &MetricsAuto::error},
};
std::string auto_reason_meaning() {
    std::string out;
    for (size_t i = 0; i < auto_reason_names().size(); ++i)
        out += (i ? "; " : "") + std::to_string(i) + ": " + auto_reason_names()[i];
    return out;
}

void write_auto(H5File& f, const std::vector<MetricsEpoch>& epochs, size_t count) {
    const Dims column{epochs.size()};
    std::vector<std::uint8_t> pays, measured;
    std::vector<std::int8_t> reason;
    for (const auto& e : epochs) {
        pays.push_back(e.automatic.pays);
        measured.push_back(e.automatic.measured);
        reason.insert(reason.end(), e.automatic.reason.begin(), e.automatic.reason.end());
    }
    f.write("/auto/pays", pays, column);
    f.write("/auto/measured", measured, column);
    for (const auto& c : kAutoColumns) {
        std::vector<double> values;
        for (const auto& e : epochs) values.push_back(e.automatic.*(c.field));
        f.write(std::string("/auto/") + c.name, values, column);
    }
    f.write("/auto/reason", reason, Dims{epochs.size(), count});
    f.write_attr("/auto/reason", "meaning", auto_reason_meaning());
}

void read_auto(const H5File& f, std::vector<MetricsEpoch>& epochs, size_t count) {
    const Dims column{epochs.size()};
    auto pays = read_shaped<std::uint8_t>(f, "/auto/pays", column, "one per epoch");
    auto measured = read_shaped<std::uint8_t>(f, "/auto/measured", column, "one per epoch");
    auto reason = read_shaped<std::int8_t>(f, "/auto/reason", Dims{epochs.size(), count}, "epochs x parameters");
    for (size_t e = 0; e < epochs.size(); ++e) {
        if (pays[e] > 1 || measured[e] > 1) f.fail("/auto/pays and /auto/measured hold 0 or 1");
        epochs[e].has_auto = true;
        epochs[e].automatic.pays = pays[e];
        epochs[e].automatic.measured = measured[e];
        epochs[e].automatic.reason.assign(reason.begin() + static_cast<std::ptrdiff_t>(e * count),
                                          reason.begin() + static_cast<std::ptrdiff_t>((e + 1) * count));
    }
    for (auto r : reason)
        if (r < 0 || static_cast<size_t>(r) >= auto_reason_names().size())
            f.fail("/auto/reason is " + std::to_string(r) + "; valid codes are 0.." +
                   std::to_string(auto_reason_names().size() - 1));
    for (const auto& c : kAutoColumns) {
        if (c.field == &MetricsAuto::burst_seconds && !f.exists("/auto/burst_seconds")) continue;
        auto values = read_shaped<double>(f, std::string("/auto/") + c.name, column, "one per epoch");
        for (size_t e = 0; e < epochs.size(); ++e) {
            if (values[e] < 0 && c.field != &MetricsAuto::overhead_seconds)
                f.fail(std::string("/auto/") + c.name + " is negative at epoch " + std::to_string(e));
            epochs[e].automatic.*(c.field) = values[e];
        }
    }
}

MetricsGravac read_gravac(const H5File& f, size_t epochs) {
    MetricsGravac g;
    g.enabled = true;
    g.family = f.read_attr_string("/gravac", "family");
    g.policy = f.read_attr_string("/gravac", "policy");
    g.theta_min = f.read_attr_double("/gravac", "theta_min");
    g.theta_max = f.read_attr_double("/gravac", "theta_max");
    g.epsilon = f.read_attr_double("/gravac", "epsilon");
    g.omega = f.read_attr_double("/gravac", "omega");
    g.theta_s = f.read_attr_double("/gravac", "theta_s");
    g.smoothing = f.read_attr_double("/gravac", "smoothing");
    g.window = f.read_attr_int("/gravac", "window");
    const Dims steps_dims = f.shape("/gravac/steps/epoch");
    if (steps_dims.size() != 1) f.fail("/gravac/steps/epoch must be one-dimensional");
    const Dims steps{steps_dims[0]};
    auto epoch = read_shaped<std::int64_t>(f, "/gravac/steps/epoch", steps, "one per step");
    auto factor = read_shaped<double>(f, "/gravac/steps/factor", steps, "one per step");
    auto choice = read_shaped<std::int8_t>(f, "/gravac/steps/choice", steps, "one per step");
    auto theta_min = read_shaped<double>(f, "/gravac/steps/theta_min", steps, "one per step");
    auto candidate = read_shaped<double>(f, "/gravac/steps/candidate", steps, "one per step");
    auto gain_min = read_shaped<double>(f, "/gravac/steps/gain_min", steps, "one per step");
    auto gain_candidate = read_shaped<double>(f, "/gravac/steps/gain_candidate", steps, "one per step");
    for (size_t i = 0; i < steps_dims[0]; ++i) {
        if (epoch[i] < 0 || static_cast<size_t>(epoch[i]) >= epochs)
            f.fail("/gravac/steps/epoch is " + std::to_string(epoch[i]) + " at step " + std::to_string(i) +
                   ", but the file holds " + std::to_string(epochs) + " epochs");
        if (choice[i] < 0 || choice[i] > 2)
            f.fail("/gravac/steps/choice is " + std::to_string(choice[i]) + " at step " + std::to_string(i) +
                   "; valid codes are 0..2");
        if (!(factor[i] >= 1)) f.fail("/gravac/steps/factor at step " + std::to_string(i) + " must be >= 1");
        g.steps.push_back({epoch[i], factor[i], choice[i], theta_min[i], candidate[i], gain_min[i], gain_candidate[i]});
    }
    const Dims rows_dims = f.shape("/gravac/throughput/epoch");
    if (rows_dims.size() != 1) f.fail("/gravac/throughput/epoch must be one-dimensional");
    const Dims rows{rows_dims[0]};
    auto t_epoch = read_shaped<std::int64_t>(f, "/gravac/throughput/epoch", rows, "one per row");
    auto t_factor = read_shaped<double>(f, "/gravac/throughput/factor", rows, "one per row");
    auto t_value = read_shaped<double>(f, "/gravac/throughput/throughput", rows, "one per row");
    for (size_t i = 0; i < rows_dims[0]; ++i) g.throughput.push_back({t_epoch[i], t_factor[i], t_value[i]});
    return g;
}

}  // namespace

void write_metrics(const std::string& path, const Metrics& m) {
    const size_t count = m.parameters.size(), epochs = m.epochs.size();
    if (epochs == 0) throw Error(path + ": a metrics file needs at least one epoch");
    const bool decisions = m.has_decisions();
    for (size_t e = 0; e < epochs; ++e) {
        const MetricsEpoch& row = m.epochs[e];
        if (!row.rank_communication_seconds.empty() &&
            row.rank_communication_seconds.size() != static_cast<size_t>(m.run.world_size))
            throw Error(path + ": internal error: epoch " + std::to_string(e) + " does not have one communication time "
                        "per rank");
        if (m.has_auto() && (!row.has_auto || row.automatic.reason.size() != count))
            throw Error(path + ": internal error: epoch " + std::to_string(e) + " has no automatic plan per parameter");
        if (row.level.size() != count || (decisions && (row.norm.size() != count || row.critical.size() != count ||
                                                        row.ratio.size() != count || row.reason.size() != count)))
            throw Error(path + ": internal error: epoch " + std::to_string(e) + " does not have one entry per parameter");
    }
    AtomicPath atomic(path);
    H5File f = create_with_header(atomic.temp(), path, m.header, kMetricsFormat, kMetricsMajor, kMetricsMinor);
    f.write_attr("/", "complete", std::int64_t{m.complete ? 1 : 0});
    for (const auto& a : kTextAttributes) f.write_attr("/", a.name, m.run.*(a.field));
    for (const auto& a : kIntAttributes) f.write_attr("/", a.name, m.run.*(a.field));
    f.write_attr("/", "eta", m.run.eta);
    write_parameters(f, m.parameters);
    f.write_strings("/levels", m.levels);

    const Dims column{epochs}, per_parameter{epochs, count};
    std::vector<std::int64_t> index(epochs);
    for (size_t e = 0; e < epochs; ++e) index[e] = static_cast<std::int64_t>(e);
    f.write("/epochs/epoch", index, column);
    for (const auto& c : kDoubleColumns) {
        std::vector<double> values;
        for (const auto& e : m.epochs) values.push_back(e.*(c.field));
        f.write(std::string("/epochs/") + c.name, values, column);
    }
    for (const auto& c : kIntColumns) {
        std::vector<std::int64_t> values;
        for (const auto& e : m.epochs) values.push_back(e.*(c.field));
        f.write(std::string("/epochs/") + c.name, values, column);
    }
    f.write("/epochs/level", table(m.epochs, &MetricsEpoch::level), per_parameter);
    // Epochs without the ranks' times (a run resumed from a file before 1.2) hold NaN.
    const size_t world = static_cast<size_t>(m.run.world_size);
    if (std::any_of(m.epochs.begin(), m.epochs.end(), [](const MetricsEpoch& e) { return !e.rank_communication_seconds.empty(); })) {
        std::vector<double> seconds;
        for (const auto& e : m.epochs)
            if (e.rank_communication_seconds.empty())
                seconds.insert(seconds.end(), world, MetricsEpoch::kNone);
            else
                seconds.insert(seconds.end(), e.rank_communication_seconds.begin(), e.rank_communication_seconds.end());
        f.write("/epochs/rank_communication_seconds", seconds, Dims{epochs, world});
    }
    if (decisions) {
        f.write("/epochs/norm", table(m.epochs, &MetricsEpoch::norm), per_parameter);
        f.write("/epochs/critical", table(m.epochs, &MetricsEpoch::critical), per_parameter);
        f.write("/epochs/ratio", table(m.epochs, &MetricsEpoch::ratio), per_parameter);
        f.write("/epochs/reason", table(m.epochs, &MetricsEpoch::reason), per_parameter);
        f.write_attr("/epochs/reason", "meaning", std::string(kReasonMeaning));
    }
    if (m.gravac.enabled) write_gravac(f, m.gravac, epochs);
    if (m.has_auto()) write_auto(f, m.epochs, count);
    f.close();
    atomic.commit();
}

Metrics read_metrics(const std::string& path) {
    H5File f = H5File::open(path, false);
    Metrics m;
    m.header = read_header(f, kMetricsFormat, kMetricsMajor);
    m.complete = f.has_attr("/", "complete") && f.read_attr_int("/", "complete") != 0;
    MetricsRun& r = m.run;
    for (const auto& a : kTextAttributes)
        if (f.has_attr("/", a.name)) r.*(a.field) = f.read_attr_string("/", a.name);
    for (const auto& a : kIntAttributes)
        if (f.has_attr("/", a.name)) r.*(a.field) = f.read_attr_int("/", a.name);
    if (f.has_attr("/", "eta")) r.eta = f.read_attr_double("/", "eta");
    if (r.world_size < 1) f.fail("world_size is " + std::to_string(r.world_size) + "; it must be at least 1");
    m.parameters = read_parameters(f);
    m.levels = f.read_strings("/levels");
    if (m.levels.empty()) f.fail("/levels lists no level");

    const Dims lr_dims = f.shape("/epochs/lr");
    if (lr_dims.size() != 1 || lr_dims[0] == 0) f.fail("/epochs/lr has shape " + dims_text(lr_dims) + "; expected one value per epoch, at least one epoch");
    const size_t epochs = lr_dims[0], count = m.parameters.size();
    const Dims column{epochs}, per_parameter{epochs, count};
    m.epochs.resize(epochs);
    auto epoch_index = read_shaped<std::int64_t>(f, "/epochs/epoch", column, "one per epoch");
    for (size_t e = 0; e < epochs; ++e)
        if (epoch_index[e] != static_cast<std::int64_t>(e))
            f.fail("/epochs/epoch row " + std::to_string(e) + " is " + std::to_string(epoch_index[e]) +
                   "; epochs must be numbered 0, 1, 2, ...");
    for (const auto& c : kDoubleColumns) {
        auto values = read_shaped<double>(f, std::string("/epochs/") + c.name, column, "one per epoch");
        for (size_t e = 0; e < epochs; ++e) m.epochs[e].*(c.field) = values[e];
    }
    for (const auto& c : kIntColumns) {
        auto values = read_shaped<std::int64_t>(f, std::string("/epochs/") + c.name, column, "one per epoch");
        for (size_t e = 0; e < epochs; ++e) {
            if (values[e] < 0) f.fail(std::string("/epochs/") + c.name + " is negative at epoch " + std::to_string(e));
            m.epochs[e].*(c.field) = values[e];
        }
    }
    for (size_t e = 0; e < epochs; ++e)
        if (!std::isfinite(m.epochs[e].lr) || m.epochs[e].lr < 0)
            f.fail("/epochs/lr at epoch " + std::to_string(e) + " must be a finite number >= 0");
    auto level = read_shaped<std::int32_t>(f, "/epochs/level", per_parameter, "epochs x parameters");
    for (size_t i = 0; i < level.size(); ++i)
        if (level[i] < 0 || static_cast<size_t>(level[i]) >= m.levels.size())
            f.fail("/epochs/level is " + std::to_string(level[i]) + " at epoch " + std::to_string(i / count) +
                   ", parameter '" + m.parameters[i % count].name + "', but /levels has " +
                   std::to_string(m.levels.size()) + " entries");
    spread(m.epochs, &MetricsEpoch::level, level, count);
    if (f.exists("/epochs/rank_communication_seconds")) {  // format 1.2
        const size_t world = static_cast<size_t>(r.world_size);
        auto seconds = read_shaped<double>(f, "/epochs/rank_communication_seconds", Dims{epochs, world},
                                           "epochs x ranks");
        for (size_t i = 0; i < seconds.size(); ++i)
            if (!std::isnan(seconds[i]) && !(seconds[i] >= 0 && std::isfinite(seconds[i])))
                f.fail("/epochs/rank_communication_seconds is " + short_number(seconds[i]) + " at epoch " +
                       std::to_string(i / world) + ", rank " + std::to_string(i % world) +
                       "; it must be a number of seconds >= 0, or NaN (not recorded)");
        spread(m.epochs, &MetricsEpoch::rank_communication_seconds, seconds, world);
    }
    if (f.exists("/epochs/critical")) {
        spread(m.epochs, &MetricsEpoch::norm, read_shaped<double>(f, "/epochs/norm", per_parameter, "epochs x parameters"), count);
        auto critical = read_shaped<std::uint8_t>(f, "/epochs/critical", per_parameter, "epochs x parameters");
        auto reason = read_shaped<std::int8_t>(f, "/epochs/reason", per_parameter, "epochs x parameters");
        for (size_t i = 0; i < critical.size(); ++i) {
            if (critical[i] > 1) f.fail("/epochs/critical is " + std::to_string(critical[i]) + "; use 0 or 1");
            if (reason[i] < 0 || reason[i] >= kReasonCodes)
                f.fail("/epochs/reason is " + std::to_string(reason[i]) + "; valid codes are 0.." +
                       std::to_string(kReasonCodes - 1));
        }
        spread(m.epochs, &MetricsEpoch::critical, critical, count);
        spread(m.epochs, &MetricsEpoch::ratio, read_shaped<double>(f, "/epochs/ratio", per_parameter, "epochs x parameters"), count);
        spread(m.epochs, &MetricsEpoch::reason, reason, count);
    }
    if (f.exists("/gravac")) m.gravac = read_gravac(f, epochs);  // format 1.1, --gravac runs
    if (f.exists("/auto")) read_auto(f, m.epochs, count);      // format 1.3, --auto runs
    return m;
}

MetricsWriter::MetricsWriter(std::string path, Metrics metrics) : path_(std::move(path)), metrics_(std::move(metrics)) {
    check_writable_destination(path_);
    metrics_.complete = false;
}

MetricsWriter MetricsWriter::resume(std::string path, const Metrics& expected, std::int64_t keep_epochs) {
    Metrics stored = read_metrics(path);
    const std::string mismatch = compare_parameters(expected.parameters, stored.parameters);
    if (!mismatch.empty()) throw FileError(path, "does not belong to this model: " + mismatch);
    if (stored.levels != expected.levels)
        throw FileError(path, "was written by a run with other compression levels; resume with its options");
    if (stored.run.world_size != expected.run.world_size)
        throw FileError(path, "was written by a run of " + std::to_string(stored.run.world_size) + " ranks, not " +
                                  std::to_string(expected.run.world_size));
    if (static_cast<std::int64_t>(stored.epochs.size()) < keep_epochs)
        throw FileError(path, "holds " + std::to_string(stored.epochs.size()) +
                                  " epochs but the checkpoint is at epoch " + std::to_string(keep_epochs) +
                                  "; it cannot be continued");
    Metrics m = expected;
    m.header = stored.header;
    m.epochs.assign(stored.epochs.begin(), stored.epochs.begin() + keep_epochs);
    m.gravac.steps.clear();
    m.gravac.throughput.clear();
    for (const auto& s : stored.gravac.steps)
        if (s.epoch < keep_epochs) m.gravac.steps.push_back(s);
    for (const auto& t : stored.gravac.throughput)
        if (t.epoch < keep_epochs) m.gravac.throughput.push_back(t);
    MetricsWriter writer(std::move(path), std::move(m));
    return writer;
}

void MetricsWriter::append_gravac(const std::vector<regime::GravacStep>& steps,
                                  const std::vector<regime::GravacThroughputRow>& throughput) {
    metrics_.gravac.steps.insert(metrics_.gravac.steps.end(), steps.begin(), steps.end());
    metrics_.gravac.throughput.insert(metrics_.gravac.throughput.end(), throughput.begin(), throughput.end());
}

void MetricsWriter::append_epoch(const MetricsEpoch& epoch) {
    metrics_.epochs.push_back(epoch);
    write_metrics(path_, metrics_);
}

void MetricsWriter::finish() {
    metrics_.complete = true;
    if (!metrics_.epochs.empty()) write_metrics(path_, metrics_);
}

}  // namespace acc::io
