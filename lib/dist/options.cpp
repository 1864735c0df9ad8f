// GraVAC's settings for a run of train-dist.
#include "dist/config.hpp"

namespace acc::dist {

regime::GravacSettings gravac_settings(const TrainDistConfig& c, std::int64_t world_size) {
    regime::GravacSettings s = c.gravac_settings;
    if (s.smoothing == 0) s.smoothing = regime::gravac_smoothing(world_size);
    return s;
}

}  // namespace acc::dist
