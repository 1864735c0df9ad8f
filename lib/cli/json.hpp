// What the programs' --json summaries share: JSON has no NaN or infinity, and a
// file that was not asked for reads best as null.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

namespace acc::cli {

/// The number, or null when it is NaN or infinite.
inline nlohmann::json json_number(double value) {
    return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

/// The text, or null when it is empty (e.g. the path of an output that was not written).
inline nlohmann::json json_text_or_null(const std::string& text) {
    return text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text);
}

}  // namespace acc::cli
