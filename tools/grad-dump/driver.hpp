// grad-dump's work: train a model and write the gradient-statistics file one
// epoch at a time, with a checkpoint after every epoch; on several ranks,
// data-parallel, with rank 0 recording its local gradients. main() only parses
// options into a GradDumpConfig. No LibTorch in this header.
#pragma once

#include "comm/backend.hpp"
#include "comm/rendezvous.hpp"
#include "base/provenance.hpp"
#include "train/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::app {

struct GradDumpConfig {
    train::TrainConfig train;
    std::string output = "grads.h5";            ///< gradient-statistics file (accordion.grads)
    std::string checkpoint;                     ///< empty: checkpoint_beside(output)
    bool resume = false;                        ///< continue from the checkpoint
    bool force = false;                         ///< replace an output that is read-only or not HDF5
    std::vector<std::int64_t> snapshot_epochs;  ///< epochs whose summed gradients are stored whole
    bool step_norms = false;                    ///< also store per-step, per-parameter norms
    bool profile = false;                       ///< also store each epoch's compressibility profile (/profile)
    bool json = false;                          ///< also print the summary as JSON on stdout
    comm::RendezvousConfig rendezvous;          ///< several ranks: torchrun's environment, flags or --nproc
    std::optional<comm::Backend> backend;       ///< several ranks' collectives; unset: by train.device
    Provenance provenance;
};


/// Validates (UsageError), starts --nproc local ranks if asked (re-executing
/// argv), trains, writes the files and prints the summary. With a world of
/// several ranks each trains on its shard, gradients are averaged across ranks
/// every step, and rank 0 records its raw local gradients and writes the files.
/// Returns the exit code.
int run_grad_dump(GradDumpConfig config, int argc, char** argv);

}  // namespace acc::app
