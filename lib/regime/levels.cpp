#include "regime/levels.hpp"

#include "base/error.hpp"

#include <algorithm>

namespace acc::regime {

std::int32_t level_index(std::vector<compress::Spec>& levels, const compress::Spec& level) {
    auto it = std::find(levels.begin(), levels.end(), level);
    if (it != levels.end()) return static_cast<std::int32_t>(it - levels.begin());
    levels.push_back(level);
    return static_cast<std::int32_t>(levels.size() - 1);
}

AccordionLevel accordion_level(bool is_matrix, bool critical) {
    return !is_matrix ? AccordionLevel::none : critical ? AccordionLevel::low : AccordionLevel::high;
}

CompressionPlan plan_compression(const Decisions& decisions, const std::vector<bool>& is_matrix,
                                 const compress::Spec& low, const compress::Spec& high) {
    if (static_cast<std::int64_t>(is_matrix.size()) != decisions.columns)
        throw Error("internal error: " + std::to_string(is_matrix.size()) + " parameters but " +
                    std::to_string(decisions.columns) + " decision columns");
    CompressionPlan plan;
    // Indexed by AccordionLevel.
    const std::int32_t index[] = {level_index(plan.levels, compress::no_compression()), level_index(plan.levels, low),
                                  level_index(plan.levels, high)};
    plan.level.resize(decisions.critical.size());
    for (std::int64_t e = 0; e < decisions.epochs; ++e) {
        for (std::int64_t p = 0; p < decisions.columns; ++p) {
            size_t i = decisions.at(e, p);
            plan.level[i] = index[static_cast<int>(accordion_level(is_matrix[static_cast<size_t>(p)], decisions.critical[i] != 0))];
        }
    }
    return plan;
}

BatchPlan plan_batch(const Decisions& decisions, std::int64_t low, std::int64_t high, bool monotone) {
    if (decisions.columns != 1) throw Error("internal error: batch plans need whole-model decisions");
    if (low < 1 || high < 1) throw UsageError("batch sizes must be at least 1");
    BatchPlan plan;
    bool grown = false;
    for (std::int64_t e = 0; e < decisions.epochs; ++e) {
        bool small = decisions.critical[static_cast<size_t>(e)] && !(monotone && grown);
        std::int64_t batch = small ? low : high;
        grown = grown || batch > low;
        plan.batch_size.push_back(batch);
        plan.lr_scale.push_back(static_cast<double>(batch) / static_cast<double>(low));
    }
    return plan;
}

}  // namespace acc::regime
