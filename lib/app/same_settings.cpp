#include "app/same_settings.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"

#include <cstdint>
#include <vector>

namespace acc::app {

void check_same_settings(comm::Collectives& comm, const std::string& settings, const std::string& what,
                         const std::string& advice, const at::Device& device) {
    // FNV-1a gives the same number on every machine; one allgather gives every rank all of them.
    const auto mine = static_cast<std::int64_t>(fnv1a(settings));
    const std::vector<at::Tensor> all =
        comm.allgather(at::full({1}, mine, at::TensorOptions().dtype(at::kLong).device(device)));
    const std::int64_t reference = all[0].cpu().item<std::int64_t>();
    for (size_t other = 1; other < all.size(); ++other)
        if (all[other].cpu().item<std::int64_t>() != reference)
            throw UsageError("rank " + std::to_string(other) + " was started with other " + what + " than rank 0" +
                             advice);
}

}  // namespace acc::app
