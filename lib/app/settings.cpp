#include "app/settings.hpp"

#include <cstdio>
#include <utility>

namespace acc::app {

void Settings::add(std::string name, std::string value, bool ranks, bool resume) {
    rows_.push_back({std::move(name), std::move(value), ranks, resume});
}

std::string Settings::ranks_text() const {
    std::string text;
    for (const auto& row : rows_)
        if (row.ranks) text += row.name + " " + row.value + "\n";
    return text;
}

std::string Settings::resume_text() const {
    std::string text;
    for (const auto& row : rows_)
        if (row.resume) text += row.name + " " + row.value + "\n";
    return text;
}

std::string setting_number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.12g", value);
    return text;
}

}  // namespace acc::app
