// The gradient-statistics file (format accordion.grads), written by grad-dump and
// read by regime-detect and compress-bench. Layout: docs/formats.md.
#pragma once

#include "io/header.hpp"
#include "io/parameters.hpp"

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace acc::io {

inline constexpr const char* kGradsFormat = "accordion.grads";
inline constexpr int kGradsMajor = 1;
inline constexpr int kGradsMinor = 1;  ///< 1.1 added /profile

/// One row of /epochs: statistics of one training epoch.
struct EpochStats {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    double lr = 0;                 ///< learning rate used in the epoch (at its last step)
    double loss = kNone;           ///< mean training loss over the epoch's steps
    double accuracy = kNone;       ///< training accuracy, a fraction in [0, 1]
    double test_loss = kNone;      ///< NaN when the epoch was not evaluated
    double test_accuracy = kNone;  ///< NaN when the epoch was not evaluated
    std::int64_t steps = 0;        ///< optimizer steps taken in the epoch
    std::int64_t samples = 0;      ///< training samples seen by the recording rank
    double seconds = kNone;        ///< wall time of the epoch, evaluation excluded
    /// Per parameter, the L2 norm of the raw gradient summed over the epoch's steps.
    std::vector<double> norm;
};

/// What was trained; optional root attributes.
struct RunInfo {
    std::string model;
    std::string dataset;
    std::int64_t batch_size = 0;  ///< per-rank batch size, 0 if unknown
    std::int64_t world_size = 1;
    std::int64_t seed = 0;
};

/// /profile (since 1.1): how compressible each epoch's summed gradient is, the
/// input of regime-detect's per-layer planner. Indexed [epoch][parameter].
struct GradProfile {
    /// The fractions of entries kept at which the Top-k tails were taken, increasing, in (0, 1].
    std::vector<double> topk_fractions;
    /// Per epoch and parameter, one value per fraction: the share of the summed gradient's
    /// squared L2 norm outside its k largest magnitudes. In [0, 1], non-increasing.
    std::vector<std::vector<std::vector<double>>> topk_tail;
    /// Per epoch and parameter, the singular values of the summed gradient viewed as
    /// PowerSGD views it (shape[0] rows, numel / shape[0] columns), largest first;
    /// empty for parameters that are not matrices.
    std::vector<std::vector<std::vector<double>>> singular_values;
};

struct GradStats {
    FileHeader header;
    bool complete = true;  ///< false when the producing run stopped early
    RunInfo run;
    std::vector<Parameter> parameters;
    std::vector<EpochStats> epochs;
    bool has_step_norms = false;
    std::vector<std::int64_t> snapshot_epochs;  ///< epochs with stored gradient tensors
    bool has_profile = false;                   ///< the file holds /profile (grad-dump --profile)
    GradProfile profile;                        ///< empty unless has_profile; then every epoch and parameter
};

/// What is wrong with one epoch's values (its learning rate, step count and norms, one
/// per parameter) as the end of a sentence ("gradient norm is NaN at epoch 3, parameter
/// 'fc.weight' ..."); empty when nothing is. The check read_grads applies to each epoch.
std::string epoch_problem(const EpochStats& epoch, size_t index, const std::vector<Parameter>& parameters);

/// Reads and validates a whole gradient-statistics file (snapshots stay on disk).
GradStats read_grads(const std::string& path);

/// Reads the stored gradient tensors of one snapshot epoch, in parameter order.
std::vector<std::vector<float>> read_snapshot(const std::string& path, std::int64_t epoch);

/// Appends epochs to a gradient-statistics file, one transaction per epoch.
///
/// The file first appears under its final name once the first epoch is complete
/// (written under a temporary name, then renamed). Later epochs are appended in
/// place and the file is closed after each one, so a run killed between epochs
/// leaves a valid file holding every completed epoch, with complete = 0.
class GradsWriter {
public:
    /// A non-empty `profile_fractions` records /profile at these Top-k fractions:
    /// every epoch then needs add_profile() for every parameter.
    GradsWriter(std::string path, Provenance provenance, RunInfo run, std::vector<Parameter> parameters,
                bool step_norms, std::vector<double> profile_fractions = {});
    /// Continues an existing file for a resumed run: keeps its first `keep_epochs`
    /// epochs (dropping any later ones) after checking that it lists `parameters`.
    /// A profile is continued only where the file has one at the same fractions;
    /// one asked for on a file without (or the reverse) throws FileError, since
    /// /profile must cover every epoch.
    static GradsWriter resume(std::string path, std::vector<Parameter> parameters, std::int64_t keep_epochs,
                              bool step_norms, std::vector<double> profile_fractions = {});
    ~GradsWriter();
    GradsWriter(GradsWriter&&) noexcept;
    GradsWriter& operator=(GradsWriter&&) noexcept;

    /// Buffers one step's per-parameter gradient norms (only with step_norms).
    void add_step_norms(std::int64_t step, const std::vector<double>& norms);
    /// Buffers the summed gradient of one parameter for this epoch's snapshot.
    void add_snapshot(size_t parameter, std::vector<float> values);
    /// Buffers one parameter's profile for this epoch: its singular values (empty
    /// for a parameter that is not a matrix) and its Top-k tail fractions.
    void add_profile(size_t parameter, std::vector<double> singular_values, std::vector<double> topk_tail);
    /// Whether every epoch needs add_profile().
    bool records_profile() const;
    /// Writes the epoch with everything buffered since the last call.
    void append_epoch(const EpochStats& stats);
    /// Marks the file complete (complete = 1).
    void finish();

    std::int64_t epochs_written() const;
    const std::string& path() const;

private:
    struct State;
    explicit GradsWriter(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

}  // namespace acc::io
