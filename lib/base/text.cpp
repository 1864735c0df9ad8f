#include "base/text.hpp"

#include <cmath>
#include <cstdio>

namespace acc {

std::string with_commas(std::int64_t value) {
    std::string digits = std::to_string(value < 0 ? -value : value);
    std::string out;
    int count = 0;
    for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
        if (count > 0 && count % 3 == 0) out.insert(out.begin(), ',');
        out.insert(out.begin(), *it);
        ++count;
    }
    return value < 0 ? "-" + out : out;
}

std::string si_count(double value) {
    static const char* suffix[] = {"", " k", " M", " G", " T"};
    int index = 0;
    double scaled = value;
    while (std::fabs(scaled) >= 1000.0 && index < 4) {
        scaled /= 1000.0;
        ++index;
    }
    char buffer[64];
    if (index == 0 && scaled == std::floor(scaled))
        std::snprintf(buffer, sizeof buffer, "%.0f", scaled);
    else
        std::snprintf(buffer, sizeof buffer, "%.3g%s", scaled, suffix[index]);
    return buffer;
}

std::string join(const std::vector<std::string>& items, const std::string& separator) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += separator;
        out += items[i];
    }
    return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
    std::vector<std::string> fields;
    std::string current;
    for (char c : text) {
        if (c == separator) {
            fields.push_back(current);
            current.clear();
        } else {
            current += c;
        }
    }
    fields.push_back(current);
    return fields;
}

std::string command_line(int argc, const char* const* argv) {
    std::string out;
    for (int i = 0; i < argc; ++i) {
        std::string arg = argv[i];
        if (i) out += ' ';
        bool plain = !arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
        if (plain) {
            out += arg;
        } else {
            out += '\'';
            for (char c : arg) {
                if (c == '\'')
                    out += "'\\''";
                else
                    out += c;
            }
            out += '\'';
        }
    }
    return out;
}

std::string short_number(double value, int digits) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    return buffer;
}

std::string printf_text(const char* format, double value) {
    char buffer[128];
    std::snprintf(buffer, sizeof buffer, format, value);
    return buffer;
}

std::string percent_text(double fraction) { return printf_text("%.1f%%", 100.0 * fraction); }

std::string bytes_text(double bytes) {
    const char* unit[] = {"B", "kB", "MB", "GB", "TB"};
    int i = 0;
    while (bytes >= 1000 && i < 4) {
        bytes /= 1000;
        ++i;
    }
    return printf_text(i == 0 ? "%.0f" : "%.3g", bytes) + " " + unit[i];
}

}  // namespace acc
