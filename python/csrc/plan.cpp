// Schedules and the run plan for the Python package: a schedule file (read, or made
// by Accordion's rule in-process as regime-detect makes it), the checks that it
// belongs to the model, and the run plan (plan::RunPlan) that decides each epoch's
// levels for the compressing hook, as it does for train-dist. The package keeps no
// rule, default or message of its own: they are these.
#include "guarded.hpp"
#include "parameters.hpp"

#include "app/regime_detect.hpp"
#include "base/error.hpp"
#include "cli/logging.hpp"
#include "io/grads.hpp"
#include "io/schedule.hpp"
#include "plan/parameters.hpp"
#include "plan/run_plan.hpp"
#include "regime/detect.hpp"
#include "regime/gravac.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::python {
namespace {

template <class T>
std::optional<T> optional_of(const c10::optional<T>& value) {
    return value ? std::optional<T>(*value) : std::nullopt;
}

// A schedule (io::read_schedule, every check of regime-detect's reader, or made by
// accordion.detect), with its tables flattened epoch-major for the package to shape.
class ScheduleFile : public torch::CustomClassHolder {
public:
    explicit ScheduleFile(std::string path) {
        guarded([&] {
            s_ = io::read_schedule(path);
            return 0;
        });
    }
    explicit ScheduleFile(io::Schedule schedule) : s_(std::move(schedule)) {}

    const io::Schedule& schedule() const { return s_; }

    std::vector<std::string> text() const {
        return {io::schedule_mode_name(s_.mode), s_.detector, s_.granularity, s_.low, s_.high, s_.source,
                s_.header.provenance.producer};
    }
    double eta() const { return s_.eta; }
    std::int64_t interval() const { return s_.interval; }
    bool monotone() const { return s_.monotone; }
    std::int64_t epochs() const { return s_.epochs; }
    std::vector<std::string> names() const {
        std::vector<std::string> out;
        for (const auto& p : s_.parameters) out.push_back(p.name);
        return out;
    }
    std::vector<std::int64_t> ndim() const {
        std::vector<std::int64_t> out;
        for (const auto& p : s_.parameters) out.push_back(static_cast<std::int64_t>(p.shape.size()));
        return out;
    }
    std::vector<std::int64_t> dims() const {
        std::vector<std::int64_t> out;
        for (const auto& p : s_.parameters) out.insert(out.end(), p.shape.begin(), p.shape.end());
        return out;
    }
    std::vector<std::string> levels() const { return s_.levels; }
    std::vector<std::int64_t> level() const { return {s_.level.begin(), s_.level.end()}; }
    std::vector<std::int64_t> critical() const { return {s_.critical.begin(), s_.critical.end()}; }
    std::vector<std::int64_t> reason() const { return {s_.reason.begin(), s_.reason.end()}; }
    std::vector<double> ratio() const { return s_.ratio; }
    std::vector<std::int64_t> batch_size() const { return s_.batch_size; }
    std::vector<double> lr_scale() const { return s_.lr_scale; }
    std::vector<std::int64_t> critical_epochs() const { return plan::critical_epochs(s_); }
    // The row of the schedule's tables that `epoch` reads (its last beyond its end with
    // extend_last); `path` names it in the message, `hint` says how to extend it.
    std::int64_t row(std::string path, std::int64_t epoch, bool extend_last, std::string hint) {
        return guarded([&] { return plan::schedule_row(s_.epochs, epoch, {extend_last, path, hint}); });
    }

    // Throws UsageError naming `path` and every difference unless the schedule lists
    // these parameters (the model's) with the same names, shapes and order.
    void check_model(std::string path, std::vector<std::string> names, std::vector<std::int64_t> ndim,
                     std::vector<std::int64_t> dims) {
        guarded([&] {
            plan::check_parameters(path, parameters_of(names, ndim, dims), s_.parameters);
            return 0;
        });
    }

    // Writes the schedule as regime-detect writes it.
    void write(std::string path) {
        guarded([&] {
            io::write_schedule(path, s_);
            return 0;
        });
    }

private:
    io::Schedule s_;
};

compress::Spec spec_named(const std::string& what, const std::string& text) {
    try {
        return compress::parse_spec_line(text);
    } catch (const UsageError& e) {
        throw UsageError(what + ": " + e.what());
    }
}

// The run plan of the compressing hook: the model's parameters, then one source of
// levels (fixed, schedule or accordion), then each epoch's levels.
class Plan : public torch::CustomClassHolder {
public:
    Plan(std::vector<std::string> names, std::vector<std::int64_t> ndim, std::vector<std::int64_t> dims) {
        guarded([&] {
            parameters_ = parameters_of(names, ndim, dims);
            return 0;
        });
    }

    // `what`: the argument the spec came in, for the message.
    void fixed(std::string what, std::string spec) {
        guarded([&] {
            plan_ = plan::RunPlan::fixed(parameters_, spec_named(what, spec));
            return 0;
        });
    }

    // A compression schedule, checked against the model; `path` names it in messages,
    // `extend_hint` how the caller repeats its last epoch.
    void schedule(c10::intrusive_ptr<ScheduleFile> file, std::string path, bool extend_last, std::string extend_hint) {
        guarded([&] {
            const io::Schedule& s = file->schedule();
            plan::check_parameters(path, parameters_, s.parameters);
            std::vector<std::string> problems;
            std::vector<compress::Spec> levels = plan::parse_levels(s, problems);
            if (!problems.empty()) throw UsageError(plan::misfit_message(path, "model", problems));
            plan_ = plan::RunPlan::from_schedule(s, levels, parameters_, plan::kOpenEnded,
                                                 {extend_last, path, extend_hint});
            return 0;
        });
    }

    void accordion(std::string low, std::string high, double eta, std::int64_t interval) {
        guarded([&] {
            plan::AccordionSettings settings{spec_named("low", low), spec_named("high", high), eta, interval};
            plan_ = plan::RunPlan::accordion(parameters_, settings);
            return 0;
        });
    }

    // Accordion online for the automatic mode, whose candidate `levels` join none, low and high.
    void automatic(std::string low, std::string high, double eta, std::int64_t interval,
                   std::vector<std::string> levels) {
        guarded([&] {
            plan::AccordionSettings settings{spec_named("low", low), spec_named("high", high), eta, interval};
            std::vector<compress::Spec> candidates;
            for (const auto& text : levels) candidates.push_back(spec_named("levels", text));
            plan_ = plan::RunPlan::automatic(parameters_, settings, candidates, {}, plan::kOpenEnded);
            return 0;
        });
    }

    std::vector<std::string> level_names() {
        return guarded([&] { return get().level_names(); });
    }

    // Each parameter's level in `epoch` (an index into level_names()); online, the
    // decision behind it is kept for critical() and reasons().
    std::vector<std::int64_t> levels(std::int64_t epoch) {
        return guarded([&] {
            plan::EpochLevels decided = get().levels_of(epoch);
            critical_.assign(decided.critical.begin(), decided.critical.end());
            reasons_.clear();
            for (auto r : decided.reason) reasons_.push_back(regime::reason_name(static_cast<regime::Reason>(r)));
            return std::vector<std::int64_t>(decided.level.begin(), decided.level.end());
        });
    }
    std::vector<std::int64_t> critical() const { return critical_; }
    std::vector<std::string> reasons() const { return reasons_; }

    void set_learning_rate(std::int64_t epoch, double lr) {
        guarded([&] {
            get().set_learning_rate(epoch, lr);
            return 0;
        });
    }
    void record_norms(std::int64_t epoch, std::vector<double> norms) {
        guarded([&] {
            get().record_norms(epoch, norms);
            return 0;
        });
    }
    std::int64_t recorded_epochs() {
        return guarded([&] { return get().recorded_epochs(); });
    }
    std::vector<double> norms() {
        return guarded([&] { return get().norms(); });
    }
    std::vector<double> learning_rates() {
        return guarded([&] { return get().learning_rates(); });
    }
    // The online settings as the plan holds them: low and high as canonical specs.
    std::vector<std::string> accordion_levels() {
        return guarded([&] {
            const plan::AccordionSettings& a = get().accordion_settings();
            return std::vector<std::string>{a.low.text(), a.high.text()};
        });
    }

private:
    plan::RunPlan& get() {
        if (!plan_) throw Error("internal error: the run plan has no source of levels yet");
        return *plan_;
    }

    std::vector<Parameter> parameters_;
    std::optional<plan::RunPlan> plan_;
    std::vector<std::int64_t> critical_;
    std::vector<std::string> reasons_;
};

// While accordion.detect runs, its warnings (regime-detect's) name it, whatever ends it.
struct NamedWarnings {
    NamedWarnings() { cli::setup_logging("accordion.detect", -1); }
    ~NamedWarnings() { cli::setup_logging("accordion", -1); }
};

// regime-detect's settings as the package's keywords give them; unset: the program's default.
app::DetectRequest request_of(std::string grads, c10::optional<double> eta, c10::optional<std::int64_t> interval,
                              c10::optional<std::string> mode, c10::optional<std::string> low,
                              c10::optional<std::string> high, c10::optional<std::string> granularity, bool monotone) {
    app::DetectRequest r;
    r.grads = std::move(grads);
    r.eta = optional_of(eta);
    r.interval = optional_of(interval);
    r.mode = optional_of(mode);
    r.low = optional_of(low);
    r.high = optional_of(high);
    r.granularity = optional_of(granularity);
    r.monotone = monotone;
    return r;
}

std::vector<std::string> detect_arguments(std::string grads, c10::optional<double> eta,
                                          c10::optional<std::int64_t> interval, c10::optional<std::string> mode,
                                          c10::optional<std::string> low, c10::optional<std::string> high,
                                          c10::optional<std::string> granularity, bool monotone) {
    return app::detect_arguments(request_of(grads, eta, interval, mode, low, high, granularity, monotone));
}

// accordion.detect on a grads.h5 file: the schedule regime-detect writes for the same
// settings, made in-process (nothing is written).
c10::intrusive_ptr<ScheduleFile> detect_file(std::string grads, c10::optional<double> eta,
                                             c10::optional<std::int64_t> interval, c10::optional<std::string> mode,
                                             c10::optional<std::string> low, c10::optional<std::string> high,
                                             c10::optional<std::string> granularity, bool monotone) {
    return guarded([&] {
        NamedWarnings named;
        app::DetectRequest r = request_of(grads, eta, interval, mode, low, high, granularity, monotone);
        app::DetectConfig config = app::detect_config(r);
        const io::GradStats stats = io::read_grads(config.input);
        return c10::make_intrusive<ScheduleFile>(app::detect_schedule(std::move(config), stats));
    });
}

// accordion.detect on norms held in memory: `norms` epoch-major (epochs x parameters),
// `lr` one per epoch; `source` names them in messages and the schedule's source.
c10::intrusive_ptr<ScheduleFile> detect_norms(std::string source, std::vector<std::string> names,
                                              std::vector<std::int64_t> ndim, std::vector<std::int64_t> dims,
                                              std::vector<double> norms, std::vector<double> lr,
                                              c10::optional<double> eta, c10::optional<std::int64_t> interval,
                                              c10::optional<std::string> mode, c10::optional<std::string> low,
                                              c10::optional<std::string> high, c10::optional<std::string> granularity,
                                              bool monotone) {
    return guarded([&] {
        NamedWarnings named;
        app::DetectRequest r = request_of(source, eta, interval, mode, low, high, granularity, monotone);
        app::DetectConfig config = app::detect_config(r);
        io::GradStats stats;
        stats.parameters = parameters_of(names, ndim, dims);
        const size_t count = stats.parameters.size();
        if (count == 0 || norms.size() != lr.size() * count)
            throw Error("internal error: " + std::to_string(norms.size()) + " norms for " + std::to_string(lr.size()) +
                        " epochs of " + std::to_string(count) + " parameters");
        for (size_t e = 0; e < lr.size(); ++e) {
            io::EpochStats epoch;
            epoch.lr = lr[e];
            epoch.norm.assign(norms.begin() + static_cast<std::ptrdiff_t>(e * count),
                              norms.begin() + static_cast<std::ptrdiff_t>((e + 1) * count));
            stats.epochs.push_back(std::move(epoch));
        }
        if (stats.epochs.empty()) throw UsageError(config.input + ": holds no epoch");
        for (size_t e = 0; e < stats.epochs.size(); ++e) {
            const std::string problem = io::epoch_problem(stats.epochs[e], e, stats.parameters);
            if (!problem.empty()) throw UsageError(config.input + ": " + problem);
        }
        return c10::make_intrusive<ScheduleFile>(app::detect_schedule(std::move(config), stats));
    });
}

std::vector<std::string> parameter_mismatches(std::vector<std::string> model_names, std::vector<std::int64_t> model_ndim,
                                              std::vector<std::int64_t> model_dims, std::vector<std::string> names,
                                              std::vector<std::int64_t> ndim, std::vector<std::int64_t> dims) {
    return guarded([&] {
        return plan::parameter_mismatches(parameters_of(model_names, model_ndim, model_dims),
                                          parameters_of(names, ndim, dims));
    });
}

std::vector<std::string> reason_names() {
    std::vector<std::string> out;
    for (int r = 0; r < io::kReasonCodes; ++r) out.push_back(regime::reason_name(static_cast<regime::Reason>(r)));
    return out;
}

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    using namespace acc::python;
    m.class_<ScheduleFile>("ScheduleFile")
        .def(torch::init<std::string>())
        .def("text", &ScheduleFile::text)
        .def("eta", &ScheduleFile::eta)
        .def("interval", &ScheduleFile::interval)
        .def("monotone", &ScheduleFile::monotone)
        .def("epochs", &ScheduleFile::epochs)
        .def("names", &ScheduleFile::names)
        .def("ndim", &ScheduleFile::ndim)
        .def("dims", &ScheduleFile::dims)
        .def("levels", &ScheduleFile::levels)
        .def("level", &ScheduleFile::level)
        .def("critical", &ScheduleFile::critical)
        .def("reason", &ScheduleFile::reason)
        .def("ratio", &ScheduleFile::ratio)
        .def("batch_size", &ScheduleFile::batch_size)
        .def("lr_scale", &ScheduleFile::lr_scale)
        .def("critical_epochs", &ScheduleFile::critical_epochs)
        .def("row", &ScheduleFile::row)
        .def("check_model", &ScheduleFile::check_model)
        .def("write", &ScheduleFile::write);
    m.class_<Plan>("Plan")
        .def(torch::init<std::vector<std::string>, std::vector<std::int64_t>, std::vector<std::int64_t>>())
        .def("fixed", &Plan::fixed)
        .def("schedule", &Plan::schedule)
        .def("accordion", &Plan::accordion)
        .def("automatic", &Plan::automatic)
        .def("level_names", &Plan::level_names)
        .def("levels", &Plan::levels)
        .def("critical", &Plan::critical)
        .def("reasons", &Plan::reasons)
        .def("set_learning_rate", &Plan::set_learning_rate)
        .def("record_norms", &Plan::record_norms)
        .def("recorded_epochs", &Plan::recorded_epochs)
        .def("norms", &Plan::norms)
        .def("learning_rates", &Plan::learning_rates)
        .def("accordion_levels", &Plan::accordion_levels);
    m.def("parameter_mismatches", parameter_mismatches);
    m.def("detect_arguments", detect_arguments);
    m.def("detect_file", detect_file);
    m.def("detect_norms", detect_norms);
    // Why an epoch is (not) critical, per /epochs/reason code, as regime-detect words it.
    m.def("reason_names() -> str[]", reason_names);
    // Accordion's rule's defaults: eta and the interval (epochs).
    m.def("default_eta() -> float", [] { return acc::regime::kDefaultEta; });
    m.def("default_interval() -> int", [] { return acc::regime::kDefaultInterval; });
}
