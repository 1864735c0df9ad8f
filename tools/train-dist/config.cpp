// GraVAC's settings for a run of train-dist.
#include "train-dist/config.hpp"

namespace acc::app {

regime::GravacSettings gravac_settings(const TrainDistConfig& c, std::int64_t world_size) {
    regime::GravacSettings s = c.gravac_settings;
    if (s.smoothing == 0) s.smoothing = regime::gravac_smoothing(world_size);
    return s;
}

}  // namespace acc::app
