// One rank of a data-parallel run, as grad-dump and train-dist share it: the
// small collectives of host values that keep the ranks in step, the check that
// every rank was started with the same options, rank 0's weights to all, the
// per-epoch weight checksum, and resuming from rank 0's checkpoint, which every
// rank receives as bytes (other ranks may run on machines that cannot see it).
// It lives with the drivers: it ties comm, train and io together for a run,
// which no area does.
#pragma once

#include "comm/collectives.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::app {

class RankSession {
public:
    /// `comm` (null: a single process, whose collectives are the identity); `device`
    /// is where the backend wants tensors (NCCL: the GPU); host values are staged there.
    explicit RankSession(comm::Collectives* comm, torch::Device device = torch::kCPU);
    ~RankSession();

    int rank() const { return rank_; }
    int world() const { return world_; }
    bool leader() const { return rank_ == 0; }
    /// The group's collectives as joined, and the device they take tensors on; null on a single process.
    comm::Collectives* comm() { return comm_; }
    torch::Device device() const { return device_; }
    /// Host collectives over the group; null on a single process.
    comm::Collectives* host() { return host_.get() ? host_.get() : comm_; }

    /// Ranks that disagree on the run would train different models, or hang: throws
    /// UsageError on every rank when another rank's `settings` differ from rank 0's.
    void check_same_options(const std::string& settings);

    /// Rank 0's tensors into every rank's, as DistributedDataParallel starts.
    void broadcast_from_leader(const std::vector<torch::Tensor>& tensors);
    /// Data-parallel training keeps one model: every rank must hold rank 0's
    /// `weights` after `epoch`. Logs their checksum at debug level as "rank R:
    /// `what` after epoch E (step S): checksum X"; throws acc::Error if they differ.
    void check_same_weights(const std::vector<torch::Tensor>& weights, const std::string& what, std::int64_t epoch,
                            std::int64_t step);

    /// Sums over the ranks, rank 0's values, and every rank's value.
    std::vector<double> sum(const std::vector<double>& values);
    std::vector<double> broadcast(std::vector<double> values, size_t count);
    std::vector<std::int32_t> broadcast(std::vector<std::int32_t> values, size_t count);
    std::vector<std::int64_t> gather(std::int64_t value);
    /// Rank 0's text on every rank.
    std::string broadcast(const std::string& text);

    /// The checkpoint to resume from, as rank 0 read it from `path`, on every rank.
    std::vector<std::uint8_t> checkpoint_image(const std::string& path);

private:
    comm::Collectives* comm_;
    torch::Device device_;
    std::unique_ptr<comm::Collectives> host_;  // staged to the backend's device; null on the host
    int rank_ = 0, world_ = 1;
};

/// Text in a tensor of bytes (a checkpoint's "run/options"), and back.
torch::Tensor text_tensor(const std::string& text);
std::string tensor_text(const torch::Tensor& tensor);

/// What a checkpoint image recorded of the options ("run/options"), read before its
/// weights: other model options would otherwise fail the load with a message about
/// shapes. Empty when it has none or cannot be read (loading it then says why).
std::string recorded_options(const std::vector<std::uint8_t>& image, const std::string& path);

/// One setting a resumed run must share with the run that wrote the checkpoint.
struct SameRunSetting {
    std::string what;  ///< "--model", "world size"
    std::string then, now;
};

/// Throws UsageError when the options a checkpoint recorded (`recorded`, "" for
/// checkpoints that recorded none) differ from `now`, or when any of `settings` differs.
void check_same_run(const std::string& path, const std::string& recorded, const std::string& now,
                    const std::vector<SameRunSetting>& settings);

}  // namespace acc::app
