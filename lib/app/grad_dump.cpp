#include "app/grad_dump.hpp"

#include "app/rank_session.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/launch.hpp"
#include "comm/process_group.hpp"
#include "compress/exchange.hpp"
#include "io/atomic.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
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
    if (c.checkpoint.empty()) c.checkpoint = default_checkpoint_path(c.output);
    check_distinct_files({}, {{"--output", c.output}, {"--checkpoint", c.checkpoint}});
    if (c.train.device == acc::Device::cuda && !torch::cuda::is_available())
        throw UsageError("--device cuda: no CUDA device is available to this build of LibTorch");
}

void check_destinations(const GradDumpConfig& c) {
    create_parent_directories(c.output);
    create_parent_directories(c.checkpoint);
    io::check_writable_destination(c.output);
    io::check_writable_destination(c.checkpoint);
}

// What a checkpoint records of the options, as text in a tensor of bytes.
const char* const kOptionsEntry = "run/options";

// What a resumed run must share with the checkpoint's run beyond the recorded options.
std::vector<SameRunSetting> same_run_settings(const CheckpointInfo& info, const GradDumpConfig& c, int world_size) {
    return {{"--model", info.model, c.train.model},
            {"--dataset", info.dataset, c.train.data.name},
            {"--batch-size", std::to_string(info.batch_size), std::to_string(c.train.batch_size)},
            {"--seed", std::to_string(info.seed), std::to_string(c.train.seed)},
            {"world size", std::to_string(info.world_size), std::to_string(world_size)}};
}

std::string epoch_line(std::int64_t epoch, std::int64_t epochs, const io::EpochStats& s, bool text,
                       const std::string& unit) {
    std::string line = "epoch " + std::to_string(epoch) + " (" + std::to_string(epoch + 1) + "/" +
                       std::to_string(epochs) + "): lr " + short_number(s.lr) + ", loss " + printf_text("%.4f", s.loss) +
                       ", accuracy " + percent_text(s.accuracy);
    if (!std::isnan(s.test_loss)) {
        line += ", test loss " + printf_text("%.4f", s.test_loss) + ", test accuracy " + percent_text(s.test_accuracy);
        if (text) line += ", perplexity " + printf_text("%.2f", std::exp(s.test_loss));
    }
    line += ", " + printf_text("%.1f", s.seconds) + " s, " +
            with_commas(std::llround(static_cast<double>(s.samples) / std::max(s.seconds, 1e-9))) + " " + unit + "/s";
    return line;
}

nlohmann::json epoch_json(std::int64_t epoch, const io::EpochStats& s, bool text) {
    nlohmann::json j = {{"epoch", epoch},
                        {"lr", s.lr},
                        {"loss", cli::json_number(s.loss)},
                        {"accuracy", cli::json_number(s.accuracy)},
                        {"test_loss", cli::json_number(s.test_loss)},
                        {"test_accuracy", cli::json_number(s.test_accuracy)},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"seconds", s.seconds}};
    if (text) j["perplexity"] = cli::json_number(std::exp(s.test_loss));
    return j;
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

// ---------------------------------------------------------------- several ranks

// The trainer's exchange hook: every tensor at level `none`, that is one averaged
// fp32 allreduce of all gradients per step (compress::GradientExchange).
class AveragingExchange final : public GradientSync {
public:
    AveragingExchange(const std::vector<io::Parameter>& parameters, comm::Collectives& comm)
        : exchange_(parameters, std::vector<compress::Spec>(parameters.size(), compress::parse_spec("none")),
                    comm) {}
    void exchange(std::vector<torch::Tensor>& gradients, const StepInfo&) override { exchange_.step(gradients); }
    void save_state(TensorMap& state) const override {
        for (auto& [name, tensor] : exchange_.state()) state[name] = tensor;
    }
    void load_state(const TensorMap& state) override {
        std::vector<std::pair<std::string, at::Tensor>> entries;
        for (const auto& [name, tensor] : state) entries.emplace_back(name, tensor.cpu());
        exchange_.load_state(entries);
    }
    /// Bytes each rank hands to collectives per step.
    std::int64_t bytes_per_step() const {
        std::int64_t bytes = 0;
        for (const auto& c : exchange_.planned_collectives()) bytes += c.bytes;
        return bytes;
    }

private:
    compress::GradientExchange exchange_;
};

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
// alongside it and log their own lines at debug level only.
class DumpRank {
public:
    DumpRank(const GradDumpConfig& c, comm::ProcessGroupCollectives* comm);
    int run();

private:
    std::int64_t open_outputs();
    void log_run(std::int64_t start) const;
    void train_epoch(std::int64_t epoch, cli::Progress& progress);
    std::vector<torch::Tensor> weights() const;

    const GradDumpConfig& c_;
    const TrainConfig& t_;
    comm::ProcessGroupCollectives* comm_;
    RankSession session_;
    spdlog::level::level_enum level_;  // rank 0's lines are info, the others' debug
    std::unique_ptr<Dataset> data_;
    bool text_ = false;
    std::shared_ptr<Model> model_;
    std::unique_ptr<Trainer> trainer_;
    std::optional<GradientRecorder> recorder_;  // rank 0
    std::optional<AveragingExchange> exchange_;  // several ranks
    std::optional<io::GradsWriter> writer_;      // rank 0
    std::vector<bool> snapshot_;
    nlohmann::json history_ = nlohmann::json::array();
};

DumpRank::DumpRank(const GradDumpConfig& c, comm::ProcessGroupCollectives* comm)
    : c_(c), t_(c.train), comm_(comm), session_(comm), level_(session_.leader() ? spdlog::level::info : spdlog::level::debug) {
    if (session_.leader()) check_destinations(c);
    if (t_.threads > 0) torch::set_num_threads(t_.threads);
    data_ = open_dataset(t_.data, t_.seed);
    const DataInfo& info = data_->info();
    text_ = info.shape.input.empty();
    spdlog::log(level_, "{}: {} training and {} test {}{}, {} {} ({})", info.name, with_commas(info.train_size),
                with_commas(info.test_size), info.unit, text_ ? "" : " of " + io::shape_text(info.shape.input),
                with_commas(info.shape.classes), text_ ? "words in the vocabulary" : "classes", info.source);

    torch::manual_seed(t_.seed);
    std::optional<Doing> building(std::in_place, "building the model (--model " + t_.model + ")");
    model_ = make_model(t_.model, info.shape, t_.model_options);
    TrainerOptions options = trainer_options(t_);
    // One GPU per NCCL rank (Gloo ranks may share), checked as train-dist and comm-profile do.
    if (comm && t_.device == acc::Device::cuda)
        options.device = comm::rank_gpu(comm->rank(), comm->local_rank(), comm->backend());
    trainer_ = std::make_unique<Trainer>(model_, *data_, options, Shard{session_.rank(), session_.world()});
    building.reset();
    if (session_.leader()) {
        recorder_.emplace(trainer_->parameter_tensors(), c.step_norms);
        trainer_->set_recorder(&*recorder_);
    }
    if (comm) {
        exchange_.emplace(trainer_->parameters(), *comm);
        trainer_->set_exchange(&*exchange_);
    }
}

// Parameters and buffers: what every rank must share.
std::vector<torch::Tensor> DumpRank::weights() const {
    std::vector<torch::Tensor> out = model_->parameters();
    for (const auto& b : model_->buffers()) out.push_back(b);
    return out;
}

// The first epoch to train: 0, or the checkpoint's (which every rank receives from
// rank 0); rank 0 opens the statistics file, new or the stopped run's.
std::int64_t DumpRank::open_outputs() {
    const std::vector<io::Parameter>& parameters = trainer_->parameters();
    if (!c_.resume) {
        io::RunInfo run{t_.model, t_.data.name, t_.batch_size, session_.world(), static_cast<std::int64_t>(t_.seed)};
        if (session_.leader()) writer_.emplace(c_.output, c_.provenance, run, parameters, c_.step_norms);
        return 0;
    }
    if (session_.leader() && !file_exists(c_.checkpoint))
        throw FileError(c_.checkpoint, "no checkpoint to resume from (one is written after every completed epoch)");
    const std::vector<std::uint8_t> image = session_.checkpoint_image(c_.checkpoint);
    const std::string settings = resume_settings(t_);
    check_same_run(c_.checkpoint, recorded_options(image, c_.checkpoint), settings, {});  // before the weights
    TensorMap extra;
    const CheckpointInfo saved = trainer_->load_checkpoint_image(image, c_.checkpoint, &extra);
    check_same_run(c_.checkpoint, extra.count(kOptionsEntry) ? tensor_text(extra.at(kOptionsEntry)) : "", settings,
                   same_run_settings(saved, c_, session_.world()));
    if (session_.leader()) {
        if (!file_exists(c_.output))
            throw FileError(c_.output, "no such file; --resume continues the gradient-statistics file of the stopped run");
        writer_.emplace(io::GradsWriter::resume(c_.output, parameters, saved.epoch, c_.step_norms));
    }
    spdlog::log(level_, "resuming {} after epoch {} from {}", c_.output, saved.epoch - 1, c_.checkpoint);
    return saved.epoch;
}

void DumpRank::log_run(std::int64_t start) const {
    const auto& parameters = trainer_->parameters();
    spdlog::log(level_, "{}: {}, {} values; {} per epoch of {} {}{}", t_.model,
                count_of(static_cast<std::int64_t>(parameters.size()), "parameter tensor", "parameter tensors"),
                with_commas(total_values(parameters)), count_of(trainer_->steps_in_epoch(start), "step", "steps"),
                t_.batch_size, text_ ? "streams" : data_->info().unit, comm_ ? " per rank" : "");
    if (comm_)
        spdlog::log(level_,
                    "data-parallel on {} ranks ({}): gradients averaged every step ({} per rank in one allreduce); "
                    "rank 0 records its local gradients",
                    session_.world(), comm::backend_name(comm_->backend()),
                    count_of(exchange_->bytes_per_step(), "byte", "bytes"));
}

int DumpRank::run() {
    const std::int64_t start = open_outputs();
    // Every rank starts from rank 0's model, as PyTorch's DistributedDataParallel does.
    session_.broadcast_from_leader(trainer_->parameter_tensors());
    session_.broadcast_from_leader(model_->buffers());
    log_run(start);
    snapshot_.assign(static_cast<size_t>(t_.epochs), false);
    for (std::int64_t e : c_.snapshot_epochs) snapshot_[static_cast<size_t>(e)] = true;

    cli::Progress::Options progress_options;
    progress_options.unit = data_->info().unit;
    if (!session_.leader()) progress_options.style = cli::Progress::Style::quiet;
    cli::Progress progress(progress_options);
    std::int64_t total_steps = 0;
    for (std::int64_t e = start; e < t_.epochs; ++e) total_steps += trainer_->steps_in_epoch(e);
    progress.begin_run(total_steps);
    for (std::int64_t epoch = start; epoch < t_.epochs; ++epoch) train_epoch(epoch, progress);
    if (!session_.leader()) return cli::kExitOk;
    writer_->finish();
    report(c_, data_->info(), trainer_->parameters(), start, history_, session_.world());
    return cli::kExitOk;
}

void DumpRank::train_epoch(std::int64_t epoch, cli::Progress& progress) {
    Doing training("training epoch " + std::to_string(epoch));
    const double lr = t_.schedule.at(epoch);
    progress.begin_epoch(epoch, t_.epochs, trainer_->steps_in_epoch(epoch));
    EpochResult r = trainer_->train_epoch(epoch, lr, [&](const StepInfo& step, double loss, std::int64_t samples) {
        if (writer_ && c_.step_norms) writer_->add_step_norms(step.global_step, recorder_->last_step_norms());
        progress.step(samples, loss);
    });
    progress.end_epoch();
    if (comm_) {
        // Batch-norm statistics are each rank's own: all take rank 0's (DDP's broadcast_buffers).
        session_.broadcast_from_leader(model_->buffers());
        session_.check_same_weights(weights(), "weights", epoch, trainer_->global_step());
    }

    io::EpochStats s;
    s.lr = lr;
    s.loss = r.loss;
    s.accuracy = r.accuracy;
    s.steps = r.steps;
    s.samples = r.samples;
    s.seconds = r.seconds;
    if (recorder_) s.norm = recorder_->finite_norms(trainer_->parameters(), epoch);
    // Every rank evaluates (on the same weights), so that none waits on rank 0 longer than a step.
    if (evaluates_after(t_, epoch)) {
        EvalResult test = trainer_->evaluate();
        s.test_loss = test.loss;
        s.test_accuracy = test.accuracy;
    }
    if (!session_.leader()) return;
    if (snapshot_[static_cast<size_t>(epoch)]) add_snapshot(*writer_, *recorder_);
    // The epoch goes into the statistics file before the checkpoint: a run killed
    // between the two resumes from the older checkpoint and rewrites the epoch.
    writer_->append_epoch(s);
    CheckpointInfo saved{epoch + 1, trainer_->global_step(), t_.model, t_.data.name, t_.batch_size, session_.world(),
                         t_.seed,   c_.provenance};
    trainer_->save_checkpoint(c_.checkpoint, saved, {{kOptionsEntry, text_tensor(resume_settings(t_))}});
    spdlog::info("{}", epoch_line(epoch, t_.epochs, s, text_, data_->info().unit));
    history_.push_back(epoch_json(epoch, s, text_));
}

// One rank of a run of several joins the process group first, so that anything
// that goes wrong afterwards reaches the other ranks as a reason, not as a lost peer.
int dump_rank(const GradDumpConfig& c) {
    const comm::Rendezvous rendezvous = comm::resolve_rendezvous(c.rendezvous);
    if (rendezvous.world_size == 1) return DumpRank(c, nullptr).run();
    cli::set_log_rank(rendezvous.rank);
    // Gloo also with --device cuda: the exchange averages the gradients in host memory.
    auto comm = comm::ProcessGroupCollectives::join(rendezvous, comm::Backend::gloo);
    return comm::run_in_group(*comm, [&] { return DumpRank(c, comm.get()).run(); });
}

}  // namespace

std::string default_checkpoint_path(const std::string& output) {
    const std::string suffix = ".h5";
    if (output.size() > suffix.size() && output.compare(output.size() - suffix.size(), suffix.size(), suffix) == 0)
        return output.substr(0, output.size() - suffix.size()) + ".ckpt.h5";
    return output + ".ckpt.h5";
}

int run_grad_dump(GradDumpConfig c, int argc, char** argv) {
    validate(c);
    // Several ranks exchange over Gloo: a build without it refuses them before any starts.
    if (c.rendezvous.nproc > 1 || comm::resolve_rendezvous(c.rendezvous).world_size > 1)
        comm::check_backend_available(comm::Backend::gloo);
    return comm::run_ranks(c.rendezvous, argc, argv, "grad-dump", [&] { return dump_rank(c); });
}

}  // namespace acc::app
