// Parameters as the package passes them: names, and shapes flattened into one list
// of dimensions with each tensor's number of dimensions alongside
// (accordion._library.parameter_lists).
#pragma once

#include "base/error.hpp"
#include "base/shape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::python {

inline std::vector<Parameter> parameters_of(const std::vector<std::string>& names,
                                            const std::vector<std::int64_t>& ndim,
                                            const std::vector<std::int64_t>& dims) {
    if (names.size() != ndim.size()) throw Error("internal error: parameter names and shapes differ in number");
    std::vector<Parameter> out;
    size_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
        if (ndim[i] < 0 || at + static_cast<size_t>(ndim[i]) > dims.size())
            throw Error("internal error: the parameters' shapes are cut short");
        out.push_back({names[i], std::vector<std::int64_t>(dims.begin() + static_cast<std::ptrdiff_t>(at),
                                                           dims.begin() + static_cast<std::ptrdiff_t>(at + ndim[i]))});
        at += static_cast<size_t>(ndim[i]);
    }
    return out;
}

}  // namespace acc::python
