// Moving state between ranks for checkpoints: each rank's error-feedback
// memories and compressor state gathered to rank 0, which writes the one
// checkpoint, and the checkpoint file sent to every rank on --resume.
#pragma once

#include "comm/collectives.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace acc::exchange {

/// Named tensors as one byte tensor (names, dtypes, shapes and values), and back.
/// unpack throws acc::Error on bytes that pack did not write.
torch::Tensor pack(const train::TensorMap& tensors);
train::TensorMap unpack(const torch::Tensor& bytes);

/// Every rank's `mine`, in rank order (an allgather of the packed bytes). Collective.
std::vector<train::TensorMap> gather_maps(comm::Collectives& comm, const train::TensorMap& mine);

/// Root's `bytes` on every rank (its length first, then the bytes). Collective.
std::vector<std::uint8_t> broadcast_bytes(comm::Collectives& comm, std::vector<std::uint8_t> bytes, int root);

}  // namespace acc::exchange
