#include "plan/run_plan.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "plan/parameters.hpp"
#include "regime/levels.hpp"

#include <algorithm>

namespace acc::plan {
namespace {

std::vector<bool> matrices(const std::vector<Parameter>& parameters) {
    std::vector<bool> out;
    for (const auto& p : parameters) out.push_back(p.is_matrix());
    return out;
}

}  // namespace

std::int64_t schedule_row(std::int64_t rows, std::int64_t epoch, const ScheduleEnd& end) {
    if (epoch < 0) throw Error("internal error: epoch " + std::to_string(epoch) + " of a schedule");
    if (epoch < rows) return epoch;
    if (!end.extend_last)
        throw UsageError(end.path + ": covers epochs 0-" + std::to_string(rows - 1) + ", not epoch " +
                         std::to_string(epoch) + " (" + end.hint + " repeats its last epoch)");
    return rows - 1;
}

RunPlan RunPlan::fixed(const std::vector<Parameter>& parameters, const compress::Spec& spec, std::int64_t epochs) {
    RunPlan plan;
    plan.source_ = Source::fixed;
    plan.epochs_ = epochs;
    plan.is_matrix_ = matrices(parameters);
    const std::int32_t none = regime::level_index(plan.levels_, compress::no_compression()), chosen = regime::level_index(plan.levels_, spec);
    for (bool m : plan.is_matrix_) plan.table_.push_back(m ? chosen : none);
    plan.rows_ = 1;
    return plan;
}

RunPlan RunPlan::from_schedule(const io::Schedule& s, const std::vector<compress::Spec>& levels,
                               const std::vector<Parameter>& parameters, std::int64_t epochs, ScheduleEnd end) {
    if (s.parameters.size() != parameters.size())
        throw Error("internal error: a schedule of " + std::to_string(s.parameters.size()) + " parameters for " +
                    std::to_string(parameters.size()));
    RunPlan plan;
    plan.source_ = Source::schedule;
    plan.epochs_ = epochs;
    plan.is_matrix_ = matrices(parameters);
    plan.rows_ = s.epochs;
    plan.end_ = std::move(end);
    regime::level_index(plan.levels_, compress::no_compression());
    if (s.mode == io::ScheduleMode::batch) {
        plan.batch_mode_ = true;
        plan.table_.assign(static_cast<size_t>(s.epochs) * parameters.size(), 0);
        plan.batch_ = s.batch_size;
        plan.scale_ = s.lr_scale;
        return plan;
    }
    if (levels.size() != s.levels.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " parsed levels for a schedule of " +
                    std::to_string(s.levels.size()));
    std::vector<std::int32_t> index;
    for (const auto& level : levels) index.push_back(regime::level_index(plan.levels_, level));
    for (std::int32_t l : s.level) plan.table_.push_back(index[static_cast<size_t>(l)]);
    return plan;
}

RunPlan RunPlan::accordion(const std::vector<Parameter>& parameters, const AccordionSettings& settings,
                           std::vector<double> lr, std::int64_t epochs) {
    regime::validate({settings.eta, settings.interval});
    RunPlan plan;
    plan.source_ = Source::accordion;
    plan.epochs_ = epochs;
    plan.is_matrix_ = matrices(parameters);
    plan.accordion_ = settings;
    plan.lr_ = std::move(lr);
    // The order regime::plan_compression gives: none, low, high.
    regime::level_index(plan.levels_, compress::no_compression());
    plan.low_ = regime::level_index(plan.levels_, settings.low);
    plan.high_ = regime::level_index(plan.levels_, settings.high);
    return plan;
}

RunPlan RunPlan::automatic(const std::vector<Parameter>& parameters, const AccordionSettings& settings,
                           const std::vector<compress::Spec>& candidates, std::vector<double> lr, std::int64_t epochs) {
    RunPlan plan = accordion(parameters, settings, std::move(lr), epochs);
    for (const compress::Spec& spec : candidates) regime::level_index(plan.levels_, spec);
    return plan;
}

std::int64_t RunPlan::recorded_epochs() const {
    return is_matrix_.empty() ? 0 : static_cast<std::int64_t>(norms_.size() / is_matrix_.size());
}

void RunPlan::set_learning_rate(std::int64_t epoch, double lr) {
    if (!online()) throw Error("internal error: learning rates set for a plan that is not decided online");
    const auto given = static_cast<std::int64_t>(lr_.size());
    if (epoch < 0 || epoch > given || epoch + 1 < given)
        throw Error("internal error: the learning rate of epoch " + std::to_string(epoch) + " set after " +
                    std::to_string(given) + " epochs");
    lr_.resize(static_cast<size_t>(epoch));
    lr_.push_back(lr);
}

void RunPlan::record_norms(std::int64_t epoch, const std::vector<double>& norms) {
    if (!online()) return;
    if (epoch != recorded_epochs())
        throw Error("internal error: norms of epoch " + std::to_string(epoch) + " recorded after " +
                    std::to_string(recorded_epochs()) + " epochs");
    if (norms.size() != is_matrix_.size())
        throw Error("internal error: " + std::to_string(norms.size()) + " norms for " +
                    std::to_string(is_matrix_.size()) + " parameters");
    norms_.insert(norms_.end(), norms.begin(), norms.end());
}

std::int64_t RunPlan::row_of(std::int64_t epoch) const {
    if (epoch < 0 || (epochs_ != kOpenEnded && epoch >= epochs_))
        throw Error("internal error: epoch " + std::to_string(epoch) + " outside the plan's " +
                    std::to_string(epochs_) + " epochs");
    switch (source_) {
    case Source::fixed: return 0;
    case Source::schedule: return schedule_row(rows_, epoch, end_);
    case Source::accordion: return epoch;
    }
    return epoch;
}

EpochLevels RunPlan::levels_of(std::int64_t epoch) const {
    const size_t count = is_matrix_.size();
    EpochLevels out;
    if (!online()) {
        auto first = table_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(row_of(epoch)) * count);
        out.level.assign(first, first + static_cast<std::ptrdiff_t>(count));
        return out;
    }
    row_of(epoch);
    if (recorded_epochs() < epoch || static_cast<std::int64_t>(lr_.size()) <= epoch)
        throw Error("internal error: epoch " + std::to_string(epoch) + " decided with the norms of " +
                    std::to_string(recorded_epochs()) + " epochs and " + std::to_string(lr_.size()) +
                    " learning rates");
    regime::NormTable earlier;
    earlier.epochs = epoch;
    earlier.columns = static_cast<std::int64_t>(count);
    earlier.values.assign(norms_.begin(), norms_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(epoch) * count));
    const regime::Decisions row = regime::decide_epoch(earlier, {lr_.begin(), lr_.begin() + epoch + 1},
                                                       {accordion_.eta, accordion_.interval});
    const std::int32_t index[] = {0, low_, high_};
    for (size_t p = 0; p < count; ++p) {
        out.critical.push_back(row.critical[p]);
        out.ratio.push_back(row.ratio[p]);
        out.reason.push_back(static_cast<std::int8_t>(row.reason[p]));
        out.level.push_back(index[static_cast<int>(regime::accordion_level(is_matrix_[p], row.critical[p] != 0))]);
    }
    return out;
}

std::int64_t RunPlan::global_batch(std::int64_t epoch) const {
    return batch_mode_ ? batch_.at(static_cast<size_t>(row_of(epoch))) : 0;
}

double RunPlan::lr_scale(std::int64_t epoch) const {
    return batch_mode_ ? scale_.at(static_cast<size_t>(row_of(epoch))) : 1.0;
}

std::vector<std::string> RunPlan::level_names() const {
    std::vector<std::string> out;
    for (const auto& level : levels_) out.push_back(level.text());
    return out;
}

std::vector<compress::Spec> parse_levels(const io::Schedule& s, std::vector<std::string>& problems) {
    std::vector<compress::Spec> levels;
    if (s.mode != io::ScheduleMode::compression) return levels;
    std::vector<std::string> seen;
    for (const auto& level : s.levels) {
        try {
            levels.push_back(compress::parse_spec(level));
        } catch (const UsageError&) {
            problems.push_back("its level '" + level + "' is not a compressor spec");
            continue;
        }
        const std::string text = levels.back().text();
        if (std::find(seen.begin(), seen.end(), text) != seen.end())
            problems.push_back("its /levels lists " + text + " twice");
        seen.push_back(text);
    }
    if (levels.size() != s.levels.size()) return levels;
    if (!levels.empty() && !(levels.front() == compress::no_compression()))
        problems.push_back("its /levels starts with " + levels.front().text() + ", not none (none comes first)");
    // A vector parameter is always sent whole, as with --compress: a schedule that gives
    // one a compressor would record a level that was never sent.
    std::vector<std::string> vectors;
    const size_t count = s.parameters.size();
    for (size_t i = 0; i < s.level.size() && count > 0; ++i) {
        const compress::Spec& level = levels.at(static_cast<size_t>(s.level[i]));
        if (s.parameters[i % count].is_matrix() || level == compress::no_compression()) continue;
        vectors.push_back(level.text() + " for '" + s.parameters[i % count].name + "' in epoch " +
                          std::to_string(i / count));
    }
    if (!vectors.empty())
        problems.push_back("it gives vector parameters, which are always sent whole, a compressor (" +
                           join(std::vector<std::string>(vectors.begin(),
                                                         vectors.begin() + static_cast<std::ptrdiff_t>(
                                                                               std::min<size_t>(vectors.size(), 3))),
                                ", ") +
                           (vectors.size() > 3 ? ", and " + std::to_string(vectors.size() - 3) + " more" : "") + ")");
    return levels;
}

std::vector<compress::Spec> check_schedule(const io::Schedule& s, const std::string& path,
                                           const std::vector<Parameter>& parameters, std::int64_t epochs,
                                           bool extend_last, int world_size, bool batch_size_given) {
    std::vector<std::string> problems = parameter_mismatches(parameters, s.parameters);
    if (s.epochs < epochs && !extend_last)
        problems.push_back("it covers " + std::to_string(s.epochs) + (s.epochs == 1 ? " epoch" : " epochs") +
                           ", --epochs is " + std::to_string(epochs) +
                           " (--schedule-extend last repeats its last epoch)");
    const std::vector<compress::Spec> levels = parse_levels(s, problems);
    if (s.mode == io::ScheduleMode::batch) {
        if (batch_size_given)
            problems.push_back("it is a batch schedule, which sets the batch size of every epoch: leave out --batch-size");
        std::vector<std::string> uneven;
        for (std::int64_t e = 0; e < std::min(s.epochs, epochs); ++e) {
            const std::int64_t b = s.batch_size[static_cast<size_t>(e)];
            if (b % world_size != 0 || b / world_size < 1)
                uneven.push_back("epoch " + std::to_string(e) + ": " + std::to_string(b));
        }
        if (!uneven.empty()) {
            const size_t shown = std::min<size_t>(uneven.size(), 3);
            problems.push_back(
                "its global batch size does not split evenly over " + std::to_string(world_size) +
                (world_size == 1 ? " rank" : " ranks") + " in " + std::to_string(uneven.size()) +
                (uneven.size() == 1 ? " epoch" : " epochs") + " (" +
                join(std::vector<std::string>(uneven.begin(), uneven.begin() + static_cast<std::ptrdiff_t>(shown)), ", ") +
                (uneven.size() > shown ? ", ..." : "") + ")");
        }
    }
    if (problems.empty()) return levels;
    throw UsageError(misfit_message(path, "run", problems));
}

std::vector<std::int64_t> critical_epochs(const io::Schedule& s) {
    const size_t count = s.parameters.size();
    std::vector<bool> counted;
    for (const auto& p : s.parameters) counted.push_back(s.mode == io::ScheduleMode::batch || p.is_matrix());
    std::vector<std::int64_t> out;
    for (std::int64_t e = 0; e < s.epochs; ++e)
        for (size_t p = 0; p < count; ++p)
            if (counted[p] && s.critical[s.at(e, p)]) {
                out.push_back(e);
                break;
            }
    return out;
}

std::string levels_summary(const std::vector<compress::Spec>& levels, const std::vector<std::int32_t>& level) {
    std::vector<std::int64_t> counts(levels.size(), 0);
    for (auto l : level) ++counts.at(static_cast<size_t>(l));
    std::vector<std::string> parts;
    for (size_t i = 0; i < counts.size(); ++i)
        if (counts[i] > 0) parts.push_back(levels[i].text() + " x" + std::to_string(counts[i]));
    return join(parts, ", ");
}

}  // namespace acc::plan
