#include "io/parameters.hpp"
#include "io/h5.hpp"

#include "base/shape.hpp"

#include <algorithm>
#include <set>

namespace acc::io {

std::string shape_text(const std::vector<std::int64_t>& shape) {
    if (shape.empty()) return "scalar";
    std::string out;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) out += "x";
        out += std::to_string(shape[i]);
    }
    return out;
}

void write_parameters(H5File& file, const std::vector<Parameter>& parameters) {
    size_t max_ndim = 1;
    for (const auto& p : parameters) max_ndim = std::max(max_ndim, p.shape.size());
    std::vector<std::string> names;
    std::vector<std::int32_t> ndim;
    std::vector<std::int64_t> shape(parameters.size() * max_ndim, 0), numel;
    for (size_t i = 0; i < parameters.size(); ++i) {
        const auto& p = parameters[i];
        names.push_back(p.name);
        ndim.push_back(static_cast<std::int32_t>(p.shape.size()));
        std::copy(p.shape.begin(), p.shape.end(), shape.begin() + static_cast<std::ptrdiff_t>(i * max_ndim));
        numel.push_back(p.numel());
    }
    file.create_group("/parameters");
    file.write_strings("/parameters/name", names);
    file.write(std::string("/parameters/ndim"), ndim, Dims{parameters.size()});
    file.write(std::string("/parameters/shape"), shape, Dims{parameters.size(), max_ndim});
    file.write(std::string("/parameters/numel"), numel, Dims{parameters.size()});
}

std::string shape_problem(const std::vector<std::int64_t>& shape) {
    std::uint64_t values = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] < 1) return "has dimension " + std::to_string(d) + " of size " + std::to_string(shape[d]);
        const auto extent = static_cast<std::uint64_t>(shape[d]);
        // Divided, not multiplied, so that no product can wrap around.
        if (extent > kMaxShapeValues / values)
            return "has shape " + shape_text(shape) + ", more than 2^48 values (the file is corrupt)";
        values *= extent;
    }
    return "";
}

std::vector<Parameter> read_parameters(const H5File& file) {
    std::vector<std::string> names = file.read_strings("/parameters/name");
    if (names.empty()) file.fail("/parameters/name lists no parameters");
    const size_t count = names.size();
    Dims ndim_dims, shape_dims, numel_dims;
    auto ndim = file.read<std::int64_t>("/parameters/ndim", &ndim_dims);
    auto shape = file.read<std::int64_t>("/parameters/shape", &shape_dims);
    auto numel = file.read<std::int64_t>("/parameters/numel", &numel_dims);
    if (ndim_dims != Dims{count})
        file.fail("/parameters/ndim has shape " + dims_text(ndim_dims) + ", expected " + std::to_string(count) +
                  " (one per parameter name)");
    if (numel_dims != Dims{count})
        file.fail("/parameters/numel has shape " + dims_text(numel_dims) + ", expected " + std::to_string(count) +
                  " (one per parameter name)");
    if (shape_dims.size() != 2 || shape_dims[0] != count)
        file.fail("/parameters/shape has shape " + dims_text(shape_dims) + ", expected " + std::to_string(count) +
                  "xD (one row per parameter name)");
    const size_t width = shape_dims[1];
    std::set<std::string> seen;
    std::vector<Parameter> out(count);
    for (size_t i = 0; i < count; ++i) {
        Parameter& p = out[i];
        p.name = names[i];
        if (p.name.empty()) file.fail("parameter " + std::to_string(i) + " has an empty name");
        if (!seen.insert(p.name).second) file.fail("parameter name '" + p.name + "' appears twice");
        if (ndim[i] < 0 || static_cast<size_t>(ndim[i]) > width)
            file.fail("parameter '" + p.name + "' has ndim " + std::to_string(ndim[i]) + ", outside 0.." +
                      std::to_string(width));
        for (std::int64_t d = 0; d < ndim[i]; ++d) p.shape.push_back(shape[i * width + static_cast<size_t>(d)]);
        std::string problem = shape_problem(p.shape);
        if (!problem.empty()) file.fail("parameter '" + p.name + "' " + problem);
        if (p.numel() != numel[i])
            file.fail("parameter '" + p.name + "' has shape " + shape_text(p.shape) + " (" +
                      std::to_string(p.numel()) + " elements) but numel " + std::to_string(numel[i]));
    }
    return out;
}

std::string compare_parameters(const std::vector<Parameter>& expected, const std::vector<Parameter>& actual) {
    const size_t common = std::min(expected.size(), actual.size());
    for (size_t i = 0; i < common; ++i) {
        if (expected[i].name != actual[i].name)
            return "parameter " + std::to_string(i) + " is '" + actual[i].name + "', expected '" + expected[i].name + "'";
        if (expected[i].shape != actual[i].shape)
            return "parameter '" + actual[i].name + "' has shape " + shape_text(actual[i].shape) + ", expected " +
                   shape_text(expected[i].shape);
    }
    if (expected.size() != actual.size())
        return std::to_string(actual.size()) + " parameters, expected " + std::to_string(expected.size()) +
               (actual.size() > expected.size() ? " (first extra: '" + actual[common].name + "')"
                                                 : " (first missing: '" + expected[common].name + "')");
    return "";
}

}  // namespace acc::io
