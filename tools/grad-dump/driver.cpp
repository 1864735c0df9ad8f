#include "grad-dump/driver.hpp"

#include "app/build_info.hpp"
#include "app/data_parallel.hpp"
#include "app/training_options.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/launch.hpp"
#include "comm/process_group.hpp"
#include "compress/spec.hpp"
#include "exchange/trainer/run_sync.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "io/output.hpp"
#include "regime/plan.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/profile.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sys/stat.h>

namespace acc::app {
namespace {

using namespace acc::train;

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

std::string count_of(std::int64_t n, const std::string& singular, const std::string& plural) {
    return with_commas(n) + " " + (n == 1 ? singular : plural);
}

// Checks the options alone; files are checked by the rank that writes them.
void validate(GradDumpConfig& c) {
    train::validate(c.train);
    for (std::int64_t e : c.snapshot_epochs)
        if (e < 0 || e >= c.train.epochs)
            throw UsageError("--snapshot-epochs: epoch " + std::to_string(e) + " is not among the " +
                             std::to_string(c.train.epochs) + " epochs trained (they count from 0)");
    if (c.checkpoint.empty()) c.checkpoint = checkpoint_beside(c.output);
    check_distinct_files({}, {{"--output", c.output}, {"--checkpoint", c.checkpoint}, {"--trace", c.train.trace}});
    check_device_available(c.train.device);
}

std::int64_t total_values(const std::vector<io::Parameter>& parameters) {
    std::int64_t values = 0;
    for (const auto& p : parameters) values += p.numel();
    return values;
}

void add_snapshot(io::GradsWriter& writer, const GradientRecorder& recorder) {
    for (size_t p = 0; p < recorder.sums().size(); ++p) {
        torch::Tensor sum = recorder.sums()[p].to(torch::kCPU, torch::kFloat32).contiguous();
        writer.add_snapshot(p, std::vector<float>(sum.data_ptr<float>(), sum.data_ptr<float>() + sum.numel()));
    }
}

// The epoch's compressibility profile, from the same summed gradients a snapshot
// stores (as float32, so that a snapshot reproduces it): the spectrum of each
// matrix in PowerSGD's view, in double precision, and every parameter's Top-k tails.
void add_profile(io::GradsWriter& writer, const GradientRecorder& recorder,
                 const std::vector<io::Parameter>& parameters) {
    for (size_t p = 0; p < recorder.sums().size(); ++p) {
        plan::LayerProfile profile = train::layer_profile(recorder.sums()[p], parameters[p]);
        writer.add_profile(p, std::move(profile.spectrum), std::move(profile.tail));
    }
}

std::vector<double> profile_fractions(bool profile) {
    if (!profile) return {};
    return {regime::kTopkFractions.begin(), regime::kTopkFractions.end()};
}

// ---------------------------------------------------------------- reporting

// The summary on stderr and, with --json, on stdout; `history` holds this run's epochs.
void report(const GradDumpConfig& c, const DataInfo& info, const std::vector<io::Parameter>& parameters,
            std::int64_t start, const nlohmann::json& history, int world_size) {
    const TrainConfig& t = c.train;
    const std::int64_t values = total_values(parameters);
    spdlog::info("{}: {} of {} on {}, {} ({} values), batch {}{}, seed {}", c.output,
                 count_of(t.epochs, "epoch", "epochs"), t.model, info.name,
                 count_of(static_cast<std::int64_t>(parameters.size()), "parameter", "parameters"), with_commas(values),
                 t.batch_size, world_size > 1 ? " per rank on " + std::to_string(world_size) + " ranks" : "", t.seed);
    double seconds = 0, samples = 0;
    for (const auto& epoch : history) {
        seconds += epoch["seconds"].get<double>();
        samples += epoch["samples"].get<double>();
    }
    const std::int64_t trained = t.epochs - start;
    if (trained > 0)
        spdlog::info("  this run: {}, {} s of training, {} {}/s{}; checkpoint {}",
                     trained == 1 ? "epoch " + std::to_string(start)
                                  : "epochs " + std::to_string(start) + "-" + std::to_string(t.epochs - 1),
                     printf_text("%.1f", seconds), with_commas(std::llround(samples / std::max(seconds, 1e-9))), info.unit,
                     world_size > 1 ? " on rank 0" : "", c.checkpoint);
    else
        spdlog::info("  nothing to train: the checkpoint is already at epoch {}", start);
    if (c.json) {
        nlohmann::json summary = {{"output", c.output},
                                  {"checkpoint", c.checkpoint},
                                  {"model", t.model},
                                  {"dataset", info.name},
                                  {"parameters", parameters.size()},
                                  {"values", values},
                                  {"world_size", world_size},
                                  {"epochs", t.epochs},
                                  {"first_epoch", start},
                                  {"trained", history}};
        std::cout << summary.dump(2) << std::endl;
    }
}

// One rank's run; a single process has no group. Rank 0 (the only rank of a
// single process) records, writes the files and reports; the other ranks train
// alongside it and log their own lines at debug level only. Several ranks average
// their gradients every step: train-dist's exchange with every level none.
class DumpRank final : public DataParallelRank {
public:
    DumpRank(const GradDumpConfig& c, comm::ProcessGroupCollectives* pg);
    int run();

private:
    std::int64_t open_outputs();
    void log_run(std::int64_t start) const;
    Settings settings() const {
        Settings s;
        add_training_settings(s, t_, true);
        return s;
    }
    EpochPlan begin_epoch(std::int64_t epoch) override;
    void on_step(const StepInfo& step) override;
    void end_epoch(const EpochResult& own, const EpochSummary& all) override;

    const GradDumpConfig& c_;
    std::vector<io::OutputClaim> claims_;  // rank 0: the output and checkpoint, for the whole run
    spdlog::level::level_enum level_;  // rank 0's lines are info, the others' debug
    std::optional<GradientRecorder> recorder_;    // rank 0
    std::unique_ptr<exchange::RunSync> sync_;  // several ranks: every gradient at level none
    std::optional<io::GradsWriter> writer_;       // rank 0
    std::vector<bool> snapshot_;
};

DumpRank::DumpRank(const GradDumpConfig& c, comm::ProcessGroupCollectives* pg)
    : DataParallelRank(c.train, pg), c_(c), level_(session_.leader() ? spdlog::level::info : spdlog::level::debug) {
    session_.check_same_options(settings().ranks_text());
    // Resumed, they are inputs first: reading them says what is wrong with them.
    if (session_.leader()) claims_ = io::claim_outputs({c.output, c.checkpoint}, "grad-dump", c.force || c.resume);
    if (t_.threads > 0) torch::set_num_threads(t_.threads);
    build([&](const Dataset& data) {
        const DataInfo& info = data.info();
        spdlog::log(level_, "{}: {} training and {} test {}{}, {} {} ({})", info.name, with_commas(info.train_size),
                    with_commas(info.test_size), info.unit, text_model() ? "" : " of " + io::shape_text(info.shape.input),
                    with_commas(info.shape.classes), text_model() ? "words in the vocabulary" : "classes", info.source);
    });
    if (session_.leader()) {
        recorder_.emplace(tensors_, c.step_norms);
        trainer_->set_recorder(&*recorder_);
    }
    if (pg) {
        const std::vector<compress::Spec> none(tensors_.size(), compress::no_compression());
        sync_ = exchange::make_run_sync({}, tensors_, trainer_->parameters(), *session_.comm(), session_.device(), none);
        trainer_->set_exchange(sync_.get());
    }
}

// The first epoch to train: 0, or the checkpoint's (which every rank receives from
// rank 0); rank 0 opens the statistics file, new or the stopped run's.
std::int64_t DumpRank::open_outputs() {
    const std::vector<io::Parameter>& parameters = trainer_->parameters();
    if (!c_.resume) {
        io::RunInfo run{t_.model, t_.data.name, t_.batch_size, session_.world(), static_cast<std::int64_t>(t_.seed)};
        if (session_.leader())
            writer_.emplace(c_.output, c_.provenance, run, parameters, c_.step_norms, profile_fractions(c_.profile));
        return 0;
    }
    if (session_.leader() && !file_exists(c_.checkpoint))
        throw FileError(c_.checkpoint, "no checkpoint to resume from (one is written after every completed epoch)");
    TensorMap extra;
    const CheckpointInfo saved = load_checkpoint(c_.checkpoint, settings().resume_text(), [&](const CheckpointInfo& info) {
        return same_run_settings(info, t_, session_.world(), true);
    }, extra);
    if (session_.leader()) {
        if (!file_exists(c_.output))
            throw FileError(c_.output, "no such file; --resume continues the gradient-statistics file of the stopped run");
        writer_.emplace(io::GradsWriter::resume(c_.output, parameters, saved.epoch, c_.step_norms,
                                                profile_fractions(c_.profile)));
    }
    spdlog::log(level_, "resuming {} after epoch {} from {}", c_.output, saved.epoch - 1, c_.checkpoint);
    return saved.epoch;
}

void DumpRank::log_run(std::int64_t start) const {
    const auto& parameters = trainer_->parameters();
    spdlog::log(level_, "{}: {}, {} values; {} per epoch of {} {}{}", t_.model,
                count_of(static_cast<std::int64_t>(parameters.size()), "parameter tensor", "parameter tensors"),
                with_commas(total_values(parameters)), count_of(trainer_->steps_in_epoch(start), "step", "steps"),
                t_.batch_size, text_model() ? "streams" : data_->info().unit, pg_ ? " per rank" : "");
    if (!pg_) return;
    const std::int64_t buckets = sync_->buckets();
    spdlog::log(level_,
                "data-parallel on {} ranks ({}): gradients averaged every step ({} per rank in {} of allreduce, "
                "launched during the backward pass); rank 0 records its local gradients",
                session_.world(), comm::backend_name(pg_->backend()),
                count_of(4 * total_values(parameters), "byte", "bytes"), count_of(buckets, "bucket", "buckets"));
}

int DumpRank::run() {
    const std::int64_t start = open_outputs();
    // Every rank starts from rank 0's model, as PyTorch's DistributedDataParallel does.
    start_from_leader();
    log_run(start);
    snapshot_.assign(static_cast<size_t>(t_.epochs), false);
    for (std::int64_t e : c_.snapshot_epochs) snapshot_[static_cast<size_t>(e)] = true;
    train_epochs(start);
    if (!session_.leader()) return cli::kExitOk;
    writer_->finish();
    report(c_, data_->info(), trainer_->parameters(), start, history_, session_.world());
    return cli::kExitOk;
}

DataParallelRank::EpochPlan DumpRank::begin_epoch(std::int64_t epoch) { return {t_.schedule.at(epoch), t_.batch_size}; }

void DumpRank::on_step(const StepInfo& step) {
    if (writer_ && c_.step_norms) writer_->add_step_norms(step.global_step, recorder_->last_step_norms());
}

// The statistics file holds the recording rank's training numbers (its norms are of
// its local gradients) and the test numbers of the shared weights.
void DumpRank::end_epoch(const EpochResult& own, const EpochSummary& all) {
    if (!session_.leader()) return;
    io::EpochStats s;
    s.lr = all.lr;
    s.loss = own.loss;
    s.accuracy = own.accuracy;
    s.steps = own.steps;
    s.samples = own.samples;
    s.seconds = own.seconds;
    s.test_loss = all.test_loss;
    s.test_accuracy = all.test_accuracy;
    s.norm = recorder_->finite_norms(trainer_->parameters(), all.epoch);
    if (snapshot_[static_cast<size_t>(all.epoch)]) add_snapshot(*writer_, *recorder_);
    if (writer_->records_profile()) {
        const auto start = std::chrono::steady_clock::now();
        add_profile(*writer_, *recorder_, trainer_->parameters());
        spdlog::debug("compressibility profile of epoch {}: {} s", all.epoch,
                      printf_text("%.3f", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
    }
    // The checkpoint is written first and put in place after the epoch's row: a full
    // disk stops the epoch whole, and a run killed between the two resumes from the
    // older checkpoint and rewrites the epoch.
    const auto checkpoint = write_checkpoint(c_.checkpoint, all.epoch, settings().resume_text(), {}, c_.provenance);
    writer_->append_epoch(s);
    checkpoint->commit();
    EpochSummary mine = all;
    mine.loss = own.loss;
    mine.accuracy = own.accuracy;
    mine.samples = own.samples;
    spdlog::info("{}, {} s, {} {}/s", epoch_line(mine, text_model()), printf_text("%.1f", own.seconds),
                 with_commas(std::llround(static_cast<double>(own.samples) / std::max(own.seconds, 1e-9))),
                 data_->info().unit);
    history_.push_back(epoch_json(mine, text_model()));
}

// One rank of a run of several joins the process group first, so that anything
// that goes wrong afterwards reaches the other ranks as a reason, not as a lost peer.
int dump_rank(const GradDumpConfig& c, comm::Backend backend) {
    const comm::Rendezvous rendezvous = comm::resolve_rendezvous(c.rendezvous);
    if (rendezvous.world_size == 1) return DumpRank(c, nullptr).run();
    cli::set_log_rank(rendezvous.rank);
    auto comm = comm::ProcessGroupCollectives::join(rendezvous, backend);
    return comm::run_in_group(*comm, [&] { return DumpRank(c, comm.get()).run(); });
}

}  // namespace

int run_grad_dump(GradDumpConfig c, int argc, char** argv) {
    validate(c);
    // NCCL on GPUs, as train-dist; a build without the backend refuses several ranks before any starts.
    const comm::Backend backend = comm::run_backend(c.backend, c.train.device);
    if (c.rendezvous.nproc > 1 || comm::resolve_rendezvous(c.rendezvous).world_size > 1)
        comm::check_backend_available(backend);
    return comm::run_ranks(c.rendezvous, argc, argv, "grad-dump", [&] { return dump_rank(c, backend); });
}

}  // namespace acc::app
