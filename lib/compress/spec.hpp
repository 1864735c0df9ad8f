// Compressor specifications ("powersgd:2", "topk:0.01", ...) and how many bytes
// each sends per worker and step. No LibTorch here: regime-detect and the
// performance model use it too. Formulas: docs/metrics.md, "Data sent".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc::compress {

/// The collective a compressor's payload needs.
enum class Collective { allreduce, allgather };

const char* collective_name(Collective c);

struct CompressorInfo {
    const char* name;
    const char* parameter;  ///< "RANK", "FRACTION", "LEVELS", or nullptr when it takes none
    const char* summary;
    Collective collective;
    bool error_feedback;
};

/// Every compressor the toolkit knows, in the order --help lists them.
const std::vector<CompressorInfo>& compressors();

/// A parsed level, `name[:parameter]`.
struct Spec {
    std::string name;
    double parameter = 0;  ///< rank, fraction kept or quantization levels; 0 when none
    /// Canonical text, e.g. "topk:0.01"; parse_spec(text()) gives the same spec.
    std::string text() const;
    const CompressorInfo& info() const;
    bool operator==(const Spec& other) const { return name == other.name && parameter == other.parameter; }
};

/// Parses and range-checks a spec; throws UsageError listing the valid ones.
Spec parse_spec(const std::string& text);

/// One line per compressor, "powersgd:RANK  low-rank ..." for --help and errors.
std::string spec_help();

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
