// Small text helpers for messages and summaries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace acc {

/// "11,173,962": an integer with thousands separators.
std::string with_commas(std::int64_t value);

/// "12.3 M", "4.56 k": a count with an SI suffix and three significant digits.
std::string si_count(double value);

/// Joins items with a separator.
std::string join(const std::vector<std::string>& items, const std::string& separator);

/// Splits on a single character; empty fields are kept.
std::vector<std::string> split(const std::string& text, char separator);

/// The command line as one shell-readable string (arguments with spaces are quoted).
std::string command_line(int argc, const char* const* argv);

/// Formats a double with up to `digits` significant digits, without trailing zeros.
std::string short_number(double value, int digits = 4);

/// One number through a printf format with a single double conversion: ("%.3f ms", 1.5) -> "1.500 ms".
std::string printf_text(const char* format, double value);

/// "12.5%": a fraction as a percentage with one decimal.
std::string percent_text(double fraction);

/// "12.3 MB", "512 B": bytes in decimal units (B, kB, MB, GB, TB) with three significant
/// digits, whole bytes below 1 kB.
std::string bytes_text(double bytes);

}  // namespace acc
