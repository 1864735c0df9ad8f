// The data-parallel training loop grad-dump and train-dist share: one rank's
// dataset, model and trainer, every rank starting from rank 0's weights, the
// epochs with their progress, rank 0's batch-norm statistics and the weight
// checksum after each, the epoch's numbers over all ranks, resuming from and
// writing the checkpoint, and the epoch line with its JSON. A driver derives
// from DataParallelRank and adds what its program does around the loop:
// grad-dump a recorder and the statistics file (every level `none`),
// train-dist its levels, the exchange and the metrics file.
#pragma once

#include "app/rank_session.hpp"
#include "base/provenance.hpp"
#include "cli/progress.hpp"
#include "trace/trace.hpp"
#include "train/config.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace acc::comm {
class ProcessGroupCollectives;
}

namespace acc::app {

/// One epoch's numbers over all ranks (a single process: its own).
struct EpochSummary {
    std::int64_t epoch = 0, epochs = 0;
    double lr = 0;
    std::int64_t batch_size = 0;  ///< samples per step of all ranks together
    double loss = 0;              ///< mean training loss per sample, over every rank's samples
    double accuracy = 0;          ///< fraction, over every rank's samples
    double test_loss = std::numeric_limits<double>::quiet_NaN();  ///< NaN: not evaluated after this epoch
    double test_accuracy = std::numeric_limits<double>::quiet_NaN();
    std::int64_t steps = 0;    ///< steps of each rank
    std::int64_t samples = 0;  ///< training samples of all ranks together
    double seconds = 0;        ///< wall time of the epoch's training, without evaluation
};

/// "epoch E (E+1/N): loss L, accuracy A%[, test loss T, test accuracy B%[, perplexity P]], lr X, batch B":
/// the part of the epoch line both programs print; `text`: a language model (perplexity).
std::string epoch_line(const EpochSummary& s, bool text);
/// The same as JSON: epoch, lr, loss, accuracy, test_loss, test_accuracy (null when not
/// evaluated), steps, samples, batch_size, seconds, and perplexity for a language model.
nlohmann::json epoch_json(const EpochSummary& s, bool text);

/// What a resumed run must share with the checkpoint's run beyond its recorded options:
/// model, dataset, seed, world size and, unless a batch schedule sets it, the batch size.
std::vector<SameRunSetting> same_run_settings(const train::CheckpointInfo& info, const train::TrainConfig& t,
                                              int world, bool compare_batch_size);

class DataParallelRank {
public:
    /// `pg`: the process group (null: a single process without one). The driver
    /// checks its outputs, then calls build().
    DataParallelRank(const train::TrainConfig& t, comm::ProcessGroupCollectives* pg);
    virtual ~DataParallelRank();

protected:
    /// Opens the dataset (calling `opened` with it, before the model is built) and
    /// builds the model and its trainer on this rank's device: one GPU per NCCL rank,
    /// Gloo ranks may share one.
    void build(const std::function<void(const train::Dataset&)>& opened = {});

    /// What rank 0 decided for an epoch, on every rank.
    struct EpochPlan {
        double lr = 0;
        std::int64_t batch_size = 0;  ///< per rank
    };
    /// Collective: every rank calls it before the epoch, in the same order.
    virtual EpochPlan begin_epoch(std::int64_t epoch) = 0;
    /// Every step, after the exchange, with the step's mean loss and samples.
    virtual void on_step(const train::StepInfo&) {}
    /// After the epoch's training, the weight check and the summary (collective).
    virtual void end_epoch(const train::EpochResult& own, const EpochSummary& all) = 0;

    /// Every rank takes rank 0's parameters and buffers, as DistributedDataParallel starts.
    void start_from_leader();
    /// Trains epochs [start, epochs) with a progress line on rank 0.
    void train_epochs(std::int64_t start);

    /// Rank 0 reads `path`, every rank loads it and checks it against `settings` (the
    /// options that change the numbers) and `same` (called with what the file says).
    train::CheckpointInfo load_checkpoint(
        const std::string& path, const std::string& settings,
        const std::function<std::vector<SameRunSetting>(const train::CheckpointInfo&)>& same,
        train::TensorMap& extra);
    /// Rank 0: the checkpoint after `epoch`, recording `settings` as "run/options" besides
    /// `extra`, written whole under a temporary name. The caller appends the epoch to its
    /// output, then commits the checkpoint: a disk that fills up while either is written
    /// leaves the output and the checkpoint at the same epoch, so --resume continues.
    std::unique_ptr<io::AtomicPath> write_checkpoint(const std::string& path, std::int64_t epoch,
                                                     const std::string& settings, train::TensorMap extra,
                                                     const Provenance& provenance);

    /// Parameters and buffers: what every rank must share.
    std::vector<torch::Tensor> weights() const;
    bool text_model() const { return text_; }

    const train::TrainConfig& t_;
    comm::ProcessGroupCollectives* pg_;
    RankSession session_;
    std::unique_ptr<train::Dataset> data_;
    std::shared_ptr<train::Model> model_;
    std::unique_ptr<train::Trainer> trainer_;
    std::vector<std::int64_t> epoch_steps_;  ///< steps of each completed epoch (a checkpoint's /extra/run/epoch_steps)
    std::vector<torch::Tensor> tensors_;  // the model's parameters
    nlohmann::json history_ = nlohmann::json::array();
    std::unique_ptr<trace::Trace> trace_;  // --trace, while its window of steps runs

private:
    void check_counters(const std::string& path, const train::CheckpointInfo& saved, const train::TensorMap& extra);
    void train_epoch(std::int64_t epoch, cli::Progress& progress);
    void watch_traced_steps();
    EpochSummary summarize(std::int64_t epoch, const EpochPlan& plan, const train::EpochResult& r);

    bool text_ = false;
};

}  // namespace acc::app
