// A setting with a few named values (an enum): its names are listed once, next to
// the enum, in the enum's order, and every spelling, check and message reads them.
#pragma once

#include "base/error.hpp"

#include <string>
#include <vector>

namespace acc {

/// "a, b or c".
inline std::string choice_list(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return out;
}

/// The enum value named `text` (names[i] names value i), or UsageError
/// "OPTION: must be a, b or c, not 'x'".
template <class Enum>
Enum parse_choice(const std::vector<std::string>& names, const std::string& text, const std::string& option) {
    for (size_t i = 0; i < names.size(); ++i)
        if (names[i] == text) return static_cast<Enum>(i);
    throw UsageError(option + ": must be " + choice_list(names) + ", not '" + text + "'");
}

/// The name of `value` in `names`.
template <class Enum>
const std::string& choice_name(const std::vector<std::string>& names, Enum value) {
    return names.at(static_cast<size_t>(value));
}

}  // namespace acc
