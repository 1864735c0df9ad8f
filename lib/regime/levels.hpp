// Turning critical-regime decisions into a schedule: a compression level per
// epoch and parameter, or a batch size per epoch. Pure functions, no I/O.
#pragma once

#include "compress/spec.hpp"
#include "regime/detect.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::regime {

/// Which of Accordion's levels a parameter gets in an epoch.
enum class AccordionLevel { none, low, high };

/// Accordion's level rule, the one place it is stated: a parameter that is not a
/// matrix (a bias, a normalization weight) is sent whole (none), as in the reference
/// implementation; a matrix gets `low` where its regime is critical, `high` elsewhere.
AccordionLevel accordion_level(bool is_matrix, bool critical);

/// The index of `level` in `levels`, appended if it is not there yet: a run's list of
/// distinct levels, in the order they are first met.
std::int32_t level_index(std::vector<compress::Spec>& levels, const compress::Spec& level);

/// Level per epoch and parameter, as an index into `levels`.
struct CompressionPlan {
    std::vector<compress::Spec> levels;  ///< distinct: none, then low, then high
    std::vector<std::int32_t> level;   ///< epochs x parameters, epoch-major
};

/// Each parameter's level by accordion_level.
CompressionPlan plan_compression(const Decisions& decisions, const std::vector<bool>& is_matrix,
                                 const compress::Spec& low, const compress::Spec& high);

struct BatchPlan {
    std::vector<std::int64_t> batch_size;  ///< per epoch
    std::vector<double> lr_scale;          ///< per epoch: batch_size / low
};

/// Whole-model decisions (one column): critical epochs train with the `low`
/// (small) batch, the others with `high`. With `monotone`, once the batch has
/// grown it never shrinks again (paper, Appendix A).
BatchPlan plan_batch(const Decisions& decisions, std::int64_t low, std::int64_t high, bool monotone);

}  // namespace acc::regime
