// The schedule file (format accordion.schedule), written by regime-detect and
// replayed by train-dist. Layout: docs/formats.md.
#pragma once

#include "io/header.hpp"
#include "io/parameters.hpp"
#include "regime/detect.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::io {

inline constexpr const char* kScheduleFormat = "accordion.schedule";
inline constexpr int kScheduleMajor = 1;
inline constexpr int kScheduleMinor = 0;
/// Valid /epochs/reason codes are 0 .. kReasonCodes-1 (their meaning: docs/formats.md).
inline constexpr int kReasonCodes = 5;
/// Largest /epochs/lr_scale read: batch_size / low with batch sizes of at most 2^20,
/// the largest regime-detect accepts.
inline constexpr double kMaxLrScale = 1048576;

/// What a schedule switches: each parameter's compression level, or the batch size.
enum class ScheduleMode { compression, batch };
/// The modes' names as options and files spell them, in the enum's order.
const std::vector<std::string>& schedule_mode_names();
const std::string& schedule_mode_name(ScheduleMode mode);
/// `text` as a mode; UsageError "OPTION: must be compression or batch, not 'x'".
ScheduleMode parse_schedule_mode(const std::string& text, const std::string& option);

struct Schedule {
    FileHeader header;
    // How it was made (root attributes).
    ScheduleMode mode = ScheduleMode::compression;
    std::string detector = "accordion";
    double eta = regime::kDefaultEta;
    std::int64_t interval = regime::kDefaultInterval;  ///< epochs between decisions
    std::string granularity = "layer";  ///< "layer" or "model"
    std::string low;                    ///< level for critical epochs (spec or batch size)
    std::string high;                   ///< level elsewhere
    bool monotone = false;              ///< batch mode: never returns to the small batch
    std::string source;                 ///< the gradient-statistics file it was made from

    std::vector<Parameter> parameters;
    std::int64_t epochs = 0;
    // Epoch-major tables of epochs x parameters.
    std::vector<std::uint8_t> critical;
    std::vector<double> ratio;          ///< the rate of change that decided; NaN where none did
    std::vector<std::int8_t> reason;    ///< why the epoch is (not) critical
    // Compression mode.
    std::vector<std::string> levels;    ///< distinct level specs
    std::vector<std::int32_t> level;    ///< epochs x parameters, index into `levels`
    // Batch mode, one value per epoch.
    std::vector<std::int64_t> batch_size;
    std::vector<double> lr_scale;       ///< learning-rate multiplier, batch_size / low

    size_t at(std::int64_t epoch, size_t parameter) const {
        return static_cast<size_t>(epoch) * parameters.size() + parameter;
    }
    const std::string& level_of(std::int64_t epoch, size_t parameter) const {
        return levels[static_cast<size_t>(level[at(epoch, parameter)])];
    }
};

/// Writes the schedule atomically (temporary name, then rename).
void write_schedule(const std::string& path, const Schedule& schedule);
/// Reads and validates a schedule file.
Schedule read_schedule(const std::string& path);

}  // namespace acc::io
