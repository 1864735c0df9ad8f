// The automatic mode of CompressionState(auto=True), bound for Python: the library's
// app::AutoMode (train-dist --auto's measurements and per-epoch plans) over the
// user's own process group. The package brings what train-dist's loop brings: the
// regimes from the run plan, rank 0's gradient sums, and each epoch's time from the
// hook's sync; the compute of a step comes from the first epoch, whose steps go
// uncompressed (the package cannot run the user's model by itself).
//
// Built only against LibTorch 2.x: Python hands the process group over with
// ProcessGroup.boxed(), which 1.13 lacks.
#include "guarded.hpp"

#include "app/regime_plan.hpp"
#include "compress/spec.hpp"
#include "plan/auto_plan.hpp"

#include <torch/library.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include "parameters.hpp"

#include "app/auto_mode.hpp"
#include "comm/group.hpp"
#include "exchange/staging.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace acc::python {
namespace {

class AutoTuner : public torch::CustomClassHolder {
public:
    // `candidates`: the run plan's level names (its level indices refer to them);
    // margin and drift as train-dist's --auto-margin and --auto-drift. `overlapped`:
    // uncompressed steps overlap their exchange with the backward pass in DDP's
    // buckets; without, every exchange follows the backward pass (compress_fsdp's,
    // which runs inside FSDP's all-reduce hook, one module after the other).
    AutoTuner(std::vector<std::string> names, std::vector<std::int64_t> ndim, std::vector<std::int64_t> dims,
              std::vector<std::string> candidates, std::string low, std::string high, double margin, double drift,
              std::int64_t seed, bool error_feedback, bool overlapped) {
        guarded([&] {
            plan::check_auto_options(margin, drift, "margin", "drift");
            app::AutoSettings settings;
            settings.low = compress::parse_spec_line(low);
            settings.high = compress::parse_spec_line(high);
            app::check_plannable("low", settings.low);
            app::check_plannable("high", settings.high);
            settings.margin = margin;
            settings.drift = drift;
            settings.seed = static_cast<std::uint32_t>(seed);
            if (!overlapped)  // one bucket, ready when the backward pass ends
                settings.bucket_bytes = settings.first_bucket_bytes = std::numeric_limits<double>::infinity();
            std::vector<compress::Spec> levels;
            for (const auto& text : candidates) levels.push_back(compress::parse_spec_line(text));
            exchange::ExchangeOptions options;
            options.seed = settings.seed;
            options.error_feedback = error_feedback;
            mode_.emplace(settings, parameters_of(names, ndim, dims), std::move(levels), options);
            return 0;
        });
    }

    // Rank 0: whether to measure before `epoch`.
    bool due(std::int64_t epoch) {
        return guarded([&] { return get().due(epoch); });
    }

    // Collective over `group`: the link on tensors of `device` (the model's); rank 0
    // (`leader`) times the codecs.
    void measure(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string device, bool leader) {
        guarded([&] {
            comm::GroupCollectives comm(std::move(group));
            const at::Device on(device);
            // A group made for NCCL takes device tensors only: the host's small collectives go through the device.
            std::unique_ptr<comm::Collectives> staged;
            if (!on.is_cpu()) staged = exchange::staged_collectives(comm, on);
            get().measure(comm, on, staged ? *staged : comm, leader);
            return 0;
        });
    }
    void skip_measure() { get().skip_measure(); }

    // Rank 0: the epoch's levels (indices into the candidates), given each parameter's regime.
    std::vector<std::int64_t> plan(std::vector<std::int64_t> critical) {
        return guarded([&] {
            std::vector<std::uint8_t> c(critical.begin(), critical.end());
            const plan::AutoPlan& p = get().plan(c);
            return std::vector<std::int64_t>(p.level.begin(), p.level.end());
        });
    }

    // Rank 0, after an epoch: its gradient sums (one per parameter, in order) and its times.
    void after_epoch(std::vector<at::Tensor> sums, double seconds, double compute_seconds, std::int64_t steps) {
        guarded([&] {
            get().after_epoch(sums, seconds, compute_seconds, steps);
            return 0;
        });
    }

    // Rank 0: the epoch's record: the numbers of record_fields(), then a reason code per parameter.
    std::vector<double> record() {
        return guarded([&] {
            const io::MetricsAuto m = get().metrics();
            std::vector<double> out = {double(m.pays),          double(m.measured),     m.measure_seconds,
                                       m.predicted_seconds,     m.overhead_seconds,     m.uncompressed_seconds,
                                       m.compressed_seconds,    m.measured_seconds,     m.compute_seconds,
                                       m.allreduce_alpha,       m.allreduce_bandwidth,  m.allgather_alpha,
                                       m.allgather_bandwidth,   m.burst_seconds,        m.budget,
                                       m.error};
            for (auto r : m.reason) out.push_back(r);
            return out;
        });
    }
    std::string summary() {
        return guarded([&] { return get().summary(); });
    }

private:
    app::AutoMode& get() {
        if (!mode_) throw Error("internal error: the automatic mode was not made");
        return *mode_;
    }

    std::optional<app::AutoMode> mode_;
};

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    using acc::python::AutoTuner;
    m.class_<AutoTuner>("AutoTuner")
        .def(torch::init<std::vector<std::string>, std::vector<std::int64_t>, std::vector<std::int64_t>,
                         std::vector<std::string>, std::string, std::string, double, double, std::int64_t, bool,
                         bool>())
        .def("due", &AutoTuner::due)
        .def("measure", &AutoTuner::measure)
        .def("skip_measure", &AutoTuner::skip_measure)
        .def("plan", &AutoTuner::plan)
        .def("after_epoch", &AutoTuner::after_epoch)
        .def("record", &AutoTuner::record)
        .def("summary", &AutoTuner::summary);
}
#endif

namespace acc::python {
namespace {

// The numbers of AutoTuner.record(), in its order (io::MetricsAuto's, as docs/metrics.md names them).
const std::vector<std::string>& auto_record_fields() {
    static const std::vector<std::string> fields = {
        "pays",          "measured",         "measure_seconds",  "predicted_seconds", "overhead_seconds",
        "uncompressed_seconds", "compressed_seconds", "measured_seconds", "compute_seconds", "allreduce_alpha",
        "allreduce_bandwidth", "allgather_alpha", "allgather_bandwidth", "burst_seconds", "budget", "error"};
    return fields;
}

}  // namespace
}  // namespace acc::python

// What the package reads even where its hook cannot run (LibTorch 1.13): names and defaults.
TORCH_LIBRARY_FRAGMENT(accordion, m) {
    // The automatic mode's record (auto_record's numbers) and why each parameter has its level, by code.
    m.def("auto_record_fields() -> str[]", [] { return acc::python::auto_record_fields(); });
    m.def("auto_reason_names() -> str[]", [] { return acc::plan::auto_reason_names(); });
    // Its defaults: the margin and the drift (train-dist's --auto-margin, --auto-drift), and
    // the candidate levels besides none, low and high (--levels).
    m.def("auto_defaults() -> float[]",
          [] { return std::vector<double>{acc::plan::kDefaultAutoMargin, acc::plan::kDefaultAutoDrift}; });
    m.def("auto_default_levels() -> str[]", [] {
        std::vector<std::string> out;
        for (const auto& s : acc::compress::kDefaultAutoLevels) out.push_back(s.text());
        return out;
    });
    // Candidate levels as `levels` gives them (comma-separated), checked: canonical texts.
    m.def("auto_levels(str text) -> str[]", [](std::string text) {
        return acc::python::guarded([&] {
            std::vector<std::string> out;
            for (const auto& s : acc::app::parse_plan_candidates(text, "levels")) out.push_back(s.text());
            return out;
        });
    });
}
