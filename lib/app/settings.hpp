// A program's settings as one table: each setting's value as printed, whether
// every rank must have the same, and whether a resumed run must have the value
// its checkpoint recorded. The ranks' check, the resume check and a checkpoint's
// "run/options" all read it, so that a setting is listed once and none is
// compared by one check and forgotten by another. No LibTorch here.
#pragma once

#include <string>
#include <vector>

namespace acc::app {

struct Setting {
    std::string name;    ///< "--lr", or a name that is no option ("levels")
    std::string value;   ///< as "run/options" and the resume check's messages print it
    bool ranks = true;   ///< every rank must have the same value
    bool resume = true;  ///< a resumed run must have the value its checkpoint recorded
};

class Settings {
public:
    void add(std::string name, std::string value, bool ranks, bool resume);
    const std::vector<Setting>& rows() const { return rows_; }

    /// What the ranks compare (app::check_same_settings): every setting they must share.
    std::string ranks_text() const;
    /// A checkpoint's "run/options": "NAME VALUE" per line for every setting a resume must
    /// match, in the table's order (train::changed_settings compares two of them).
    std::string resume_text() const;

private:
    std::vector<Setting> rows_;
};

/// A number as the settings print it: %.12g, so that a value that changes at all
/// shows as changed.
std::string setting_number(double value);
/// A flag as the settings print it: on or off.
inline const char* setting_flag(bool on) { return on ? "on" : "off"; }

}  // namespace acc::app
