// Whether a schedule belongs to a model: the same parameters,
// by name, shape and order. One check, with one set of messages, for train-dist
// and the Python package.
#pragma once

#include "base/shape.hpp"

#include <string>
#include <vector>

namespace acc::plan {

/// Every way `listed`'s parameters differ from the model's, one phrase each
/// ("the model's parameter 'fc.weight' is missing", "'fc.bias' has shape 8, the
/// model's is 10", ...); empty when they match.
std::vector<std::string> parameter_mismatches(const std::vector<Parameter>& model,
                                              const std::vector<Parameter>& listed);

/// "PATH does not fit this model: (1) ...; (2) ..." for a non-empty list of problems.
std::string misfit_message(const std::string& path, const std::string& what, const std::vector<std::string>& problems);

/// Throws acc::UsageError naming `path` and every mismatch unless `listed` holds
/// the model's parameters with the same names, shapes and order.
void check_parameters(const std::string& path, const std::vector<Parameter>& model,
                      const std::vector<Parameter>& listed);

}  // namespace acc::plan
