#include "app/grad_dump.hpp"

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
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace acc::train {
namespace {

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

torch::Tensor text_tensor(const std::string& text) {
    return torch::tensor(std::vector<std::int64_t>(text.begin(), text.end()), torch::kLong).to(torch::kUInt8);
}

std::string tensor_text(const torch::Tensor& t) {
    torch::Tensor c = t.to(torch::kCPU, torch::kUInt8).contiguous();
    return std::string(reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>()), static_cast<size_t>(c.numel()));
}

// The options a checkpoint recorded, read before its weights: other model options
// would otherwise fail the load with a message about shapes. Empty when the file
// has none (or cannot be read: loading it then says why).
std::string recorded_options(const std::string& path) {
    try {
        const io::H5File f = io::H5File::open(path, false);
        const std::string name = std::string("/extra/") + kOptionsEntry;
        if (!f.exists("/extra") || !f.exists("/extra/run") || !f.exists(name)) return "";
        const auto bytes = f.read<std::uint8_t>(name);
        return std::string(bytes.begin(), bytes.end());
    } catch (const Error&) {
        return "";
    }
}

void check_options(const std::string& path, const std::string& recorded, const GradDumpConfig& c) {
    const auto changed = changed_settings(recorded, resume_settings(c.train));
    if (!changed.empty())
        throw UsageError("--resume: " + path + " is from a run with " + join(changed, "; ") +
                         "; resume with the options of the original run");
}

// A resumed run must be the same run: the checkpoint says what it was. Checkpoints
// written before they recorded the options are checked on what CheckpointInfo holds.
void check_same_run(const std::string& path, const CheckpointInfo& info, const TensorMap& extra,
                    const GradDumpConfig& c, int world_size) {
    if (auto it = extra.find(kOptionsEntry); it != extra.end()) check_options(path, tensor_text(it->second), c);
    auto differs = [&](const std::string& option, const std::string& then, const std::string& now) {
        if (then != now)
            throw UsageError("--resume: " + path + " is from a run with " + option + " " + then + ", not " + now +
                             "; resume with the options of the original run");
    };
    differs("--model", info.model, c.train.model);
    differs("--dataset", info.dataset, c.train.data.name);
    differs("--batch-size", std::to_string(info.batch_size), std::to_string(c.train.batch_size));
    differs("--seed", std::to_string(info.seed), std::to_string(c.train.seed));
    differs("world size", std::to_string(info.world_size), std::to_string(world_size));
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

// ---------------------------------------------------------------- several ranks

// The trainer's exchange hook: every tensor at level `none`, that is one averaged
// fp32 allreduce of all gradients per step (compress::GradientExchange).
class AveragingExchange final : public GradientExchange {
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

// Copies rank 0's tensors into every rank's (through host memory: Gloo).
void broadcast_from_rank0(comm::Collectives& comm, const std::vector<torch::Tensor>& tensors) {
    torch::NoGradGuard no_grad;
    for (const auto& t : tensors) {
        at::Tensor host = t.detach().to(torch::kCPU).contiguous();
        comm.broadcast(host, 0);
        if (host.data_ptr() != t.data_ptr()) t.copy_(host);
    }
}

std::vector<torch::Tensor> buffers_of(Model& model) {
    std::vector<torch::Tensor> out;
    for (const auto& b : model.buffers()) out.push_back(b);
    return out;
}

std::string hex(std::uint64_t value) {
    char buffer[20];
    std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(value));
    return buffer;
}

// Data-parallel training keeps one model: every rank must hold rank 0's weights and buffers.
void check_same_model(comm::Collectives& comm, Model& model, std::int64_t epoch) {
    std::vector<torch::Tensor> tensors = model.parameters();
    for (const auto& b : buffers_of(model)) tensors.push_back(b);
    const std::uint64_t mine = checksum(tensors);
    spdlog::debug("weights after epoch {}: checksum {}", epoch, hex(mine));
    at::Tensor sum = at::full({1}, static_cast<std::int64_t>(mine), at::kLong);
    std::vector<at::Tensor> all = comm.allgather(sum);
    for (size_t r = 1; r < all.size(); ++r)
        if (all[r].item<std::int64_t>() != all[0].item<std::int64_t>())
            throw Error("after epoch " + std::to_string(epoch) + " rank " + std::to_string(r) +
                        " holds other weights than rank 0 (checksums " +
                        hex(static_cast<std::uint64_t>(all[r].item<std::int64_t>())) + " and " +
                        hex(static_cast<std::uint64_t>(all[0].item<std::int64_t>())) +
                        "); the ranks no longer train one model");
}

std::vector<char> read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(path, "cannot be read");
    return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A file in $TMPDIR (else /tmp) that is removed when this goes out of scope.
class TempFile {
public:
    TempFile() {
        const char* dir = std::getenv("TMPDIR");
        std::string pattern = std::string(dir && *dir ? dir : "/tmp") + "/grad-dump-XXXXXX";
        std::vector<char> name(pattern.begin(), pattern.end());
        name.push_back('\0');
        const int fd = ::mkstemp(name.data());
        if (fd < 0) throw FileError(pattern, "cannot create a temporary file for the checkpoint rank 0 sent");
        ::close(fd);
        path_ = name.data();
    }
    ~TempFile() { std::remove(path_.c_str()); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// Every rank resumes from rank 0's checkpoint. Rank 0 sends the file's bytes, since
// other ranks may run on machines that cannot see it.
CheckpointInfo load_checkpoint_from_rank0(Trainer& trainer, const std::string& path, comm::Collectives& comm,
                                          TensorMap* extra) {
    std::vector<char> bytes;
    if (comm.rank() == 0) bytes = read_bytes(path);
    at::Tensor size = at::full({1}, static_cast<std::int64_t>(bytes.size()), at::kLong);
    comm.broadcast(size, 0);
    at::Tensor data = comm.rank() == 0 ? at::from_blob(bytes.data(), {size.item<std::int64_t>()}, at::kByte)
                                       : at::empty({size.item<std::int64_t>()}, at::kByte);
    comm.broadcast(data, 0);
    if (comm.rank() == 0) return trainer.load_checkpoint(path, extra);
    TempFile copy;
    {
        std::ofstream out(copy.path(), std::ios::binary);
        out.write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.numel()));
        if (!out) throw FileError(copy.path(), "cannot write the checkpoint rank 0 sent");
    }
    try {
        return trainer.load_checkpoint(copy.path(), extra);
    } catch (const FileError& e) {
        throw FileError(path, std::string("(as rank 0 sent it) ") + e.what());
    }
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

// One rank's run; `comm` is null on a single process. Rank 0 (the only rank of a
// single process) records, writes the files and reports; the other ranks train
// alongside it and log their own lines at debug level only.
int train_rank(const GradDumpConfig& c, comm::ProcessGroupCollectives* comm) {
    const TrainConfig& t = c.train;
    const int rank = comm ? comm->rank() : 0, world_size = comm ? comm->world_size() : 1;
    const bool leader = rank == 0;
    const auto level = leader ? spdlog::level::info : spdlog::level::debug;
    if (leader) check_destinations(c);
    if (t.threads > 0) torch::set_num_threads(t.threads);

    auto data = open_dataset(t.data, t.seed);
    const DataInfo& info = data->info();
    const bool text = info.shape.input.empty();
    spdlog::log(level, "{}: {} training and {} test {}{}, {} {} ({})", info.name, with_commas(info.train_size),
                with_commas(info.test_size), info.unit, text ? "" : " of " + io::shape_text(info.shape.input),
                with_commas(info.shape.classes), text ? "words in the vocabulary" : "classes", info.source);

    torch::manual_seed(t.seed);
    std::optional<Doing> building(std::in_place, "building the model (--model " + t.model + ")");
    auto model = make_model(t.model, info.shape, t.model_options);
    TrainerOptions options = trainer_options(t);
    // One GPU per rank, checked like train-dist's and comm-profile's NCCL ranks.
    if (comm && t.device == acc::Device::cuda) options.device = comm::rank_gpu(comm->rank(), comm->local_rank());
    Trainer trainer(model, *data, options, Shard{rank, world_size});
    building.reset();
    const auto& parameters = trainer.parameters();
    const std::int64_t values = total_values(parameters);
    std::optional<GradientRecorder> recorder;
    if (leader) {
        recorder.emplace(trainer.parameter_tensors(), c.step_norms);
        trainer.set_recorder(&*recorder);
    }
    std::optional<AveragingExchange> exchange;
    if (comm) {
        exchange.emplace(parameters, *comm);
        trainer.set_exchange(&*exchange);
    }

    const torch::Tensor options_tensor = text_tensor(resume_settings(t));
    std::int64_t start = 0;
    std::optional<io::GradsWriter> writer;
    if (c.resume) {
        if (leader && !file_exists(c.checkpoint))
            throw FileError(c.checkpoint, "no checkpoint to resume from (one is written after every completed epoch)");
        if (leader) check_options(c.checkpoint, recorded_options(c.checkpoint), c);
        TensorMap extra;
        CheckpointInfo saved = comm ? load_checkpoint_from_rank0(trainer, c.checkpoint, *comm, &extra)
                                    : trainer.load_checkpoint(c.checkpoint, &extra);
        check_same_run(c.checkpoint, saved, extra, c, world_size);
        start = saved.epoch;
        if (leader) {
            if (!file_exists(c.output))
                throw FileError(c.output,
                                "no such file; --resume continues the gradient-statistics file of the stopped run");
            writer.emplace(io::GradsWriter::resume(c.output, parameters, start, c.step_norms));
        }
        spdlog::log(level, "resuming {} after epoch {} from {}", c.output, start - 1, c.checkpoint);
    } else if (leader) {
        io::RunInfo run{t.model, t.data.name, t.batch_size, world_size, static_cast<std::int64_t>(t.seed)};
        writer.emplace(c.output, c.provenance, run, parameters, c.step_norms);
    }
    // Every rank starts from rank 0's model, as PyTorch's DistributedDataParallel does.
    if (comm) {
        broadcast_from_rank0(*comm, trainer.parameter_tensors());
        broadcast_from_rank0(*comm, buffers_of(*model));
    }
    spdlog::log(level, "{}: {}, {} values; {} per epoch of {} {}{}", t.model,
                count_of(static_cast<std::int64_t>(parameters.size()), "parameter tensor", "parameter tensors"),
                with_commas(values), count_of(trainer.steps_in_epoch(start), "step", "steps"), t.batch_size,
                text ? "streams" : info.unit, comm ? " per rank" : "");
    if (comm)
        spdlog::log(level,
                    "data-parallel on {} ranks ({}): gradients averaged every step ({} per rank in one allreduce); "
                    "rank 0 records its local gradients",
                    world_size, comm::backend_name(comm->backend()),
                    count_of(exchange->bytes_per_step(), "byte", "bytes"));

    std::vector<bool> snapshot(static_cast<size_t>(t.epochs), false);
    for (std::int64_t e : c.snapshot_epochs) snapshot[static_cast<size_t>(e)] = true;

    cli::Progress::Options progress_options;
    progress_options.unit = info.unit;
    if (!leader) progress_options.style = cli::Progress::Style::quiet;
    cli::Progress progress(progress_options);
    std::int64_t total_steps = 0;
    for (std::int64_t e = start; e < t.epochs; ++e) total_steps += trainer.steps_in_epoch(e);
    progress.begin_run(total_steps);

    nlohmann::json history = nlohmann::json::array();
    for (std::int64_t epoch = start; epoch < t.epochs; ++epoch) {
        Doing training("training epoch " + std::to_string(epoch));
        const double lr = t.schedule.at(epoch);
        progress.begin_epoch(epoch, t.epochs, trainer.steps_in_epoch(epoch));
        EpochResult r = trainer.train_epoch(epoch, lr, [&](const StepInfo& step, double loss, std::int64_t samples) {
            if (writer && c.step_norms) writer->add_step_norms(step.global_step, recorder->last_step_norms());
            progress.step(samples, loss);
        });
        progress.end_epoch();
        if (comm) {
            // Batch-norm statistics are each rank's own: all take rank 0's (DDP's broadcast_buffers).
            broadcast_from_rank0(*comm, buffers_of(*model));
            check_same_model(*comm, *model, epoch);
        }

        io::EpochStats s;
        s.lr = lr;
        s.loss = r.loss;
        s.accuracy = r.accuracy;
        s.steps = r.steps;
        s.samples = r.samples;
        s.seconds = r.seconds;
        if (recorder) s.norm = finite_norms(*recorder, parameters, epoch);
        // Every rank evaluates (on the same weights), so that none waits on rank 0 longer than a step.
        if (evaluates_after(t, epoch)) {
            EvalResult test = trainer.evaluate();
            s.test_loss = test.loss;
            s.test_accuracy = test.accuracy;
        }
        if (!leader) continue;
        if (snapshot[static_cast<size_t>(epoch)]) add_snapshot(*writer, *recorder);
        // The epoch goes into the statistics file before the checkpoint: a run killed
        // between the two resumes from the older checkpoint and rewrites the epoch.
        writer->append_epoch(s);
        CheckpointInfo saved{epoch + 1, trainer.global_step(), t.model, t.data.name, t.batch_size, world_size,
                             t.seed,    c.provenance};
        trainer.save_checkpoint(c.checkpoint, saved, {{kOptionsEntry, options_tensor}});
        spdlog::info("{}", epoch_line(epoch, t.epochs, s, text, info.unit));
        history.push_back(epoch_json(epoch, s, text));
    }
    if (!leader) return cli::kExitOk;
    writer->finish();
    report(c, info, parameters, start, history, world_size);
    return cli::kExitOk;
}

// One rank of a run of several joins the process group first, so that anything
// that goes wrong afterwards reaches the other ranks as a reason, not as a lost peer.
int dump_rank(const GradDumpConfig& c) {
    const comm::Rendezvous rendezvous = comm::resolve_rendezvous(c.rendezvous);
    if (rendezvous.world_size == 1) return train_rank(c, nullptr);
    cli::set_log_rank(rendezvous.rank);
    // Gloo also with --device cuda: the exchange averages the gradients in host memory.
    auto comm = comm::ProcessGroupCollectives::join(rendezvous, comm::Backend::gloo);
    return comm::run_in_group(*comm, [&] { return train_rank(c, comm.get()); });
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

}  // namespace acc::train
