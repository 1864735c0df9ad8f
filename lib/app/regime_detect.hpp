// regime-detect's options and detection, from gradient statistics to a schedule:
// shared by the program (tools/regime-detect, which writes the file and prints the
// summary) and the Python package's accordion.detect, which runs it in-process.
#pragma once

#include "app/regime_plan.hpp"
#include "compress/spec.hpp"
#include "io/grads.hpp"
#include "io/header.hpp"
#include "io/schedule.hpp"
#include "regime/detect.hpp"
#include "regime/summary.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace CLI {
class App;
}

namespace acc::app {

/// What the schedule switches (--mode).
using io::ScheduleMode;
/// What one decision covers (--granularity): one parameter tensor, or the whole model.
enum class Granularity { layer, model };

/// The granularities' names as options and files spell them, in the enum's order.
const std::vector<std::string>& granularity_names();
const std::string& granularity_name(Granularity granularity);

struct DetectConfig {
    std::string input;                                 ///< gradient-statistics file (accordion.grads)
    std::string output = "sched.h5";                   ///< schedule file to write
    double eta = regime::kDefaultEta;                  ///< --eta
    std::int64_t interval = regime::kDefaultInterval;  ///< --interval, epochs
    ScheduleMode mode = ScheduleMode::compression;
    // --low and --high, read as the --mode before them on the option list says (CLI11
    // reads options in the order they are added, whatever the command line's order).
    compress::Spec low = compress::kDefaultLow;       ///< --low: critical epochs' level
    compress::Spec high = compress::kDefaultHigh;     ///< --high: the other epochs' level
    std::int64_t low_batch = 512;                      ///< --low in batch mode: the small batch
    std::int64_t high_batch = 4096;                    ///< --high in batch mode: the large batch
    std::optional<Granularity> granularity;            ///< unset: layer (compression) or model (batch)
    bool monotone = false;
    /// --plan was given: plan per layer (docs/planner.md) among planner.candidates;
    /// otherwise Accordion's two levels.
    bool plan = false;
    PlanConfig planner;                  ///< --plan's candidates, --plan-error, ... and --comm
    std::vector<std::string> plan_only;  ///< the --plan-* and --comm options given, which need --plan
    bool force = false;  ///< replace an output that is read-only or not HDF5
    bool json = false;  ///< also print the summary as JSON on stdout
    io::Provenance provenance;
};

/// Adds regime-detect's options and its footer (the compressor specs) to `app`.
void add_detect_options(CLI::App& app, DetectConfig& config);

/// The program's checks of its settings (UsageError): the settings' own, and no
/// output written over an input. Sets the granularity's default.
void validate_detect(DetectConfig& config);

/// The input's norms, learning rates and steps per epoch, epoch-major.
struct DetectInputs {
    regime::NormTable norms;
    std::vector<double> lr;
    std::vector<std::int64_t> steps;
    std::vector<bool> is_matrix;
    std::vector<std::vector<std::int64_t>> shapes;
    std::int64_t values = 0;  // floats in the model
};

/// What a mode's plan gives the summary, besides the schedule it fills.
struct DetectOutcome {
    regime::Decisions decisions;          // per parameter, or the model's one column in batch mode
    std::vector<bool> counted;    // the columns the summary counts
    std::vector<regime::Regime> regimes;
    std::string line;             // the timeline
    regime::Communication comm;
    std::string levels_line;
    nlohmann::json report;        // the mode's own JSON fields
    std::optional<PlannedSchedule> planned;  // --plan
};

/// A schedule made from gradient statistics, with what the summary reports of it.
struct Detection {
    io::Schedule schedule;
    DetectInputs in;
    DetectOutcome outcome;
    std::int64_t block = 1;
    std::vector<std::string> warnings;
};

/// Accordion's rule (and --plan's planner) on `grads` with settings already checked;
/// warnings are logged and kept in the result.
Detection detect_all(const DetectConfig& config, const io::GradStats& grads);

/// --low and --high as the schedule and the summary print them (a batch size in batch mode).
std::string low_text(const DetectConfig& config);
std::string high_text(const DetectConfig& config);
/// Each level's text.
std::vector<std::string> spec_texts(const std::vector<compress::Spec>& levels);

/// regime-detect's settings as a caller other than the command line gives them (the
/// Python package's accordion.detect); unset: the program's default. Texts are read as
/// the options read them, with the same checks and words.
struct DetectRequest {
    std::string grads;  ///< GRADS.h5, or what names the norms in messages
    std::optional<double> eta;
    std::optional<std::int64_t> interval;
    std::optional<std::string> mode, low, high, granularity;
    bool monotone = false;
};

/// The command line that gives regime-detect these settings (GRADS.h5 and the options
/// given, without the program's name and -o): what to type for the same schedule, and
/// the provenance of one made in-process.
std::vector<std::string> detect_arguments(const DetectRequest& request);

/// The settings of `request`, as the command line detect_arguments gives would set
/// them (with that command line as the provenance). Throws UsageError in the options' words.
DetectConfig detect_config(const DetectRequest& request);

/// The schedule run_detect writes for `config` and gradient statistics `grads`
/// (read from config.input or given in memory), made without writing or printing
/// anything but warnings. Throws UsageError as run_detect does.
io::Schedule detect_schedule(DetectConfig config, const io::GradStats& grads);

}  // namespace acc::app
