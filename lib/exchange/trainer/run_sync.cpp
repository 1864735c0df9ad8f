#include "exchange/trainer/run_sync.hpp"

#include "exchange/trainer/bucket_sync.hpp"
#include "exchange/trainer/gravac_sync.hpp"

namespace acc::exchange {

std::unique_ptr<RunSync> make_run_sync(const SyncSettings& settings, std::vector<torch::Tensor> parameters,
                                       std::vector<io::Parameter> description, comm::Collectives& comm,
                                       torch::Device device, const std::vector<compress::Spec>& levels) {
    if (settings.gravac)
        return std::make_unique<GravacSync>(parameters, description, comm, device, *settings.gravac);
    return std::make_unique<BucketSync>(std::move(parameters), std::move(description), comm, device, settings.buckets,
                                        levels);
}

}  // namespace acc::exchange
