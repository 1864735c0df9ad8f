#include "app/data_parallel.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/json.hpp"
#include "comm/process_group.hpp"

#include <spdlog/spdlog.h>

#include <cmath>
#include <optional>

namespace acc::app {

std::string epoch_line(const EpochSummary& s, bool text) {
    std::string line = "epoch " + std::to_string(s.epoch) + " (" + std::to_string(s.epoch + 1) + "/" +
                       std::to_string(s.epochs) + "): loss " + printf_text("%.4f", s.loss) + ", accuracy " +
                       percent_text(s.accuracy);
    if (!std::isnan(s.test_loss)) {
        line += ", test loss " + printf_text("%.4f", s.test_loss) + ", test accuracy " + percent_text(s.test_accuracy);
        if (text) line += ", perplexity " + printf_text("%.2f", std::exp(s.test_loss));
    }
    return line + ", lr " + short_number(s.lr) + ", batch " + std::to_string(s.batch_size);
}

nlohmann::json epoch_json(const EpochSummary& s, bool text) {
    nlohmann::json j = {{"epoch", s.epoch},
                        {"lr", s.lr},
                        {"loss", cli::json_number(s.loss)},
                        {"accuracy", cli::json_number(s.accuracy)},
                        {"test_loss", cli::json_number(s.test_loss)},
                        {"test_accuracy", cli::json_number(s.test_accuracy)},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"batch_size", s.batch_size},
                        {"seconds", s.seconds}};
    if (text) j["perplexity"] = cli::json_number(std::exp(s.test_loss));
    return j;
}

std::vector<SameRunSetting> same_run_settings(const train::CheckpointInfo& info, const train::TrainConfig& t,
                                              int world, bool compare_batch_size) {
    std::vector<SameRunSetting> settings = {{"--model", info.model, t.model},
                                            {"--dataset", info.dataset, t.data.name},
                                            {"--seed", std::to_string(info.seed), std::to_string(t.seed)},
                                            {"world size", std::to_string(info.world_size), std::to_string(world)}};
    if (compare_batch_size)
        settings.push_back({"--batch-size", std::to_string(info.batch_size), std::to_string(t.batch_size)});
    return settings;
}

DataParallelRank::DataParallelRank(const train::TrainConfig& t, comm::ProcessGroupCollectives* pg)
    : t_(t), pg_(pg), session_(pg, pg ? pg->device() : torch::Device(torch::kCPU)) {}

DataParallelRank::~DataParallelRank() = default;

void DataParallelRank::build(const std::function<void(const train::Dataset&)>& opened) {
    if (!t_.trace.empty() && session_.leader()) trace::check_destination(t_.trace);  // before any work
    data_ = train::open_dataset(t_.data, t_.seed);
    text_ = data_->info().shape.input.empty();
    if (opened) opened(*data_);
    train::TrainerOptions options = train::trainer_options(t_);
    if (pg_ && t_.device == acc::Device::cuda)
        options.device = comm::rank_gpu(pg_->rank(), pg_->local_rank(), pg_->backend());
    train::seed_generators(t_.seed, options.device);
    std::optional<Doing> building(std::in_place, "building the model (--model " + t_.model + ")");
    model_ = train::make_model(t_.model, data_->info().shape, t_.model_options);
    trainer_ = std::make_unique<train::Trainer>(model_, *data_, options, train::Shard{session_.rank(), session_.world()});
    tensors_ = trainer_->parameter_tensors();
}

std::vector<torch::Tensor> DataParallelRank::weights() const {
    std::vector<torch::Tensor> out = tensors_;
    for (const auto& b : model_->buffers()) out.push_back(b);
    return out;
}

void DataParallelRank::start_from_leader() {
    session_.broadcast_from_leader(tensors_);
    session_.broadcast_from_leader(model_->buffers());
}

train::CheckpointInfo DataParallelRank::load_checkpoint(
    const std::string& path, const std::string& settings,
    const std::function<std::vector<SameRunSetting>(const train::CheckpointInfo&)>& same, train::TensorMap& extra) {
    const std::vector<std::uint8_t> image = session_.checkpoint_image(path);
    // Other model options would fail the load with a message about shapes: compare them first.
    check_same_run(path, recorded_options(image, path), settings, {});
    const train::CheckpointInfo saved = trainer_->load_checkpoint_image(image, path, &extra);
    check_same_run(path, extra.count("run/options") ? tensor_text(extra.at("run/options")) : "", settings,
                   same(saved));
    check_counters(path, saved, extra);
    const std::string done = std::to_string(saved.epoch);
    if (saved.epoch > t_.epochs)
        throw UsageError("--epochs " + std::to_string(t_.epochs) + ": " + path + " is from a run that has completed " +
                         done + " epochs; give --epochs " + done + " or more to continue it");
    if (saved.epoch == t_.epochs && session_.leader())
        spdlog::warn("nothing to train: {} is from a run that has completed all {} epochs; give --epochs above {} "
                     "to train further",
                     path, done, done);
    return saved;
}

// The epoch and step counters are attributes, which carry no checksum: each
// completed epoch's steps, a checksummed dataset, must add up to them.
void DataParallelRank::check_counters(const std::string& path, const train::CheckpointInfo& saved,
                                      const train::TensorMap& extra) {
    epoch_steps_.clear();
    auto it = extra.find("run/epoch_steps");
    if (it == extra.end()) {
        if (saved.checksummed)
            throw FileError(path, "/extra/run/epoch_steps is missing; every checkpoint of this format holds it");
        // Format 1.0: nothing to cross-check with; the steps spread over the epochs.
        for (std::int64_t e = 0; e < saved.epoch; ++e)
            epoch_steps_.push_back(saved.global_step / saved.epoch + (e + 1 == saved.epoch ? saved.global_step % saved.epoch : 0));
        return;
    }
    const torch::Tensor steps = it->second.to(torch::kLong).contiguous();
    if (steps.dim() != 1 || steps.size(0) != saved.epoch)
        throw FileError(path, "epoch " + std::to_string(saved.epoch) + " but /extra/run/epoch_steps holds " +
                                  std::to_string(steps.numel()) + " epochs; the file is damaged");
    std::int64_t total = 0;
    for (std::int64_t e = 0; e < steps.size(0); ++e) {
        const std::int64_t n = steps[e].item<std::int64_t>();
        if (n < 1 || n > (std::int64_t{1} << 40))
            throw FileError(path, "/extra/run/epoch_steps holds " + std::to_string(n) + " steps for epoch " +
                                      std::to_string(e) + "; the file is damaged");
        total += n;
        epoch_steps_.push_back(n);
    }
    if (total != saved.global_step)
        throw FileError(path, "global_step " + std::to_string(saved.global_step) + " but its " +
                                  std::to_string(saved.epoch) + " completed epochs took " + std::to_string(total) +
                                  " steps (/extra/run/epoch_steps); the file is damaged");
}

std::unique_ptr<io::AtomicPath> DataParallelRank::write_checkpoint(const std::string& path, std::int64_t epoch,
                                                                   const std::string& settings, train::TensorMap extra,
                                                                   const Provenance& provenance) {
    extra["run/options"] = text_tensor(settings);
    if (static_cast<std::int64_t>(epoch_steps_.size()) != epoch + 1)
        throw Error("internal error: " + std::to_string(epoch_steps_.size()) + " epochs counted at the end of epoch " +
                    std::to_string(epoch));
    extra["run/epoch_steps"] = torch::tensor(epoch_steps_, torch::kLong);
    const train::CheckpointInfo saved{epoch + 1, trainer_->global_step(), t_.model,  t_.data.name,
                                      trainer_->batch_size(), session_.world(), t_.seed, provenance};
    auto target = std::make_unique<io::AtomicPath>(path);
    trainer_->write_checkpoint(*target, saved, extra);
    return target;
}

void DataParallelRank::train_epochs(std::int64_t start) {
    cli::Progress::Options options;
    options.unit = data_->info().unit;
    if (!session_.leader()) options.style = cli::Progress::Style::quiet;
    cli::Progress progress(options);
    std::int64_t steps = 0;  // at today's batch size: a batch schedule may change it
    for (std::int64_t e = start; e < t_.epochs; ++e) steps += trainer_->steps_in_epoch(e);
    progress.begin_run(steps);
    watch_traced_steps();
    for (std::int64_t epoch = start; epoch < t_.epochs; ++epoch) train_epoch(epoch, progress);
}

// --trace: rank 0 traces steps 10 to 19 of the first epoch it trains (the last ten
// of a shorter one), after the first steps have warmed caches and allocators.
void DataParallelRank::watch_traced_steps() {
    if (t_.trace.empty() || !session_.leader()) return;
    train::StepWindow window;
    window.start = [this] { trace_ = std::make_unique<trace::Trace>(t_.trace, t_.device == acc::Device::cuda); };
    window.stop = [this](std::int64_t epoch, std::int64_t first, std::int64_t last) {
        const std::size_t events = trace_->finish();
        trace_.reset();
        spdlog::info("wrote {}: epoch {}, steps {} to {} ({} events)", t_.trace, epoch, first, last - 1,
                     events);
    };
    trainer_->watch_steps(std::move(window));
}

void DataParallelRank::train_epoch(std::int64_t epoch, cli::Progress& progress) {
    Doing training("training epoch " + std::to_string(epoch));
    const EpochPlan plan = begin_epoch(epoch);
    trainer_->set_batch_size(plan.batch_size);
    progress.begin_epoch(epoch, t_.epochs, trainer_->steps_in_epoch(epoch));
    const train::EpochResult r =
        trainer_->train_epoch(epoch, plan.lr, [&](const train::StepInfo& step, double loss, std::int64_t samples) {
            on_step(step);
            progress.step(samples, loss);
        });
    progress.end_epoch();
    epoch_steps_.resize(static_cast<std::size_t>(epoch));  // those before it, as loaded or counted
    epoch_steps_.push_back(r.steps);
    if (session_.comm()) {
        // Batch-norm statistics are each rank's own: all take rank 0's (DDP's
        // broadcast_buffers), so that evaluation and the checkpoint describe one model.
        session_.broadcast_from_leader(model_->buffers());
        session_.check_same_weights(weights(), "weights", epoch, trainer_->global_step());
    }
    end_epoch(r, summarize(epoch, plan, r));
}

// Sums over the ranks (collective); a single process reports its own numbers as they are.
EpochSummary DataParallelRank::summarize(std::int64_t epoch, const EpochPlan& plan, const train::EpochResult& r) {
    EpochSummary s;
    s.epoch = epoch;
    s.epochs = t_.epochs;
    s.lr = plan.lr;
    s.batch_size = plan.batch_size * session_.world();
    s.steps = r.steps;
    s.seconds = r.seconds;
    s.loss = r.loss;
    s.accuracy = r.accuracy;
    s.samples = r.samples;
    if (session_.comm()) {
        const auto sums = session_.sum({r.loss * static_cast<double>(r.samples),
                                        r.accuracy * static_cast<double>(r.samples), static_cast<double>(r.samples)});
        s.samples = std::llround(sums[2]);
        s.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
        s.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0;
    }
    if (!train::evaluates_after(t_, epoch)) return s;
    // Each rank evaluates its part of the test split (the same weights on every rank).
    const train::EvalResult test = trainer_->evaluate(train::Shard{session_.rank(), session_.world()});
    if (!session_.comm()) {
        s.test_loss = test.loss;
        s.test_accuracy = test.accuracy;
        return s;
    }
    const auto sums = session_.sum({test.loss * static_cast<double>(test.samples),
                                    test.accuracy * static_cast<double>(test.samples), static_cast<double>(test.samples)});
    if (sums[2] > 0) {
        s.test_loss = sums[0] / sums[2];
        s.test_accuracy = sums[1] / sums[2];
    }
    return s;
}

}  // namespace acc::app
