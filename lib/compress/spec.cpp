#include "compress/spec.hpp"

#include "base/error.hpp"
#include "base/shape.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace acc::compress {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool parse_number(const std::string& text, double& value) {
    if (text.empty()) return false;
    char* end = nullptr;
    value = std::strtod(text.c_str(), &end);
    return end && *end == '\0' && std::isfinite(value);
}

}  // namespace

std::int64_t kept_entries(double fraction, std::int64_t n) {
    // At least one, but never more than there are (an empty tensor keeps none).
    return std::min(n, std::max<std::int64_t>(1, static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(n)))));
}

const char* collective_name(Collective c) { return c == Collective::allreduce ? "allreduce" : "allgather"; }

const std::vector<CompressorInfo>& compressors() {
    static const std::vector<CompressorInfo> list = {
        {"none", nullptr, "fp32 allreduce, no compression", Collective::allreduce, false},
        {"fp16", nullptr, "half-precision allreduce", Collective::allreduce, false},
        {"powersgd", "RANK", "low-rank PowerSGD with error feedback and warm start (RANK >= 1)", Collective::allreduce, true},
        {"topk", "FRACTION", "largest-magnitude FRACTION of entries, error feedback (0 < FRACTION <= 1)", Collective::allgather, true},
        {"randomk", "FRACTION", "random FRACTION of entries from a shared seed, error feedback", Collective::allreduce, true},
        {"dgc", "FRACTION", "deep gradient compression: sampled threshold, momentum correction", Collective::allgather, true},
        {"signsgd", nullptr, "signs with majority vote (1 bit per entry)", Collective::allgather, false},
        {"efsignsgd", nullptr, "scaled signs with error feedback", Collective::allgather, true},
        {"qsgd", "LEVELS", "stochastic quantization to LEVELS levels, bucketed norms (1..32767)", Collective::allgather, false},
        {"terngrad", nullptr, "stochastic ternary levels {-s, 0, s} (2 bits per entry)", Collective::allgather, false},
    };
    return list;
}

std::string spec_help() {
    std::string out;
    for (const auto& c : compressors()) {
        std::string name = c.name;
        if (c.parameter) name += std::string(":") + c.parameter;
        char line[160];
        std::snprintf(line, sizeof line, "  %-18s %s\n", name.c_str(), c.summary);
        out += line;
    }
    return out;
}

const CompressorInfo& Spec::info() const {
    for (const auto& c : compressors())
        if (name == c.name) return c;
    throw UsageError("unknown compressor '" + name + "'");
}

std::string Spec::text() const {
    if (!info().parameter) return name;
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.10g", parameter);
    return name + ":" + buffer;
}

Spec parse_spec(const std::string& text) {
    const std::string valid = "valid levels are:\n" + spec_help();
    size_t colon = text.find(':');
    Spec spec;
    spec.name = text.substr(0, colon);
    const CompressorInfo* info = nullptr;
    for (const auto& c : compressors())
        if (spec.name == c.name) info = &c;
    if (!info) throw UsageError("'" + text + "' is not a compressor spec; " + valid);
    if (!info->parameter) {
        if (colon != std::string::npos)
            throw UsageError("'" + text + "': " + spec.name + " takes no parameter; " + valid);
        return spec;
    }
    std::string example = spec.name + ":" + (std::string(info->parameter) == "FRACTION" ? "0.01" : "2");
    if (colon == std::string::npos)
        throw UsageError("'" + text + "': " + spec.name + " needs " + info->parameter + ", e.g. " + example);
    if (!parse_number(text.substr(colon + 1), spec.parameter))
        throw UsageError("'" + text + "': " + info->parameter + " must be a number, e.g. " + example);
    const std::string parameter = info->parameter;
    if (parameter == "FRACTION") {
        if (!(spec.parameter > 0 && spec.parameter <= 1))
            throw UsageError("'" + text + "': FRACTION must be in (0, 1], e.g. " + example);
    } else {
        double upper = parameter == "LEVELS" ? 32767 : 1e9;
        if (spec.parameter != std::floor(spec.parameter) || spec.parameter < 1 || spec.parameter > upper)
            throw UsageError("'" + text + "': " + parameter + " must be a whole number from 1 to " +
                             std::to_string(static_cast<long long>(upper)) + ", e.g. " + example);
    }
    return spec;
}

MatrixView matrix_view(const std::vector<std::int64_t>& shape) {
    MatrixView m;
    std::int64_t n = shape_numel(shape);
    m.rows = shape.empty() ? 1 : shape[0];
    m.cols = m.rows > 0 ? n / m.rows : 0;
    return m;
}

bool powersgd_compresses(const std::vector<std::int64_t>& shape, std::int64_t rank, double min_rate) {
    if (shape.size() < 2) return false;
    MatrixView m = matrix_view(shape);
    std::int64_t r = std::min({rank, m.rows, m.cols});
    return static_cast<double>((m.rows + m.cols) * r) * min_rate < static_cast<double>(m.rows * m.cols);
}

std::int64_t wire_bytes(const Spec& spec, const std::vector<std::int64_t>& shape) {
    const std::int64_t n = shape_numel(shape);
    const std::string& name = spec.name;
    if (name == "none") return 4 * n;
    if (name == "fp16") return 2 * n;
    if (name == "powersgd") {
        auto rank = static_cast<std::int64_t>(spec.parameter);
        if (!powersgd_compresses(shape, rank)) return 4 * n;
        MatrixView m = matrix_view(shape);
        return 4 * (m.rows + m.cols) * std::min({rank, m.rows, m.cols});
    }
    // fp32 value + int32 index; dgc pads its at most k chosen entries to k
    if (name == "topk" || name == "dgc") return 8 * kept_entries(spec.parameter, n);
    if (name == "randomk") return 4 * kept_entries(spec.parameter, n);              // indices come from the shared seed
    if (name == "signsgd") return 4 * ceil_div(n, 32);                      // signs packed into 32-bit words
    if (name == "efsignsgd") return 4 * ceil_div(n, 32) + 4;                // plus one fp32 scale
    if (name == "qsgd") {
        const std::int64_t bucket = 128;  // one fp32 norm per bucket of 128 entries
        const std::int64_t code = spec.parameter < 128 ? 1 : 2;
        return code * n + 4 * ceil_div(n, bucket);
    }
    if (name == "terngrad") return ceil_div(n, 4) + 4;  // 2-bit codes and one fp32 scale
    throw UsageError("unknown compressor '" + name + "'");
}

}  // namespace acc::compress
