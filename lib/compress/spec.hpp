// Compressor specifications ("powersgd:2", "topk:0.01", ...) and how many bytes
// each sends per worker and step. No LibTorch here: regime-detect and the
// performance model use it too. Formulas: docs/metrics.md, "Data sent".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::compress {

/// The collective a compressor's payload needs.
enum class Collective { allreduce, allgather };

const char* collective_name(Collective c);

struct Spec;
class TensorCodec;
struct CodecOptions;

/// A compressor's parameter and its valid range.
struct ParameterInfo {
    const char* name = nullptr;        ///< "RANK", "FRACTION", "LEVELS"; nullptr when it takes none
    const char* short_name = nullptr;  ///< in one-line lists: "F" for FRACTION
    /// A whole number from 1 to `maximum`; otherwise a fraction in (0, 1].
    bool whole = false;
    double maximum = 1;
    const char* example = nullptr;     ///< the value error messages suggest, e.g. "0.01"
    std::vector<double> defaults;      ///< the values compress-bench runs when not told which
};

/// What the planner (regime-detect --plan) predicts a compressor leaves of a
/// parameter's gradient, from the profile grad-dump --profile records.
enum class ResidualModel {
    unknown,          ///< no error model: the planner refuses its levels
    exact,            ///< sends the gradient whole: nothing is left
    singular_values,  ///< a rank-r factorisation: the singular values past r (/profile/singular_values)
    topk_tail,        ///< the largest FRACTION of entries: the norm's tail past it (/profile/topk_tail)
};

/// One compressor, as its own file (compressors/<name>.cpp) registers it.
struct CompressorInfo {
    const char* name = nullptr;
    ParameterInfo parameter_info;
    const char* summary = nullptr;
    Collective collective = Collective::allreduce;
    bool error_feedback = false;
    /// Bytes one worker sends per step for a tensor of `shape` at `parameter`
    /// (docs/metrics.md, "Data sent").
    std::int64_t (*wire_bytes)(double parameter, const std::vector<std::int64_t>& shape) = nullptr;
    /// The host codec for one tensor: loops over raw float arrays (compress/codecs.hpp).
    /// A device implementation over LibTorch tensors would be a second factory here.
    std::unique_ptr<TensorCodec> (*make_codec)(const Spec& spec, const std::vector<std::int64_t>& shape,
                                               const CodecOptions& options) = nullptr;
    /// A low-rank factorisation (PowerSGD): the parameter is a rank, and the payload travels
    /// as P and Q in two allreduce rounds over all matrices together (Channel::low_rank).
    bool low_rank = false;
    /// The aggregated gradient already carries momentum (DGC's momentum correction), so
    /// the optimizer applies its momentum to the weight decay only.
    bool momentum_in_gradient = false;
    /// --dgc-warmup-epochs raises the keep fraction of the first epochs (DGC's sparsity warm-up).
    bool sparsity_warmup = false;
    /// GraVAC scales its level (train-dist --gravac NAME): the level may change every step,
    /// keeping the memory and the codec's state (exchange::LevelChange::within_family).
    bool gravac_family = false;
    /// The planner's error model of its levels.
    ResidualModel residual_model = ResidualModel::unknown;
};

/// Every compressor the toolkit knows, in the order --help lists them (compress/registry.cpp).
const std::vector<CompressorInfo>& compressors();
/// The compressor of this name, or nullptr.
const CompressorInfo* find_compressor(const std::string& name);
/// `info`'s place in compressors(): how levels travel between ranks as numbers.
size_t registry_index(const CompressorInfo& info);
/// The compressors GraVAC scales (those with gravac_family), in the order its
/// messages list them.
const std::vector<std::string>& gravac_families();

/// A parsed level, `name[:parameter]`.
struct Spec {
    std::string name;
    double parameter = 0;  ///< rank, fraction kept or quantization levels; 0 when none
    /// Canonical text, e.g. "topk:0.01"; parse_spec(text()) gives the same spec.
    std::string text() const;
    const CompressorInfo& info() const;
    bool operator==(const Spec& other) const { return name == other.name && parameter == other.parameter; }
};

/// No compression (compressors/none.cpp): what vectors are sent at, and the plans' first level.
const Spec& no_compression();

/// Accordion's levels unless told otherwise (regime-detect and train-dist --low and
/// --high): PowerSGD rank 2 in critical regimes, rank 1 elsewhere, as the paper runs it.
inline const Spec kDefaultLow{"powersgd", 2};
inline const Spec kDefaultHigh{"powersgd", 1};
/// train-dist --auto's candidate levels besides none, --low and --high (--levels).
inline const std::vector<Spec> kDefaultAutoLevels{{"powersgd", 1}, {"powersgd", 2}, {"powersgd", 4}, {"topk", 0.01}};

/// Parses and range-checks a spec; throws UsageError listing the valid ones.
Spec parse_spec(const std::string& text);
/// parse_spec with its message on one line, the valid levels listed in short
/// (spec_list()): for callers that show an error's first line (the Python package).
Spec parse_spec_line(const std::string& text);

/// One line per compressor, "powersgd:RANK  low-rank ..." for --help and errors.
std::string spec_help();

/// The compressors as one comma-separated list with their short parameter names:
/// "none, fp16, powersgd:RANK, topk:F, ...".
std::string spec_list();

/// Every compressor at each of its default parameters: compress-bench's default levels.
std::vector<Spec> default_specs();

/// PowerSGD's matrix view of a tensor: rows = shape[0], cols = numel / rows.
struct MatrixView {
    std::int64_t rows = 0;
    std::int64_t cols = 0;
};
MatrixView matrix_view(const std::vector<std::int64_t>& shape);

/// Whether PowerSGD at `rank` compresses a tensor of this shape: it must have two or
/// more dimensions and pass the minimum-compression-rate test
/// (rows + cols) * r * min_rate < rows * cols with r = min(rank, rows, cols).
bool powersgd_compresses(const std::vector<std::int64_t>& shape, std::int64_t rank, double min_rate = 2.0);

/// Entries the sparsifiers (topk, randomk, dgc) keep of n: max(1, floor(fraction * n)), at most n.
std::int64_t kept_entries(double fraction, std::int64_t n);

/// Bytes one worker sends in one step for a tensor of this shape under `spec`.
std::int64_t wire_bytes(const Spec& spec, const std::vector<std::int64_t>& shape);

/// The same as 32-bit floats (bytes / 4), the unit of the Accordion paper's "Data Sent".
inline double wire_floats(const Spec& spec, const std::vector<std::int64_t>& shape) {
    return static_cast<double>(wire_bytes(spec, shape)) / 4.0;
}

}  // namespace acc::compress
