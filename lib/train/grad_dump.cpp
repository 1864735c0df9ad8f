#include "train/grad_dump.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "cli/progress.hpp"
#include "io/atomic.hpp"
#include "io/grads.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <sys/stat.h>

namespace acc::train {
namespace {

bool file_exists(const std::string& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
}

std::string count_of(std::int64_t n, const std::string& singular, const std::string& plural) {
    return with_commas(n) + " " + (n == 1 ? singular : plural);
}

std::string percent(double fraction) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.1f%%", 100.0 * fraction);
    return buffer;
}

std::string fixed(double value, int decimals) {
    char buffer[48];
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
    return buffer;
}

void validate(GradDumpConfig& c) {
    train::validate(c.train);
    for (std::int64_t e : c.snapshot_epochs)
        if (e < 0 || e >= c.train.epochs)
            throw UsageError("--snapshot-epochs: epoch " + std::to_string(e) + " is not among the " +
                             std::to_string(c.train.epochs) + " epochs trained (they count from 0)");
    if (c.checkpoint.empty()) c.checkpoint = default_checkpoint_path(c.output);
    if (c.checkpoint == c.output) throw UsageError("--checkpoint: must differ from the output file " + c.output);
    io::check_writable_destination(c.output);
    io::check_writable_destination(c.checkpoint);
    if (c.train.device == "cuda" && !torch::cuda::is_available())
        throw UsageError("--device cuda: no CUDA device is available to this build of LibTorch");
}

// A resumed run must be the same run: the checkpoint says what it was.
void check_same_run(const std::string& path, const CheckpointInfo& info, const GradDumpConfig& c) {
    auto differs = [&](const std::string& option, const std::string& then, const std::string& now) {
        if (then != now)
            throw UsageError("--resume: " + path + " is from a run with " + option + " " + then + ", not " + now +
                             "; resume with the options of the original run");
    };
    differs("--model", info.model, c.train.model);
    differs("--dataset", info.dataset, c.train.data.name);
    differs("--batch-size", std::to_string(info.batch_size), std::to_string(c.train.batch_size));
    differs("--seed", std::to_string(info.seed), std::to_string(c.train.seed));
    differs("world size", std::to_string(info.world_size), "1");
}

std::string epoch_line(std::int64_t epoch, std::int64_t epochs, const io::EpochStats& s, bool text,
                       const std::string& unit) {
    std::string line = "epoch " + std::to_string(epoch) + " (" + std::to_string(epoch + 1) + "/" +
                       std::to_string(epochs) + "): lr " + short_number(s.lr) + ", loss " + fixed(s.loss, 4) +
                       ", accuracy " + percent(s.accuracy);
    if (!std::isnan(s.test_loss)) {
        line += ", test loss " + fixed(s.test_loss, 4) + ", test accuracy " + percent(s.test_accuracy);
        if (text) line += ", perplexity " + fixed(std::exp(s.test_loss), 2);
    }
    line += ", " + fixed(s.seconds, 1) + " s, " +
            with_commas(std::llround(static_cast<double>(s.samples) / std::max(s.seconds, 1e-9))) + " " + unit + "/s";
    return line;
}

nlohmann::json epoch_json(std::int64_t epoch, const io::EpochStats& s, bool text) {
    auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    nlohmann::json j = {{"epoch", epoch},
                        {"lr", s.lr},
                        {"loss", number(s.loss)},
                        {"accuracy", number(s.accuracy)},
                        {"test_loss", number(s.test_loss)},
                        {"test_accuracy", number(s.test_accuracy)},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"seconds", s.seconds}};
    if (text) j["perplexity"] = number(std::exp(s.test_loss));
    return j;
}

std::int64_t total_values(const std::vector<io::Parameter>& parameters) {
    std::int64_t values = 0;
    for (const auto& p : parameters) values += p.numel();
    return values;
}

// Per parameter, the norm of the epoch's summed gradient; a NaN or infinite one ends the run.
std::vector<double> finite_norms(const GradientRecorder& recorder, const std::vector<io::Parameter>& parameters,
                                 std::int64_t epoch) {
    std::vector<double> norms = recorder.norms();
    for (size_t p = 0; p < norms.size(); ++p)
        if (!std::isfinite(norms[p]))
            throw Error("training diverged: the summed gradient of '" + parameters[p].name + "' has norm " +
                        (std::isnan(norms[p]) ? "NaN" : "infinity") + " at epoch " + std::to_string(epoch) +
                        " (try a lower --lr or --clip-norm)");
    return norms;
}

void add_snapshot(io::GradsWriter& writer, const GradientRecorder& recorder) {
    for (size_t p = 0; p < recorder.sums().size(); ++p) {
        torch::Tensor sum = recorder.sums()[p].to(torch::kCPU, torch::kFloat32).contiguous();
        writer.add_snapshot(p, std::vector<float>(sum.data_ptr<float>(), sum.data_ptr<float>() + sum.numel()));
    }
}

// The summary on stderr and, with --json, on stdout; `history` holds this run's epochs.
void report(const GradDumpConfig& c, const DataInfo& info, const std::vector<io::Parameter>& parameters,
            std::int64_t start, const nlohmann::json& history) {
    const TrainConfig& t = c.train;
    const std::int64_t values = total_values(parameters);
    spdlog::info("{}: {} of {} on {}, {} ({} values), batch {}, seed {}", c.output,
                 count_of(t.epochs, "epoch", "epochs"), t.model, info.name,
                 count_of(static_cast<std::int64_t>(parameters.size()), "parameter", "parameters"), with_commas(values),
                 t.batch_size, t.seed);
    double seconds = 0, samples = 0;
    for (const auto& epoch : history) {
        seconds += epoch["seconds"].get<double>();
        samples += epoch["samples"].get<double>();
    }
    const std::int64_t trained = t.epochs - start;
    if (trained > 0)
        spdlog::info("  this run: {}, {} s of training, {} {}/s; checkpoint {}",
                     trained == 1 ? "epoch " + std::to_string(start)
                                  : "epochs " + std::to_string(start) + "-" + std::to_string(t.epochs - 1),
                     fixed(seconds, 1), with_commas(std::llround(samples / std::max(seconds, 1e-9))), info.unit,
                     c.checkpoint);
    else
        spdlog::info("  nothing to train: the checkpoint is already at epoch {}", start);
    if (c.json) {
        nlohmann::json summary = {{"output", c.output},
                                  {"checkpoint", c.checkpoint},
                                  {"model", t.model},
                                  {"dataset", info.name},
                                  {"parameters", parameters.size()},
                                  {"values", values},
                                  {"epochs", t.epochs},
                                  {"first_epoch", start},
                                  {"trained", history}};
        std::cout << summary.dump(2) << std::endl;
    }
}

}  // namespace

std::string default_checkpoint_path(const std::string& output) {
    const std::string suffix = ".h5";
    if (output.size() > suffix.size() && output.compare(output.size() - suffix.size(), suffix.size(), suffix) == 0)
        return output.substr(0, output.size() - suffix.size()) + ".ckpt.h5";
    return output + ".ckpt.h5";
}

int run_grad_dump(GradDumpConfig c) {
    validate(c);
    const TrainConfig& t = c.train;
    if (t.threads > 0) torch::set_num_threads(t.threads);

    auto data = open_dataset(t.data, t.seed);
    const DataInfo& info = data->info();
    const bool text = info.shape.input.empty();
    spdlog::info("{}: {} training and {} test {}{}, {} {} ({})", info.name, with_commas(info.train_size),
                 with_commas(info.test_size), info.unit, text ? "" : " of " + io::shape_text(info.shape.input),
                 with_commas(info.shape.classes), text ? "words in the vocabulary" : "classes", info.source);

    torch::manual_seed(t.seed);
    auto model = make_model(t.model, info.shape, t.model_options);
    // One process: rank 0 of 1 and no exchange. A data-parallel run takes its
    // rank and world size from the process group (lib/comm), sets an exchange
    // that aggregates the gradients, and records rank 0's local gradients.
    Trainer trainer(model, *data, trainer_options(t), Shard{0, 1});
    GradientRecorder recorder(trainer.parameter_tensors(), c.step_norms);
    trainer.set_recorder(&recorder);
    const auto& parameters = trainer.parameters();
    const std::int64_t values = total_values(parameters);

    std::int64_t start = 0;
    std::optional<io::GradsWriter> writer;
    if (c.resume) {
        if (!file_exists(c.checkpoint))
            throw FileError(c.checkpoint, "no checkpoint to resume from (one is written after every completed epoch)");
        CheckpointInfo saved = trainer.load_checkpoint(c.checkpoint);
        check_same_run(c.checkpoint, saved, c);
        if (!file_exists(c.output))
            throw FileError(c.output, "no such file; --resume continues the gradient-statistics file of the stopped run");
        start = saved.epoch;
        writer.emplace(io::GradsWriter::resume(c.output, parameters, start, c.step_norms));
        spdlog::info("resuming {} after epoch {} from {}", c.output, start - 1, c.checkpoint);
    } else {
        io::RunInfo run{t.model, t.data.name, t.batch_size, 1, static_cast<std::int64_t>(t.seed)};
        writer.emplace(c.output, c.provenance, run, parameters, c.step_norms);
    }
    spdlog::info("{}: {}, {} values; {} per epoch of {} {}", t.model,
                 count_of(static_cast<std::int64_t>(parameters.size()), "parameter tensor", "parameter tensors"),
                 with_commas(values), count_of(trainer.steps_in_epoch(start), "step", "steps"), t.batch_size,
                 text ? "streams" : info.unit);

    std::vector<bool> snapshot(static_cast<size_t>(t.epochs), false);
    for (std::int64_t e : c.snapshot_epochs) snapshot[static_cast<size_t>(e)] = true;

    cli::Progress::Options progress_options;
    progress_options.unit = info.unit;
    cli::Progress progress(progress_options);
    std::int64_t total_steps = 0;
    for (std::int64_t e = start; e < t.epochs; ++e) total_steps += trainer.steps_in_epoch(e);
    progress.begin_run(total_steps);

    nlohmann::json history = nlohmann::json::array();
    for (std::int64_t epoch = start; epoch < t.epochs; ++epoch) {
        const double lr = t.schedule.at(epoch);
        progress.begin_epoch(epoch, t.epochs, trainer.steps_in_epoch(epoch));
        EpochResult r = trainer.train_epoch(epoch, lr, [&](const StepInfo& step, double loss, std::int64_t samples) {
            if (c.step_norms) writer->add_step_norms(step.global_step, recorder.last_step_norms());
            progress.step(samples, loss);
        });
        progress.end_epoch();

        io::EpochStats s;
        s.lr = lr;
        s.loss = r.loss;
        s.accuracy = r.accuracy;
        s.steps = r.steps;
        s.samples = r.samples;
        s.seconds = r.seconds;
        s.norm = finite_norms(recorder, parameters, epoch);
        if (evaluates_after(t, epoch)) {
            EvalResult test = trainer.evaluate();
            s.test_loss = test.loss;
            s.test_accuracy = test.accuracy;
        }
        if (snapshot[static_cast<size_t>(epoch)]) add_snapshot(*writer, recorder);
        // The epoch goes into the statistics file before the checkpoint: a run killed
        // between the two resumes from the older checkpoint and rewrites the epoch.
        writer->append_epoch(s);
        CheckpointInfo saved{epoch + 1, trainer.global_step(), t.model, t.data.name, t.batch_size, 1,
                             t.seed,    c.provenance};
        trainer.save_checkpoint(c.checkpoint, saved);
        spdlog::info("{}", epoch_line(epoch, t.epochs, s, text, info.unit));
        history.push_back(epoch_json(epoch, s, text));
    }
    writer->finish();

    report(c, info, parameters, start, history);
    return 0;
}

}  // namespace acc::train
