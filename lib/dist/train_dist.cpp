#include "dist/train_dist.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/launch.hpp"
#include "comm/process_group.hpp"
#include "dist/exchange.hpp"
#include "dist/gravac_exchange.hpp"
#include "dist/plan.hpp"
#include "dist/staging.hpp"
#include "dist/state.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"
#include "io/metrics.hpp"
#include "io/schedule.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <iostream>
#include <optional>
#include <thread>

namespace acc::dist {
namespace {

std::vector<std::uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(path, "cannot be read");
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

comm::Backend backend_of(const TrainDistConfig& c) {
    if (c.backend == "nccl" || (c.backend.empty() && c.train.device == "cuda")) return comm::Backend::nccl;
    return comm::Backend::gloo;
}

std::string mode_name(Mode mode) {
    switch (mode) {
    case Mode::fixed: return "compress";
    case Mode::schedule: return "schedule";
    case Mode::accordion: return "accordion";
    case Mode::gravac: return "gravac";
    }
    return "?";
}

// Small collectives of host values; `host` stages them to the backend's device (NCCL's GPU).
class Group {
public:
    Group(comm::ProcessGroupCollectives& pg) : pg_(pg), host_(staged_collectives(pg, pg.device())) {}
    comm::Collectives& host() { return *host_; }
    int rank() const { return pg_.rank(); }
    int world() const { return pg_.world_size(); }
    bool leader() const { return pg_.rank() == 0; }

    std::vector<double> sum(const std::vector<double>& values) {
        torch::Tensor t = torch::tensor(values, torch::kFloat64);
        host_->allreduce(t, comm::ReduceOp::sum);
        return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
    std::vector<double> broadcast(std::vector<double> values, std::int64_t count) {
        values.resize(static_cast<size_t>(count));
        torch::Tensor t = torch::tensor(values, torch::kFloat64);
        host_->broadcast(t, 0);
        return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    }
    std::vector<std::int64_t> gather(std::int64_t value) {
        std::vector<std::int64_t> out;
        for (const auto& part : host_->allgather(torch::tensor(std::vector<std::int64_t>{value}, torch::kLong)))
            out.push_back(part.item<std::int64_t>());
        return out;
    }
    void broadcast_tensor(torch::Tensor tensor) {
        torch::NoGradGuard no_grad;
        torch::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
        host_->broadcast(t, 0);
        if (!t.is_same(tensor)) tensor.copy_(t);
    }

private:
    comm::ProcessGroupCollectives& pg_;
    std::unique_ptr<comm::Collectives> host_;
};

// What rank 0 tells every rank before an epoch.
struct EpochOrders {
    double lr = 0;
    std::int64_t batch_size = 0;  // per rank
    std::vector<std::string> levels;
};

// Rank 0's view of the whole run: the plan and everything only it writes.
struct Leader {
    std::optional<RunPlan> plan;
    std::optional<io::MetricsWriter> metrics;
    std::unique_ptr<train::GradientRecorder> recorder;
};

torch::Tensor text_tensor(const std::string& text) {
    return torch::tensor(std::vector<std::int64_t>(text.begin(), text.end()), torch::kLong).to(torch::kUInt8);
}

std::string tensor_text(const torch::Tensor& t) {
    torch::Tensor c = t.to(torch::kCPU, torch::kUInt8).contiguous();
    return std::string(reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>()), static_cast<size_t>(c.numel()));
}

// The options that change the numbers, as the checkpoint records them ("run/options").
// In batch mode the schedule sets the batch size, so --batch-size is not compared.
std::string resume_settings(const TrainDistConfig& c, bool batch_mode) {
    std::string text;
    for (const auto& line : split(train::resume_settings(c.train), '\n'))
        if (!line.empty() && !(batch_mode && line.rfind("--batch-size ", 0) == 0)) text += line + "\n";
    text += "--dgc-warmup-epochs " + std::to_string(c.dgc_warmup_epochs) + "\n";
    text += "--schedule-extend " + (c.schedule_extend.empty() ? std::string("none") : c.schedule_extend) + "\n";
    text += resume_gravac_settings(c);
    if (c.accordion) {
        text += "--eta " + fmt::format("{}", c.accordion_config.eta) + "\n";
        text += "--interval " + std::to_string(c.accordion_config.interval) + "\n";
    }
    return text;
}

void check_options(const std::string& path, const std::string& recorded, const TrainDistConfig& c, bool batch_mode) {
    const auto changed = train::changed_settings(recorded, resume_settings(c, batch_mode));
    if (!changed.empty())
        throw UsageError("--resume: " + path + " is from a run with " + join(changed, "; ") +
                         "; resume with the options of the original run");
}

// The options a checkpoint (held in memory) recorded, read before its weights: other
// model options would otherwise fail the load with a message about shapes. Empty
// when it has none, or cannot be read (loading it then says why).
std::string recorded_options(const std::vector<std::uint8_t>& image, const std::string& path) {
    try {
        const io::H5File f = io::H5File::open_image(image, path);
        if (!f.exists("/extra") || !f.exists("/extra/run") || !f.exists("/extra/run/options")) return "";
        const auto bytes = f.read<std::uint8_t>("/extra/run/options");
        return std::string(bytes.begin(), bytes.end());
    } catch (const Error&) {
        return "";
    }
}

// The run's settings that a resumed run must share, from the checkpoint. Checkpoints
// written before they recorded the options ("run/options") are checked on what
// CheckpointInfo holds.
void check_same_run(const std::string& path, const train::CheckpointInfo& info, const train::TensorMap& extra,
                    const TrainDistConfig& c, int world, bool batch_mode) {
    if (auto it = extra.find("run/options"); it != extra.end())
        check_options(path, tensor_text(it->second), c, batch_mode);
    struct Setting {
        const char* what;
        std::string then, now;
    };
    std::vector<Setting> settings = {{"--model", info.model, c.train.model},
                                     {"--dataset", info.dataset, c.train.data.name},
                                     {"--seed", std::to_string(info.seed), std::to_string(c.train.seed)},
                                     {"world size", std::to_string(info.world_size), std::to_string(world)}};
    if (!batch_mode)
        settings.push_back({"--batch-size", std::to_string(info.batch_size), std::to_string(c.train.batch_size)});
    for (const auto& s : settings)
        if (s.then != s.now)
            throw UsageError("--resume: " + path + " is from a run with " + s.what + " " + s.then + ", not " + s.now +
                             "; resume with the options of the original run");
}

std::string epoch_line(std::int64_t epoch, std::int64_t epochs, const io::MetricsEpoch& m, const std::string& levels) {
    std::string line = fmt::format("epoch {} ({}/{}): loss {:.4f}, accuracy {:.1f}%", epoch, epoch + 1, epochs, m.loss,
                                   100 * m.accuracy);
    if (!std::isnan(m.test_accuracy))
        line += fmt::format(", test loss {:.4f}, test accuracy {:.1f}%", m.test_loss, 100 * m.test_accuracy);
    return line + fmt::format(", lr {}, batch {}; levels {}; sent {} floats ({}B), total {} floats; {:.2f} s: compute "
                              "{:.2f} s, compression {:.2f} s, communication {:.2f} s",
                              short_number(m.lr), m.batch_size, levels, si_count(m.floats_sent),
                              si_count(static_cast<double>(m.bytes_sent)), si_count(m.floats_sent_total), m.seconds,
                              m.compute_seconds, m.compression_seconds, m.communication_seconds);
}

nlohmann::json epoch_json(std::int64_t epoch, const io::MetricsEpoch& m, const std::vector<std::string>& levels) {
    auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    std::vector<std::string> used;
    for (auto l : m.level) used.push_back(levels[static_cast<size_t>(l)]);
    return {{"epoch", epoch},
            {"lr", m.lr},
            {"loss", number(m.loss)},
            {"accuracy", number(m.accuracy)},
            {"test_loss", number(m.test_loss)},
            {"test_accuracy", number(m.test_accuracy)},
            {"steps", m.steps},
            {"samples", m.samples},
            {"batch_size", m.batch_size},
            {"levels", used},
            {"bytes_sent", m.bytes_sent},
            {"floats_sent", m.floats_sent},
            {"bytes_sent_total", m.bytes_sent_total},
            {"floats_sent_total", m.floats_sent_total},
            {"seconds", m.seconds},
            {"compute_seconds", m.compute_seconds},
            {"compression_seconds", m.compression_seconds},
            {"communication_seconds", m.communication_seconds}};
}

// Rank 0 builds the plan from the options (and the schedule file) and checks it against the model.
RunPlan make_plan(const TrainDistConfig& c, const std::vector<io::Parameter>& parameters, int world) {
    const std::int64_t epochs = c.train.epochs;
    switch (c.mode()) {
    case Mode::fixed: return RunPlan::fixed(parameters, c.compress, epochs);
    case Mode::gravac: return RunPlan::fixed(parameters, "none", epochs);  // GravacExchange sends every step
    case Mode::schedule: {
        io::Schedule s = io::read_schedule(c.schedule);
        check_schedule(s, c.schedule, parameters, epochs, c.schedule_extend == "last", world, c.batch_size_given);
        return RunPlan::from_schedule(s, parameters, epochs);
    }
    case Mode::accordion: {
        std::vector<double> lr;
        for (std::int64_t e = 0; e < epochs; ++e) lr.push_back(c.train.schedule.at(e));
        return RunPlan::accordion(parameters, c.accordion_config, lr);
    }
    }
    throw Error("internal error: unknown mode");
}

io::Metrics metrics_header(const TrainDistConfig& c, const RunPlan& plan, const std::vector<io::Parameter>& parameters,
                           int world, comm::Backend backend) {
    io::Metrics m;
    m.header.provenance = c.provenance;
    io::MetricsRun& r = m.run;
    r.model = c.train.model;
    r.dataset = c.train.data.name;
    r.batch_size = plan.batch_mode() ? 0 : c.train.batch_size;
    r.world_size = world;
    r.seed = static_cast<std::int64_t>(c.train.seed);
    r.mode = mode_name(c.mode());
    if (c.mode() == Mode::fixed) r.compress = compress::parse_spec(c.compress.empty() ? "none" : c.compress).text();
    if (c.mode() == Mode::schedule) {
        r.schedule = c.schedule;
        r.schedule_mode = plan.batch_mode() ? "batch" : "compression";
    }
    if (c.mode() == Mode::accordion) {
        r.eta = c.accordion_config.eta;
        r.interval = c.accordion_config.interval;
        r.low = compress::parse_spec(c.accordion_config.low).text();
        r.high = compress::parse_spec(c.accordion_config.high).text();
    }
    if (c.mode() == Mode::gravac) m.gravac = gravac_metrics(c, world);
    r.backend = comm::backend_name(backend);
    r.device = c.train.device;
    m.parameters = parameters;
    m.levels = plan.levels();
    return m;
}

int train_rank(const TrainDistConfig& c, comm::ProcessGroupCollectives& pg, comm::Backend backend) {
    const train::TrainConfig& t = c.train;
    Group group(pg);
    const int rank = group.rank(), world = group.world();
    const bool leader = group.leader();

    // Ranks that disagree on the run would train different models, or hang.
    const auto fingerprints = group.gather(static_cast<std::int64_t>(fnv1a(shared_settings(c))));
    for (int other = 1; other < world; ++other)
        if (fingerprints[static_cast<size_t>(other)] != fingerprints[0])
            throw UsageError("rank " + std::to_string(other) +
                             " was started with other options than rank 0; every rank needs the same model, data, "
                             "training and communication options");

    const std::string checkpoint = checkpoint_path(c);
    if (leader) {
        create_parent_directories(c.metrics);
        create_parent_directories(checkpoint);
        io::check_writable_destination(c.metrics);
        io::check_writable_destination(checkpoint);
        if (c.resume && !std::filesystem::exists(checkpoint))
            throw FileError(checkpoint, "no checkpoint to resume from (one is written after every completed epoch)");
        if (c.resume && !std::filesystem::exists(c.metrics))
            throw FileError(c.metrics, "no such file; --resume continues the metrics file of the stopped run");
    }

    auto data = train::open_dataset(t.data, t.seed);
    const train::DataInfo& info = data->info();
    torch::manual_seed(t.seed);
    std::optional<Doing> building(std::in_place, "building the model (--model " + t.model + ")");
    auto model = train::make_model(t.model, info.shape, t.model_options);
    train::TrainerOptions options = train::trainer_options(t);
    if (t.device == "cuda") options.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(pg.local_rank()));
    const train::Shard shard{rank, world};
    train::Trainer trainer(model, *data, options, shard);
    building.reset();
    const auto& parameters = trainer.parameters();
    const size_t count = parameters.size();
    if (leader)
        spdlog::info("{}: {} training and {} test {}; {} on {} {} ({}), {} parameter tensors, {} values", info.name,
                     with_commas(info.train_size), with_commas(info.test_size), info.unit, t.model, world,
                     world == 1 ? "rank" : "ranks", comm::backend_name(backend), count,
                     with_commas([&] {
                         std::int64_t n = 0;
                         for (const auto& p : parameters) n += p.numel();
                         return n;
                     }()));

    // Rank 0 decides; every rank learns the run's levels.
    Leader lead;
    std::string levels_text;
    if (leader) {
        lead.plan.emplace(make_plan(c, parameters, world));
        levels_text = std::string(lead.plan->batch_mode() ? "batch" : "compression") + "\n" +
                      join(lead.plan->levels(), "\n");
    }
    {
        std::vector<std::uint8_t> bytes(levels_text.begin(), levels_text.end());
        bytes = broadcast_bytes(group.host(), bytes, 0);
        levels_text.assign(bytes.begin(), bytes.end());
    }
    std::vector<std::string> level_names = split(levels_text, '\n');
    const bool batch_mode = level_names.front() == "batch";
    level_names.erase(level_names.begin());

    compress::ExchangeOptions compression;
    compression.seed = static_cast<std::uint32_t>(train::mix_seed(t.seed, 0xc0) & 0xffffffffu);
    compression.dgc_warmup_epochs = c.dgc_warmup_epochs;
    ExchangeSetup setup;
    setup.buckets.bucket_bytes = static_cast<std::int64_t>(c.bucket_mb * 1024 * 1024);
    setup.buckets.first_bucket_bytes = static_cast<std::int64_t>(c.first_bucket_mb * 1024 * 1024);
    setup.compression = compression;
    std::vector<torch::Tensor> tensors = trainer.parameter_tensors();

    // Where the run starts: epoch 0, or the checkpoint every rank receives from rank 0.
    std::int64_t start = 0, bytes_total = 0;
    std::vector<std::string> initial(count, "none");
    train::TensorMap my_state;
    if (c.resume) {
        std::vector<std::uint8_t> image = leader ? read_file(checkpoint) : std::vector<std::uint8_t>();
        image = broadcast_bytes(group.host(), std::move(image), 0);
        check_options(checkpoint, recorded_options(image, checkpoint), c, batch_mode);  // every rank: all agree
        train::TensorMap extra;
        train::CheckpointInfo saved = trainer.load_checkpoint_image(image, checkpoint, &extra);
        check_same_run(checkpoint, saved, extra, c, world, batch_mode);
        auto entry = [&](const std::string& name) -> const torch::Tensor& {
            auto it = extra.find(name);
            if (it == extra.end()) throw FileError(checkpoint, "/extra/" + name + " is missing; it was not written by train-dist");
            return it->second;
        };
        if (tensor_text(entry("run/levels")) != levels_text)
            throw UsageError("--resume: " + checkpoint +
                             " is from a run with other compression levels; resume with the options of the original run");
        start = saved.epoch;
        bytes_total = entry("run/bytes_sent_total").item<std::int64_t>();
        torch::Tensor last = entry("run/level").to(torch::kLong).contiguous();
        if (last.numel() != static_cast<std::int64_t>(count))
            throw FileError(checkpoint, "/extra/run/level does not hold one level per parameter");
        for (size_t p = 0; p < count; ++p) {
            const std::int64_t index = last[static_cast<std::int64_t>(p)].item<std::int64_t>();
            if (index < 0 || index >= static_cast<std::int64_t>(level_names.size()))
                throw FileError(checkpoint, "/extra/run/level holds an unknown level");
            initial[p] = level_names[static_cast<size_t>(index)];
        }
        const std::string mine = "ranks/" + std::to_string(rank) + "/";
        for (const auto& [name, tensor] : extra)
            if (name.rfind(mine, 0) == 0) my_state[name.substr(mine.size())] = tensor;
        if (leader && lead.plan->online()) {
            torch::Tensor norms = entry("accordion/norm").to(torch::kFloat64).contiguous();
            if (norms.dim() != 2 || norms.size(0) != start || norms.size(1) != static_cast<std::int64_t>(count))
                throw FileError(checkpoint, "/extra/accordion/norm does not hold one row per completed epoch");
            for (std::int64_t e = 0; e < start; ++e) {
                const double* row = norms.data_ptr<double>() + e * static_cast<std::int64_t>(count);
                lead.plan->record_norms(e, std::vector<double>(row, row + count));
            }
        }
        if (start >= t.epochs && leader) spdlog::info("nothing to train: the checkpoint is already at epoch {}", start);
    }
    if (!c.resume) {
        // Every rank starts from rank 0's weights, as DDP does, whatever its own generator drew.
        for (auto& p : tensors) group.broadcast_tensor(p);
        for (auto& b : model->buffers()) group.broadcast_tensor(b);
    }
    DistExchange exchange(tensors, parameters, pg, pg.device(), setup, initial);
    std::unique_ptr<GravacExchange> gravac = make_gravac_exchange(c, tensors, parameters, pg, world);
    if (c.resume) gravac ? gravac->load_state(my_state) : exchange.load_state(my_state);
    trainer.set_exchange(gravac ? static_cast<train::GradientExchange*>(gravac.get()) : &exchange);

    if (leader) {
        io::Metrics header = metrics_header(c, *lead.plan, parameters, world, backend);
        if (c.resume) {
            lead.metrics.emplace(io::MetricsWriter::resume(c.metrics, header, start));
            spdlog::info("resuming {} after epoch {} from {}", c.metrics, start - 1, checkpoint);
        } else {
            lead.metrics.emplace(c.metrics, header);
        }
        if (lead.plan->online()) {
            lead.recorder = std::make_unique<train::GradientRecorder>(trainer.parameter_tensors(), false);
            trainer.set_recorder(lead.recorder.get());
        }
    }

    cli::Progress::Options progress_options;
    progress_options.unit = info.unit;
    if (!leader) progress_options.style = cli::Progress::Style::quiet;
    cli::Progress progress(progress_options);
    progress.begin_run(trainer.steps_in_epoch(start) * std::max<std::int64_t>(0, t.epochs - start));

    nlohmann::json history = nlohmann::json::array();
    for (std::int64_t epoch = start; epoch < t.epochs; ++epoch) {
        Doing training("training epoch " + std::to_string(epoch));
        // Rank 0's orders for the epoch: learning rate, batch size per rank, levels.
        std::vector<double> message;
        std::vector<std::int32_t> level_index;
        EpochLevels decided;
        if (leader) {
            const RunPlan& plan = *lead.plan;
            decided = plan.levels_of(epoch);
            const std::int64_t batch = plan.batch_mode() ? plan.global_batch(epoch) / world : t.batch_size;
            message = {t.schedule.at(epoch) * plan.lr_scale(epoch), static_cast<double>(batch)};
            for (auto l : decided.level) message.push_back(l);
        }
        message = group.broadcast(message, 2 + static_cast<std::int64_t>(count));
        EpochOrders orders;
        orders.lr = message[0];
        orders.batch_size = static_cast<std::int64_t>(message[1]);
        for (size_t p = 0; p < count; ++p) {
            level_index.push_back(static_cast<std::int32_t>(message[2 + p]));
            orders.levels.push_back(level_names.at(static_cast<size_t>(level_index.back())));
        }
        exchange.set_levels(orders.levels);
        exchange.set_epoch(epoch);
        trainer.optimizer().set_momentum_in_gradient(gravac ? gravac->momentum_in_gradient()
                                                            : exchange.momentum_in_gradient());
        if (gravac) gravac->set_samples_per_step(orders.batch_size * world);
        trainer.set_batch_size(orders.batch_size);

        progress.begin_epoch(epoch, t.epochs, trainer.steps_in_epoch(epoch));
        train::EpochResult r = trainer.train_epoch(
            epoch, orders.lr, [&](const train::StepInfo&, double loss, std::int64_t samples) { progress.step(samples, loss); });
        progress.end_epoch();
        const ExchangeTotals sent = gravac ? gravac->take_totals() : exchange.take_totals();
        std::vector<io::MetricsGravacStep> gravac_steps;
        if (gravac) gravac_steps = log_gravac_epoch(*gravac, rank, epoch);

        // Batch-norm statistics differ by rank: everyone takes rank 0's, so that
        // evaluation and the checkpoint describe one model.
        for (auto& buffer : model->buffers()) group.broadcast_tensor(buffer);
        const std::uint64_t sum = train::checksum(tensors);
        spdlog::debug("rank {}: parameters after epoch {} (step {}): checksum {:016x}", rank, epoch,
                      trainer.global_step(), sum);
        const auto sums = group.gather(static_cast<std::int64_t>(sum));
        for (int other = 1; other < world; ++other)
            if (sums[static_cast<size_t>(other)] != sums[0])
                throw Error("ranks hold different weights after epoch " + std::to_string(epoch) + ": rank " +
                            std::to_string(other) + "'s parameters differ from rank 0's");

        auto train_sums = group.sum({r.loss * static_cast<double>(r.samples),
                                     r.accuracy * static_cast<double>(r.samples), static_cast<double>(r.samples)});
        io::MetricsEpoch m;
        m.lr = orders.lr;
        m.steps = r.steps;
        m.samples = std::llround(train_sums[2]);
        m.loss = train_sums[2] > 0 ? train_sums[0] / train_sums[2] : 0;
        m.accuracy = train_sums[2] > 0 ? train_sums[1] / train_sums[2] : 0;
        m.batch_size = orders.batch_size * world;
        if (train::evaluates_after(t, epoch)) {
            train::EvalResult test = trainer.evaluate(shard);
            auto test_sums = group.sum({test.loss * static_cast<double>(test.samples),
                                        test.accuracy * static_cast<double>(test.samples),
                                        static_cast<double>(test.samples)});
            if (test_sums[2] > 0) {
                m.test_loss = test_sums[0] / test_sums[2];
                m.test_accuracy = test_sums[1] / test_sums[2];
            }
        }
        bytes_total += sent.bytes;
        m.bytes_sent = sent.bytes;
        m.bytes_sent_total = bytes_total;
        m.floats_sent = static_cast<double>(sent.bytes) / 4.0;
        m.floats_sent_total = static_cast<double>(bytes_total) / 4.0;
        m.seconds = r.seconds;
        m.encode_seconds = sent.encode_seconds;
        m.decode_seconds = sent.decode_seconds;
        m.compression_seconds = sent.encode_seconds + sent.decode_seconds;
        m.communication_seconds = sent.communication_seconds;
        m.compute_seconds = std::max(0.0, r.seconds - m.compression_seconds - m.communication_seconds);
        m.level = level_index;
        spdlog::debug("rank {}: {} of {} buckets launched during the backward pass", rank, sent.early_launches,
                      sent.steps * static_cast<std::int64_t>(exchange.reducer().buckets().size()));

        // Every rank's error memories and compressor state, for rank 0's checkpoint.
        std::vector<train::TensorMap> states = gather_maps(group.host(), gravac ? gravac->state() : exchange.state());
        if (leader) {
            RunPlan& plan = *lead.plan;
            if (plan.online()) {
                plan.record_norms(epoch, lead.recorder->finite_norms(parameters, epoch));
                m.norm.assign(plan.norms().end() - static_cast<std::ptrdiff_t>(count), plan.norms().end());
                m.critical = decided.critical;
                m.ratio = decided.ratio;
                m.reason = decided.reason;
            }
            // The metrics go out before the checkpoint: a run killed between the two
            // resumes from the older checkpoint and writes the epoch again.
            if (gravac) lead.metrics->append_gravac(gravac_steps, gravac->throughput(epoch));
            lead.metrics->append_epoch(m);
            train::TensorMap extra;
            for (int r2 = 0; r2 < world; ++r2)
                for (auto& [name, tensor] : states[static_cast<size_t>(r2)])
                    extra["ranks/" + std::to_string(r2) + "/" + name] = tensor;
            extra["run/levels"] = text_tensor(levels_text);
            extra["run/options"] = text_tensor(resume_settings(c, batch_mode));
            extra["run/level"] = torch::tensor(level_index, torch::kInt32);
            extra["run/bytes_sent_total"] = torch::tensor(std::vector<std::int64_t>{bytes_total}, torch::kLong);
            if (plan.online()) {
                std::vector<double> norms = plan.norms();
                extra["accordion/norm"] =
                    torch::tensor(norms, torch::kFloat64).view({epoch + 1, static_cast<std::int64_t>(count)});
            }
            train::CheckpointInfo saved{epoch + 1, trainer.global_step(), t.model, t.data.name, trainer.batch_size(),
                                        world,     t.seed,                c.provenance};
            trainer.save_checkpoint(checkpoint, saved, extra);
            spdlog::info("{}", epoch_line(epoch, t.epochs, m,
                                          gravac ? "gravac " + c.gravac + ": " + gravac_summary(gravac_steps)
                                                 : levels_summary(plan, level_index)));
            history.push_back(epoch_json(epoch, m, level_names));
        }
    }

    if (leader) {
        lead.metrics->finish();
        const auto& rows = lead.metrics->metrics().epochs;
        if (!rows.empty()) {
            double compute = 0, compression = 0, communication = 0;
            for (const auto& row : rows) {
                compute += row.compute_seconds;
                compression += row.compression_seconds;
                communication += row.communication_seconds;
            }
            const io::MetricsEpoch& last = rows.back();
            spdlog::info("{}: {} epochs of {} on {}, {} {}; data sent per worker {} floats ({}B); time: compute {} s, "
                         "compression {} s, communication {} s; checkpoint {}",
                         c.metrics, rows.size(), t.model, info.name, world, world == 1 ? "rank" : "ranks",
                         si_count(last.floats_sent_total), si_count(static_cast<double>(last.bytes_sent_total)),
                         fmt::format("{:.1f}", compute), fmt::format("{:.1f}", compression),
                         fmt::format("{:.1f}", communication), checkpoint);
        }
        if (c.json) {
            nlohmann::json summary = {{"metrics", c.metrics},
                                      {"checkpoint", checkpoint},
                                      {"model", t.model},
                                      {"dataset", info.name},
                                      {"world_size", world},
                                      {"mode", mode_name(c.mode())},
                                      {"epochs", t.epochs},
                                      {"first_epoch", start},
                                      {"trained", history}};
            std::cout << summary.dump(2) << std::endl;
        }
    }
    return cli::kExitOk;
}

// One rank: join the group, train, and on any failure tell the others why.
int run_rank(const TrainDistConfig& c, comm::Backend backend) {
#ifdef __GLIBC__
    // Every step frees and allocates the same large activation and gradient tensors.
    // glibc would hand most of them back to the kernel and fault the pages in again
    // (some 35,000 faults per ResNet-18 step); keeping them costs no more memory
    // than the step needs anyway.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    comm::Rendezvous rendezvous = comm::resolve_rendezvous(c.rendezvous);
    // A run on one rank needs no agreed port: take a free one, so that such runs never collide.
    if (rendezvous.world_size == 1 && c.rendezvous.master_port < 0 && !std::getenv("MASTER_PORT"))
        rendezvous.master_port = comm::free_local_port();
    if (rendezvous.world_size > 1) cli::set_log_rank(rendezvous.rank);
    if (c.train.threads > 0)
        torch::set_num_threads(c.train.threads);
    else if (c.rendezvous.nproc > 1)  // ranks started here share this machine's cores
        torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / c.rendezvous.nproc));
    auto pg = comm::ProcessGroupCollectives::join(rendezvous, backend);
    int code = cli::kExitOk;
    try {
        code = train_rank(c, *pg, backend);
        pg->finish();
    } catch (const std::exception& e) {
        pg->abort(e.what());
        throw;
    }
    return code;
}

}  // namespace

int run_train_dist(TrainDistConfig c, int argc, char** argv) {
    validate(c);
    // A bad schedule stops the run before any rank starts; only rank 0 (or the launcher) reads it.
    if (c.mode() == Mode::schedule && comm::resolve_rendezvous(c.rendezvous).rank == 0) io::read_schedule(c.schedule);
    if (c.train.device == "cuda" && !torch::cuda::is_available())
        throw UsageError("--device cuda: no CUDA device is available to this build of LibTorch");
    const comm::Backend backend = backend_of(c);
    comm::check_backend_available(backend);
    return comm::run_ranks(c.rendezvous, argc, argv, "train-dist", [&] { return run_rank(c, backend); });
}

}  // namespace acc::dist
