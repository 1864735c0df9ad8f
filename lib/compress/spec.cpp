#include "compress/spec.hpp"

#include "base/error.hpp"
#include "base/shape.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace acc::compress {
namespace {

// Decimal notation only: strtod would also take hexadecimal ("0x10"), which no
// page describes.
bool parse_number(const std::string& text, double& value) {
    if (text.empty() || text.find_first_not_of("0123456789.eE+-") != std::string::npos) return false;
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

std::string spec_help() {
    std::string out;
    for (const auto& c : compressors()) {
        std::string name = c.name;
        if (c.parameter_info.name) name += std::string(":") + c.parameter_info.name;
        char line[160];
        std::snprintf(line, sizeof line, "  %-18s %s\n", name.c_str(), c.summary);
        out += line;
    }
    return out;
}

const CompressorInfo* find_compressor(const std::string& name) {
    for (const auto& c : compressors())
        if (name == c.name) return &c;
    return nullptr;
}

size_t registry_index(const CompressorInfo& info) {
    const auto& all = compressors();
    for (size_t i = 0; i < all.size(); ++i)
        if (&all[i] == &info) return i;
    throw Error(std::string("internal error: compressor '") + info.name + "' is not in the registry");
}

const CompressorInfo& Spec::info() const {
    if (const CompressorInfo* c = find_compressor(name)) return *c;
    throw UsageError("unknown compressor '" + name + "'");
}

std::string Spec::text() const {
    if (!info().parameter_info.name) return name;
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.10g", parameter);
    return name + ":" + buffer;
}

std::string spec_list() {
    std::string out;
    for (const auto& c : compressors()) {
        if (!out.empty()) out += ", ";
        out += c.name;
        if (c.parameter_info.name) out += std::string(":") + c.parameter_info.short_name;
    }
    return out;
}

std::vector<Spec> default_specs() {
    std::vector<Spec> out;
    for (const auto& c : compressors()) {
        if (!c.parameter_info.name) out.push_back(Spec{c.name, 0});
        for (double value : c.parameter_info.defaults) out.push_back(Spec{c.name, value});
    }
    return out;
}

Spec parse_spec_line(const std::string& text) {
    try {
        return parse_spec(text);
    } catch (const UsageError& e) {
        std::string message = e.what();
        const auto cut = message.find("valid levels are:");
        if (cut != std::string::npos) message = message.substr(0, cut) + "one of " + spec_list();
        throw UsageError(message);
    }
}

Spec parse_spec(const std::string& text) {
    const std::string valid = "valid levels are:\n" + spec_help();
    size_t colon = text.find(':');
    Spec spec;
    spec.name = text.substr(0, colon);
    const CompressorInfo* info = find_compressor(spec.name);
    if (!info) throw UsageError("'" + text + "' is not a compressor spec; " + valid);
    const ParameterInfo& p = info->parameter_info;
    if (!p.name) {
        if (colon != std::string::npos)
            throw UsageError("'" + text + "': " + spec.name + " takes no parameter; " + valid);
        return spec;
    }
    const std::string parameter = p.name;
    const std::string example = spec.name + ":" + p.example;
    if (colon == std::string::npos)
        throw UsageError("'" + text + "': " + spec.name + " needs " + parameter + ", e.g. " + example);
    if (!parse_number(text.substr(colon + 1), spec.parameter))
        throw UsageError("'" + text + "': " + parameter + " must be a number, e.g. " + example);
    if (!p.whole) {
        if (!(spec.parameter > 0 && spec.parameter <= p.maximum))
            throw UsageError("'" + text + "': " + parameter + " must be in (0, 1], e.g. " + example);
    } else if (spec.parameter != std::floor(spec.parameter) || spec.parameter < 1 || spec.parameter > p.maximum) {
        throw UsageError("'" + text + "': " + parameter + " must be a whole number from 1 to " +
                         std::to_string(static_cast<long long>(p.maximum)) + ", e.g. " + example);
    }
    // The value text() gives back, so that a level and its text are one: two spellings
    // of a level compare equal, and ranks that exchange levels as text hold the same.
    parse_number(spec.text().substr(spec.name.size() + 1), spec.parameter);
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
    return spec.info().wire_bytes(spec.parameter, shape);
}

}  // namespace acc::compress
