#include "plan/parameters.hpp"

#include "base/error.hpp"
#include "io/parameters.hpp"

#include <map>

namespace acc::plan {

std::vector<std::string> parameter_mismatches(const std::vector<Parameter>& model,
                                              const std::vector<Parameter>& listed) {
    std::vector<std::string> out;
    if (model.size() != listed.size())
        out.push_back("it lists " + std::to_string(listed.size()) + " parameters, the model has " +
                      std::to_string(model.size()));
    std::map<std::string, size_t> in_listed, in_model;
    for (size_t i = 0; i < listed.size(); ++i) in_listed[listed[i].name] = i;
    for (size_t i = 0; i < model.size(); ++i) in_model[model[i].name] = i;
    for (size_t i = 0; i < model.size(); ++i) {
        auto it = in_listed.find(model[i].name);
        if (it == in_listed.end()) {
            out.push_back("the model's parameter '" + model[i].name + "' is missing");
            continue;
        }
        const Parameter& s = listed[it->second];
        if (s.shape != model[i].shape)
            out.push_back("'" + model[i].name + "' has shape " + io::shape_text(s.shape) + ", the model's is " +
                          io::shape_text(model[i].shape));
        if (it->second != i)
            out.push_back("'" + model[i].name + "' is parameter " + std::to_string(it->second) + " in the schedule but " +
                          std::to_string(i) + " in the model");
    }
    for (const auto& s : listed)
        if (!in_model.count(s.name)) out.push_back("it lists '" + s.name + "', which the model does not have");
    return out;
}

std::string misfit_message(const std::string& path, const std::string& what, const std::vector<std::string>& problems) {
    std::string message = path + " does not fit this " + what + ": ";
    for (size_t i = 0; i < problems.size(); ++i)
        message += (i ? "; " : "") + ("(" + std::to_string(i + 1) + ") ") + problems[i];
    return message;
}

void check_parameters(const std::string& path, const std::vector<Parameter>& model,
                      const std::vector<Parameter>& listed) {
    const std::vector<std::string> problems = parameter_mismatches(model, listed);
    if (!problems.empty()) throw UsageError(misfit_message(path, "model", problems));
}

}  // namespace acc::plan
