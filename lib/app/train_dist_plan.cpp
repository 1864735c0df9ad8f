#include "app/train_dist_plan.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "compress/spec.hpp"

#include <algorithm>
#include <map>

namespace acc::app {
namespace {

std::vector<bool> matrices(const std::vector<io::Parameter>& parameters) {
    std::vector<bool> out;
    for (const auto& p : parameters) out.push_back(p.is_matrix());
    return out;
}

std::int32_t index_in(std::vector<compress::Spec>& levels, const compress::Spec& level) {
    auto it = std::find(levels.begin(), levels.end(), level);
    if (it != levels.end()) return static_cast<std::int32_t>(it - levels.begin());
    levels.push_back(level);
    return static_cast<std::int32_t>(levels.size() - 1);
}

// Every way the schedule's parameters differ from the model's, one phrase each.
std::vector<std::string> parameter_mismatches(const std::vector<io::Parameter>& model,
                                              const std::vector<io::Parameter>& schedule) {
    std::vector<std::string> out;
    if (model.size() != schedule.size())
        out.push_back("it lists " + std::to_string(schedule.size()) + " parameters, the model has " +
                      std::to_string(model.size()));
    std::map<std::string, size_t> in_schedule, in_model;
    for (size_t i = 0; i < schedule.size(); ++i) in_schedule[schedule[i].name] = i;
    for (size_t i = 0; i < model.size(); ++i) in_model[model[i].name] = i;
    for (size_t i = 0; i < model.size(); ++i) {
        auto it = in_schedule.find(model[i].name);
        if (it == in_schedule.end()) {
            out.push_back("the model's parameter '" + model[i].name + "' is missing");
            continue;
        }
        const io::Parameter& s = schedule[it->second];
        if (s.shape != model[i].shape)
            out.push_back("'" + model[i].name + "' has shape " + io::shape_text(s.shape) + ", the model's is " +
                          io::shape_text(model[i].shape));
        if (it->second != i)
            out.push_back("'" + model[i].name + "' is parameter " + std::to_string(it->second) +
                          " in the schedule but " + std::to_string(i) + " in the model");
    }
    for (const auto& s : schedule)
        if (!in_model.count(s.name)) out.push_back("it lists '" + s.name + "', which the model does not have");
    return out;
}

}  // namespace

RunPlan RunPlan::fixed(const std::vector<io::Parameter>& parameters, const compress::Spec& spec, std::int64_t epochs) {
    RunPlan plan;
    plan.epochs_ = epochs;
    plan.is_matrix_ = matrices(parameters);
    const std::int32_t none = index_in(plan.levels_, compress::no_compression()), chosen = index_in(plan.levels_, spec);
    std::vector<std::int32_t> row;
    for (bool m : plan.is_matrix_) row.push_back(m ? chosen : none);
    for (std::int64_t e = 0; e < epochs; ++e) plan.table_.insert(plan.table_.end(), row.begin(), row.end());
    return plan;
}

RunPlan RunPlan::from_schedule(const io::Schedule& s, const std::vector<compress::Spec>& levels,
                               const std::vector<io::Parameter>& parameters, std::int64_t epochs) {
    RunPlan plan;
    plan.epochs_ = epochs;
    plan.is_matrix_ = matrices(parameters);
    const size_t count = parameters.size();
    index_in(plan.levels_, compress::no_compression());
    auto row_of = [&](std::int64_t e) { return std::min(e, s.epochs - 1); };
    if (s.mode == "batch") {
        plan.batch_mode_ = true;
        plan.table_.assign(static_cast<size_t>(epochs) * count, 0);
        for (std::int64_t e = 0; e < epochs; ++e) {
            plan.batch_.push_back(s.batch_size[static_cast<size_t>(row_of(e))]);
            plan.scale_.push_back(s.lr_scale[static_cast<size_t>(row_of(e))]);
        }
        return plan;
    }
    if (levels.size() != s.levels.size())
        throw Error("internal error: " + std::to_string(levels.size()) + " parsed levels for a schedule of " +
                    std::to_string(s.levels.size()));
    std::vector<std::int32_t> index;
    for (const auto& level : levels) index.push_back(index_in(plan.levels_, level));
    for (std::int64_t e = 0; e < epochs; ++e)
        for (size_t p = 0; p < count; ++p)
            plan.table_.push_back(index[static_cast<size_t>(s.level[s.at(row_of(e), p)])]);
    return plan;
}

RunPlan RunPlan::accordion(const std::vector<io::Parameter>& parameters, const AccordionConfig& config,
                           std::vector<double> lr) {
    RunPlan plan;
    plan.epochs_ = static_cast<std::int64_t>(lr.size());
    plan.is_matrix_ = matrices(parameters);
    plan.online_ = true;
    plan.accordion_ = config;
    plan.lr_ = std::move(lr);
    // The order regime::plan_compression gives: none, low, high.
    index_in(plan.levels_, compress::no_compression());
    plan.low_ = index_in(plan.levels_, config.low);
    plan.high_ = index_in(plan.levels_, config.high);
    return plan;
}

std::int64_t RunPlan::recorded_epochs() const {
    return is_matrix_.empty() ? 0 : static_cast<std::int64_t>(norms_.size() / is_matrix_.size());
}

void RunPlan::record_norms(std::int64_t epoch, const std::vector<double>& norms) {
    if (!online_) return;
    if (epoch != recorded_epochs())
        throw Error("internal error: norms of epoch " + std::to_string(epoch) + " recorded after " +
                    std::to_string(recorded_epochs()) + " epochs");
    if (norms.size() != is_matrix_.size())
        throw Error("internal error: " + std::to_string(norms.size()) + " norms for " +
                    std::to_string(is_matrix_.size()) + " parameters");
    norms_.insert(norms_.end(), norms.begin(), norms.end());
}

EpochLevels RunPlan::levels_of(std::int64_t epoch) const {
    if (epoch < 0 || epoch >= epochs_)
        throw Error("internal error: epoch " + std::to_string(epoch) + " outside the plan's " +
                    std::to_string(epochs_) + " epochs");
    const size_t count = is_matrix_.size();
    EpochLevels out;
    if (!online_) {
        auto first = table_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(epoch) * count);
        out.level.assign(first, first + static_cast<std::ptrdiff_t>(count));
        return out;
    }
    if (recorded_epochs() < epoch)
        throw Error("internal error: epoch " + std::to_string(epoch) + " decided with the norms of only " +
                    std::to_string(recorded_epochs()) + " epochs");
    regime::NormTable earlier;
    earlier.epochs = epoch;
    earlier.columns = static_cast<std::int64_t>(count);
    earlier.values.assign(norms_.begin(), norms_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(epoch) * count));
    const regime::Decisions row = regime::decide_epoch(earlier, {lr_.begin(), lr_.begin() + epoch + 1},
                                                       {accordion_.eta, accordion_.interval});
    for (size_t p = 0; p < count; ++p) {
        out.critical.push_back(row.critical[p]);
        out.ratio.push_back(row.ratio[p]);
        out.reason.push_back(static_cast<std::int8_t>(row.reason[p]));
        // regime::plan_compression's rule: none on vectors, low where critical, high elsewhere.
        out.level.push_back(!is_matrix_[p] ? 0 : row.critical[p] ? low_ : high_);
    }
    return out;
}

std::int64_t RunPlan::global_batch(std::int64_t epoch) const {
    return batch_mode_ ? batch_.at(static_cast<size_t>(epoch)) : 0;
}

double RunPlan::lr_scale(std::int64_t epoch) const { return batch_mode_ ? scale_.at(static_cast<size_t>(epoch)) : 1.0; }

std::vector<compress::Spec> check_schedule(const io::Schedule& s, const std::string& path,
                                           const std::vector<io::Parameter>& parameters, std::int64_t epochs,
                                           bool extend_last, int world_size, bool batch_size_given) {
    std::vector<compress::Spec> levels;
    std::vector<std::string> problems = parameter_mismatches(parameters, s.parameters);
    if (s.epochs < epochs && !extend_last)
        problems.push_back("it covers " + std::to_string(s.epochs) + (s.epochs == 1 ? " epoch" : " epochs") +
                           ", --epochs is " + std::to_string(epochs) +
                           " (--schedule-extend last repeats its last epoch)");
    if (s.mode == "compression") {
        for (const auto& level : s.levels) {
            try {
                levels.push_back(compress::parse_spec(level));
            } catch (const UsageError&) {
                problems.push_back("its level '" + level + "' is not a compressor spec");
            }
        }
    } else if (s.mode == "batch") {
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
    } else {
        problems.push_back("its mode is '" + s.mode + "'; train-dist replays 'compression' and 'batch' schedules");
    }
    if (problems.empty()) return levels;
    std::string message = path + " does not fit this run: ";
    for (size_t i = 0; i < problems.size(); ++i)
        message += (i ? "; " : "") + ("(" + std::to_string(i + 1) + ") ") + problems[i];
    throw UsageError(message);
}

std::vector<std::string> RunPlan::level_names() const {
    std::vector<std::string> out;
    for (const auto& level : levels_) out.push_back(level.text());
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

}  // namespace acc::app
