// The /parameters group shared by the gradient-statistics and schedule files:
// names, shapes and sizes of a model's parameter tensors in model order.
#pragma once

#include "base/shape.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::io {

// Declared only: HDF5's headers (io/h5.hpp) reach just the files that read or write one.
class H5File;

/// Names, shapes and sizes of a model's tensors (defined in base, shared with compress).
using acc::Parameter;

/// "64x3x3x3"
std::string shape_text(const std::vector<std::int64_t>& shape);

/// The most values a parameter's shape may declare (as for any dataset, docs/formats.md).
inline constexpr std::uint64_t kMaxShapeValues = std::uint64_t{1} << 48;

/// What is wrong with a parameter's shape read from a file, as the end of a sentence
/// ("has dimension 1 of size 0", "has shape 2x..., more than 2^48 values ..."); empty
/// when every dimension is >= 1 and the shape holds at most kMaxShapeValues values.
/// The one check every reader of shapes applies (read_parameters calls it).
std::string shape_problem(const std::vector<std::int64_t>& shape);

void write_parameters(H5File& file, const std::vector<Parameter>& parameters);
/// Reads and validates /parameters (non-empty, unique names, consistent shapes).
std::vector<Parameter> read_parameters(const H5File& file);

/// Checks that `actual` lists the same parameters, in the same order and with the
/// same shapes, as `expected`; the message names the first difference.
/// Returns an empty string when they match.
std::string compare_parameters(const std::vector<Parameter>& expected, const std::vector<Parameter>& actual);

}  // namespace acc::io
