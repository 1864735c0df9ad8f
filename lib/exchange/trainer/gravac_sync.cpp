#include "exchange/trainer/gravac_sync.hpp"

#include "base/error.hpp"

namespace acc::exchange {
namespace {

// The exchange's tensors: the parameters' names and shapes.
std::vector<compress::TensorInfo> tensor_infos(const std::vector<torch::Tensor>& parameters,
                                               const std::vector<io::Parameter>& description) {
    if (description.size() != parameters.size())
        throw Error("internal error: " + std::to_string(description.size()) + " descriptions for " +
                    std::to_string(parameters.size()) + " parameters");
    std::vector<compress::TensorInfo> out;
    for (size_t i = 0; i < parameters.size(); ++i) out.push_back({description[i].name, parameters[i].sizes().vec()});
    return out;
}

}  // namespace

GravacSync::GravacSync(const std::vector<torch::Tensor>& parameters, const std::vector<io::Parameter>& description,
                       comm::Collectives& comm, torch::Device device, GravacExchangeOptions options)
    : exchange_(std::make_unique<GravacExchange>(tensor_infos(parameters, description), comm, device,
                                                           std::move(options))) {}

void GravacSync::exchange(std::vector<torch::Tensor>& gradients, const train::StepInfo& step) {
    GravacStepInfo info;
    info.epoch = step.epoch;
    info.samples = step.samples;
    info.started = step.started;
    exchange_->exchange(gradients, info);
}

SyncRecord GravacSync::take_record(std::int64_t epoch) {
    return {exchange_->take_steps(), exchange_->throughput(epoch)};
}

}  // namespace acc::exchange
