#include "io/schedule.hpp"
#include "io/h5.hpp"

#include "base/choice.hpp"
#include "base/text.hpp"

#include <cmath>

namespace acc::io {
namespace {

// The code of Reason::first_interval (lib/regime), the only reason that comes without a ratio.
constexpr int kFirstIntervalReason = 2;

const char* kReasonLegend =
    "0: rate of change below eta (not critical); 1: rate of change at or above eta; 2: first interval; "
    "3: previous norm was zero; 4: learning rate decayed";

}  // namespace

const std::vector<std::string>& schedule_mode_names() {
    static const std::vector<std::string> names{"compression", "batch"};
    return names;
}

const std::string& schedule_mode_name(ScheduleMode mode) { return choice_name(schedule_mode_names(), mode); }

ScheduleMode parse_schedule_mode(const std::string& text, const std::string& option) {
    return parse_choice<ScheduleMode>(schedule_mode_names(), text, option);
}

void write_schedule(const std::string& path, const Schedule& s) {
    write_file(path, s.header, kScheduleFormat, kScheduleMajor, kScheduleMinor, [&](H5File& f) {
        f.write_attr("/", "mode", schedule_mode_name(s.mode));
        f.write_attr("/", "detector", s.detector);
        f.write_attr("/", "eta", s.eta);
        f.write_attr("/", "interval", s.interval);
        f.write_attr("/", "granularity", s.granularity);
        f.write_attr("/", "low", s.low);
        f.write_attr("/", "high", s.high);
        f.write_attr("/", "monotone", std::int64_t{s.monotone ? 1 : 0});
        f.write_attr("/", "source", s.source);
        write_parameters(f, s.parameters);
        const Dims table{static_cast<hsize_t>(s.epochs), s.parameters.size()};
        const Dims column{static_cast<hsize_t>(s.epochs)};
        std::vector<std::int64_t> epoch_index(static_cast<size_t>(s.epochs));
        for (size_t e = 0; e < epoch_index.size(); ++e) epoch_index[e] = static_cast<std::int64_t>(e);
        f.write("/epochs/epoch", epoch_index, column);
        f.write("/epochs/critical", s.critical, table);
        f.write("/epochs/ratio", s.ratio, table);
        f.write("/epochs/reason", s.reason, table);
        f.write_attr("/epochs/reason", "meaning", std::string(kReasonLegend));
        if (s.mode == ScheduleMode::compression) {
            f.write_strings("/levels", s.levels);
            f.write("/epochs/level", s.level, table);
        } else {
            f.write("/epochs/batch_size", s.batch_size, column);
            f.write("/epochs/lr_scale", s.lr_scale, column);
        }
    });
}

Schedule read_schedule(const std::string& path) {
    H5File f = H5File::open(path, false);
    Schedule s;
    s.header = read_header(f, kScheduleFormat, kScheduleMajor);
    const std::string mode = f.read_attr_string("/", "mode");
    try {
        s.mode = parse_schedule_mode(mode, "mode");
    } catch (const UsageError&) {
        f.fail("mode is '" + mode + "', expected " + choice_list(schedule_mode_names()));
    }
    if (f.has_attr("/", "detector")) s.detector = f.read_attr_string("/", "detector");
    if (f.has_attr("/", "eta")) s.eta = f.read_attr_double("/", "eta");
    if (f.has_attr("/", "interval")) s.interval = f.read_attr_int("/", "interval");
    if (f.has_attr("/", "granularity")) s.granularity = f.read_attr_string("/", "granularity");
    if (f.has_attr("/", "low")) s.low = f.read_attr_string("/", "low");
    if (f.has_attr("/", "high")) s.high = f.read_attr_string("/", "high");
    if (f.has_attr("/", "monotone")) s.monotone = f.read_attr_int("/", "monotone") != 0;
    if (f.has_attr("/", "source")) s.source = f.read_attr_string("/", "source");
    s.parameters = read_parameters(f);

    Dims dims = f.shape("/epochs/critical");
    if (dims.size() != 2 || dims[1] != s.parameters.size())
        f.fail("/epochs/critical has shape " + dims_text(dims) + ", expected epochs x " +
               std::to_string(s.parameters.size()) + " (one column per parameter)");
    if (dims[0] == 0) f.fail("the schedule covers no epoch");
    s.epochs = static_cast<std::int64_t>(dims[0]);
    const Dims table = dims, column{dims[0]};
    // Optional for files written by hand; regime-detect always writes it.
    if (f.exists("/epochs/epoch")) {
        const std::vector<std::int64_t> index = f.read_shaped<std::int64_t>("/epochs/epoch", column, "one per epoch");
        for (size_t e = 0; e < index.size(); ++e)
            if (index[e] != static_cast<std::int64_t>(e))
                f.fail("/epochs/epoch row " + std::to_string(e) + " is " + std::to_string(index[e]) +
                       "; epochs must be numbered 0, 1, 2, ...");
    }
    s.critical = f.read_shaped<std::uint8_t>("/epochs/critical", table, "epochs x parameters");
    s.ratio = f.read_shaped<double>("/epochs/ratio", table, "epochs x parameters");
    s.reason = f.read_shaped<std::int8_t>("/epochs/reason", table, "epochs x parameters");
    const size_t count = s.parameters.size();
    for (size_t i = 0; i < s.critical.size(); ++i) {
        std::string where = "epoch " + std::to_string(i / count) + ", parameter '" + s.parameters[i % count].name + "'";
        if (s.critical[i] > 1) f.fail("/epochs/critical is " + std::to_string(s.critical[i]) + " at " + where + "; use 0 or 1");
        if (s.reason[i] < 0 || s.reason[i] >= kReasonCodes)
            f.fail("/epochs/reason is " + std::to_string(s.reason[i]) + " at " + where + "; valid codes are 0.." +
                   std::to_string(kReasonCodes - 1));
        if (s.ratio[i] < 0) f.fail("/epochs/ratio is negative at " + where);
        // NaN means "no earlier norm to compare with", which only the first interval lacks.
        if (std::isnan(s.ratio[i]) && s.reason[i] != kFirstIntervalReason)
            f.fail("/epochs/ratio is NaN at " + where + "; NaN is valid only in the first interval (reason " +
                   std::to_string(kFirstIntervalReason) + "), here the reason is " + std::to_string(s.reason[i]));
    }
    // A batch schedule decides for the whole model (its batch size is one per epoch), so
    // every column of an epoch holds the same decision.
    if (s.mode == ScheduleMode::batch)
        for (size_t i = 0; i < s.critical.size(); ++i)
            if (s.critical[i] != s.critical[i - i % count])
                f.fail("/epochs/critical is " + std::to_string(s.critical[i]) + " for parameter '" +
                       s.parameters[i % count].name + "' but " + std::to_string(s.critical[i - i % count]) +
                       " for '" + s.parameters[0].name + "' in epoch " + std::to_string(i / count) +
                       "; a batch schedule decides for the whole model, the same in every column");
    if (s.mode == ScheduleMode::compression) {
        s.levels = f.read_strings("/levels");
        if (s.levels.empty()) f.fail("/levels lists no level");
        s.level = f.read_shaped<std::int32_t>("/epochs/level", table, "epochs x parameters");
        for (size_t i = 0; i < s.level.size(); ++i)
            if (s.level[i] < 0 || static_cast<size_t>(s.level[i]) >= s.levels.size())
                f.fail("/epochs/level is " + std::to_string(s.level[i]) + " at epoch " + std::to_string(i / count) +
                       ", parameter '" + s.parameters[i % count].name + "', but /levels has " +
                       std::to_string(s.levels.size()) + " entries");
    } else {
        s.batch_size = f.read_shaped<std::int64_t>("/epochs/batch_size", column, "one per epoch");
        s.lr_scale = f.read_shaped<double>("/epochs/lr_scale", column, "one per epoch");
        for (std::int64_t e = 0; e < s.epochs; ++e) {
            if (s.batch_size[static_cast<size_t>(e)] < 1)
                f.fail("/epochs/batch_size is " + std::to_string(s.batch_size[static_cast<size_t>(e)]) + " at epoch " +
                       std::to_string(e) + "; it must be at least 1");
            double scale = s.lr_scale[static_cast<size_t>(e)];
            // Bounded so that the scaled learning rate still fits the float train-dist computes in.
            if (!(scale > 0 && scale <= kMaxLrScale))
                f.fail("/epochs/lr_scale is " + printf_text("%.10g", scale) + " at epoch " + std::to_string(e) +
                       "; it must be a number in (0, " + printf_text("%.10g", kMaxLrScale) + "]");
        }
    }
    return s;
}

}  // namespace acc::io
