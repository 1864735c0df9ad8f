#include "train-dist/driver.hpp"

#include "app/auto_mode.hpp"
#include "app/build_info.hpp"
#include "app/data_parallel.hpp"
#include "train-dist/gravac.hpp"
#include "train-dist/options.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/launch.hpp"
#include "comm/process_group.hpp"
#include "exchange/trainer/run_sync.hpp"
#include "exchange/trainer/state.hpp"
#include "io/metrics.hpp"
#include "io/output.hpp"
#include "io/schedule.hpp"
#include "perf/stats.hpp"
#include "plan/run_plan.hpp"
#include "train/compute_time.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <iostream>
#include <optional>
#include <thread>

namespace acc::app {
namespace {

using exchange::ExchangeTotals;

comm::Backend backend_of(const TrainDistConfig& c) {
    return comm::run_backend(c.backend, c.train.device);
}

std::string mode_name(Mode mode) {
    switch (mode) {
    case Mode::fixed: return "compress";
    case Mode::schedule: return "schedule";
    case Mode::accordion: return "accordion";
    case Mode::gravac: return "gravac";
    case Mode::automatic: return "auto";
    }
    return "?";
}

// The part of the epoch line only train-dist prints: levels, traffic and time.
std::string epoch_tail(const io::MetricsEpoch& m, const std::string& levels) {
    return fmt::format("; levels {}; sent {} floats ({}B), total {} floats; {:.2f} s: compute {:.2f} s, compression "
                       "{:.2f} s, communication {:.2f} s",
                       levels, si_count(m.floats_sent), si_count(static_cast<double>(m.bytes_sent)),
                       si_count(m.floats_sent_total), m.seconds, m.compute_seconds, m.compression_seconds,
                       m.communication_seconds);
}

nlohmann::json epoch_json(const EpochSummary& s, const io::MetricsEpoch& m, const std::vector<compress::Spec>& levels) {
    nlohmann::json j = app::epoch_json(s, false);
    std::vector<std::string> used;
    for (auto l : m.level) used.push_back(levels[static_cast<size_t>(l)].text());
    j["levels"] = used;
    j["bytes_sent"] = m.bytes_sent;
    j["floats_sent"] = m.floats_sent;
    j["bytes_sent_total"] = m.bytes_sent_total;
    j["floats_sent_total"] = m.floats_sent_total;
    j["compute_seconds"] = m.compute_seconds;
    j["compression_seconds"] = m.compression_seconds;
    j["communication_seconds"] = m.communication_seconds;
    j["rank_communication_seconds"] = m.rank_communication_seconds;
    return j;
}

// Rank 0 builds the plan from the options (and the schedule file) and checks it against the model.
plan::RunPlan make_plan(const TrainDistConfig& c, const std::optional<io::Schedule>& schedule,
                  const std::vector<io::Parameter>& parameters, int world) {
    const std::int64_t epochs = c.train.epochs;
    switch (c.mode()) {
    case Mode::fixed: return plan::RunPlan::fixed(parameters, c.fixed_level(), epochs);
    // GravacSync sends every matrix at its own per-step factor; the plan's levels stay none.
    case Mode::gravac: return plan::RunPlan::fixed(parameters, compress::no_compression(), epochs);
    case Mode::schedule: {
        const io::Schedule& s = schedule.value();
        const std::vector<compress::Spec> levels =
            plan::check_schedule(s, c.schedule, parameters, epochs, c.schedule_extend_last, world, c.batch_size_given);
        return plan::RunPlan::from_schedule(s, levels, parameters, epochs);
    }
    case Mode::accordion:
    case Mode::automatic: {
        std::vector<double> lr;
        for (std::int64_t e = 0; e < epochs; ++e) lr.push_back(c.train.schedule.at(e));
        if (c.mode() == Mode::automatic)
            return plan::RunPlan::automatic(parameters, c.accordion_config, c.auto_config.levels, lr, epochs);
        return plan::RunPlan::accordion(parameters, c.accordion_config, lr, epochs);
    }
    }
    throw Error("internal error: unknown mode");
}

AutoSettings auto_settings(const TrainDistConfig& c) {
    AutoSettings s;
    s.low = c.accordion_config.low;
    s.high = c.accordion_config.high;
    s.margin = c.auto_config.margin;
    s.drift = c.auto_config.drift;
    s.bucket_bytes = c.bucket_mb * 1024 * 1024;
    s.first_bucket_bytes = c.first_bucket_mb * 1024 * 1024;
    s.seed = static_cast<std::uint32_t>(c.train.seed);
    return s;
}

io::Metrics metrics_header(const TrainDistConfig& c, const plan::RunPlan& plan, const std::vector<io::Parameter>& parameters,
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
    if (c.mode() == Mode::fixed) r.compress = c.fixed_level().text();
    if (c.mode() == Mode::schedule) {
        r.schedule = c.schedule;
        r.schedule_mode = io::schedule_mode_name(plan.batch_mode() ? io::ScheduleMode::batch : io::ScheduleMode::compression);
    }
    if (c.mode() == Mode::accordion || c.mode() == Mode::automatic) {
        r.eta = c.accordion_config.eta;
        r.interval = c.accordion_config.interval;
        r.low = c.accordion_config.low.text();
        r.high = c.accordion_config.high.text();
    }
    if (c.mode() == Mode::gravac) m.gravac = gravac_metrics(c, world);
    r.backend = comm::backend_name(backend);
    r.device = acc::device_name(c.train.device);
    m.parameters = parameters;
    m.levels = plan.level_names();
    return m;
}

// The run's levels as every rank knows them: rank 0's plan, sent once as text
// (the checkpoint's "run/levels") and parsed once; epochs then send indices into it.
struct LevelTable {
    bool batch_mode = false;
    std::vector<compress::Spec> levels;

    std::string text() const {
        std::string out = io::schedule_mode_name(batch_mode ? io::ScheduleMode::batch : io::ScheduleMode::compression);
        for (const auto& level : levels) out += "\n" + level.text();
        return out;
    }
    // The last row of the run's settings, so that a resumed run with other levels
    // is told so together with every other changed option.
    Settings settings(const TrainDistConfig& c) const {
        Settings s = train_dist_settings(c, batch_mode);
        std::vector<std::string> names;
        for (const auto& level : levels) names.push_back(level.text());
        s.add(batch_mode ? "batch-levels" : "levels", "[" + join(names, ", ") + "]", false, true);
        return s;
    }
    std::vector<compress::Spec> specs(const std::vector<std::int32_t>& index) const {
        std::vector<compress::Spec> out;
        for (auto i : index) {
            if (i < 0 || static_cast<size_t>(i) >= levels.size()) throw Error("internal error: level index out of range");
            out.push_back(levels[static_cast<size_t>(i)]);
        }
        return out;
    }
};

// Rank 0's level table on every rank, typed: the mode, then each level as its
// compressor's place in the registry and its parameter. No rank parses text.
LevelTable agree_on_levels(RankSession& session, const plan::RunPlan* plan) {
    std::vector<double> values;
    if (plan) {
        values.push_back(plan->batch_mode() ? 1 : 0);
        for (const compress::Spec& level : plan->levels()) {
            values.push_back(static_cast<double>(compress::registry_index(level.info())));
            values.push_back(level.parameter);
        }
    }
    const auto count =
        static_cast<size_t>(session.broadcast(std::vector<double>{static_cast<double>(values.size())}, 1).at(0));
    values = session.broadcast(values, count);
    LevelTable table;
    table.batch_mode = values.at(0) != 0;
    const auto& registry = compress::compressors();
    for (size_t i = 1; i + 1 < values.size(); i += 2) {
        const auto index = static_cast<size_t>(values[i]);
        if (index >= registry.size()) throw Error("internal error: rank 0 sent an unknown compressor");
        table.levels.push_back(compress::Spec{registry[index].name, values[i + 1]});
    }
    return table;
}

// What rank 0 tells every rank before an epoch.
struct EpochOrders {
    double lr = 0;
    std::int64_t batch_size = 0;       // per rank
    std::vector<std::int32_t> level;  // per parameter: index into the level table
    plan::EpochLevels decided;               // rank 0: the plan's decision behind the levels
};

// Where a run starts: epoch 0, or rank 0's checkpoint.
struct Start {
    std::int64_t epoch = 0;
    std::int64_t bytes_total = 0;
    std::vector<std::int32_t> level;  // per parameter, the last epoch's
    train::TensorMap exchange_state;  // this rank's
};

// One rank of train-dist: the shared loop with its levels, its exchange and, on
// rank 0, the plan and the files.
class DistRank final : public DataParallelRank {
public:
    DistRank(const TrainDistConfig& c, const std::optional<io::Schedule>& schedule,
             comm::ProcessGroupCollectives& pg, comm::Backend backend);
    int run();

private:
    void check_destinations();
    std::string run_settings() const { return table_.settings(c_).resume_text(); }
    void log_model() const;
    Start resume();
    void make_exchange(const Start& start);
    void open_outputs(const Start& start);
    EpochPlan begin_epoch(std::int64_t epoch) override;
    void end_epoch(const train::EpochResult& own, const EpochSummary& all) override;
    io::MetricsEpoch epoch_metrics(const EpochSummary& all, const ExchangeTotals& sent);
    void write_epoch(const EpochSummary& all, io::MetricsEpoch& m);
    void report(std::int64_t start);
    void measure_auto(std::int64_t epoch);
    ComputeSeconds time_compute();

    const TrainDistConfig& c_;
    comm::Backend backend_;
    std::string checkpoint_;
    std::vector<io::OutputClaim> claims_;  // rank 0: the metrics file and checkpoint, for the whole run
    std::optional<plan::RunPlan> plan_;  // rank 0
    LevelTable table_;
    EpochOrders orders_;  // this epoch's
    std::unique_ptr<exchange::RunSync> sync_;  // the run's one gradient sync
    exchange::SyncRecord record_;              // what it decided by itself in the epoch (GraVAC)
    std::optional<io::MetricsWriter> metrics_;           // rank 0
    std::unique_ptr<train::GradientRecorder> recorder_;  // rank 0, online Accordion
    std::unique_ptr<AutoMode> auto_;                     // --auto
    std::int64_t bytes_total_ = 0;
};

DistRank::DistRank(const TrainDistConfig& c, const std::optional<io::Schedule>& schedule,
                   comm::ProcessGroupCollectives& pg, comm::Backend backend)
    : DataParallelRank(c.train, &pg), c_(c), backend_(backend), checkpoint_(checkpoint_path(c)) {
    session_.check_same_options(train_dist_settings(c, false).ranks_text());
    if (session_.leader()) check_destinations();
    build();
    if (session_.leader()) log_model();
    if (session_.leader()) plan_.emplace(make_plan(c, schedule, trainer_->parameters(), session_.world()));
    table_ = agree_on_levels(session_, plan_ ? &*plan_ : nullptr);
}

void DistRank::check_destinations() {
    // Resumed, they are inputs first: reading them says what is wrong with them.
    claims_ = io::claim_outputs({c_.metrics, checkpoint_}, "train-dist", c_.force || c_.resume);
    if (c_.resume && !std::filesystem::exists(checkpoint_))
        throw FileError(checkpoint_, "no checkpoint to resume from (one is written after every completed epoch)");
    if (c_.resume && !std::filesystem::exists(c_.metrics))
        throw FileError(c_.metrics, "no such file; --resume continues the metrics file of the stopped run");
}

void DistRank::log_model() const {
    const train::DataInfo& info = data_->info();
    std::int64_t values = 0;
    for (const auto& p : trainer_->parameters()) values += p.numel();
    const int world = session_.world();
    spdlog::info("{}: {} training and {} test {}; {} on {} {} ({}), {} parameter tensors, {} values", info.name,
                 with_commas(info.train_size), with_commas(info.test_size), info.unit, t_.model, world,
                 world == 1 ? "rank" : "ranks", comm::backend_name(backend_), trainer_->parameters().size(),
                 with_commas(values));
}

// Every rank loads the checkpoint rank 0 sent, and checks that it is this run's.
Start DistRank::resume() {
    train::TensorMap extra;
    const train::CheckpointInfo saved =
        load_checkpoint(checkpoint_, run_settings(), [&](const train::CheckpointInfo& info) {
            return same_run_settings(info, t_, session_.world(), !table_.batch_mode);
        }, extra);
    auto entry = [&](const std::string& name) -> const torch::Tensor& {
        auto it = extra.find(name);
        if (it == extra.end()) throw FileError(checkpoint_, "/extra/" + name + " is missing; it was not written by train-dist");
        return it->second;
    };
    if (tensor_text(entry("run/levels")) != table_.text())
        throw UsageError("--resume: " + checkpoint_ +
                         " is from a run with other compression levels; resume with the options of the original run");
    Start start;
    start.epoch = saved.epoch;
    start.bytes_total = entry("run/bytes_sent_total").item<std::int64_t>();
    const size_t count = tensors_.size();
    torch::Tensor last = entry("run/level").to(torch::kLong).contiguous();
    if (last.numel() != static_cast<std::int64_t>(count))
        throw FileError(checkpoint_, "/extra/run/level does not hold one level per parameter");
    for (size_t p = 0; p < count; ++p) {
        const std::int64_t index = last[static_cast<std::int64_t>(p)].item<std::int64_t>();
        if (index < 0 || index >= static_cast<std::int64_t>(table_.levels.size()))
            throw FileError(checkpoint_, "/extra/run/level holds an unknown level");
        start.level.push_back(static_cast<std::int32_t>(index));
    }
    const std::string mine = "ranks/" + std::to_string(session_.rank()) + "/";
    for (const auto& [name, tensor] : extra)
        if (name.rfind(mine, 0) == 0) start.exchange_state[name.substr(mine.size())] = tensor;
    if (c_.gravac) {
        // GraVAC's decisions replay from its inputs: without them the resumed run decides otherwise.
        auto inputs = start.exchange_state.find("gravac/inputs");
        if (inputs == start.exchange_state.end())
            throw FileError(checkpoint_, "/extra/" + mine + "gravac/inputs is missing; a GraVAC run resumes from "
                                        "its controller's inputs");
        if (inputs->second.dim() != 2 || inputs->second.size(0) != saved.global_step)
            throw FileError(checkpoint_, "/extra/" + mine + "gravac/inputs holds " +
                                             std::to_string(inputs->second.dim() == 2 ? inputs->second.size(0) : -1) +
                                             " steps for global_step " + std::to_string(saved.global_step) +
                                             "; the file is damaged");
    }
    if (plan_ && plan_->online()) {
        torch::Tensor norms = entry("accordion/norm").to(torch::kFloat64).contiguous();
        if (norms.dim() != 2 || norms.size(0) != start.epoch || norms.size(1) != static_cast<std::int64_t>(count))
            throw FileError(checkpoint_, "/extra/accordion/norm does not hold one row per completed epoch");
        for (std::int64_t e = 0; e < start.epoch; ++e) {
            const double* row = norms.data_ptr<double>() + e * static_cast<std::int64_t>(count);
            plan_->record_norms(e, std::vector<double>(row, row + count));
        }
    }
    return start;
}

// Rank 0's metrics file (new, or the stopped run's) and, online, its gradient recorder.
void DistRank::open_outputs(const Start& start) {
    io::Metrics header = metrics_header(c_, *plan_, trainer_->parameters(), session_.world(), backend_);
    if (c_.resume) {
        metrics_.emplace(io::MetricsWriter::resume(c_.metrics, header, start.epoch));
        spdlog::info("resuming {} after epoch {} from {}", c_.metrics, start.epoch - 1, checkpoint_);
    } else {
        metrics_.emplace(c_.metrics, header);
    }
    if (plan_->online()) {
        recorder_ = std::make_unique<train::GradientRecorder>(trainer_->parameter_tensors(), false);
        trainer_->set_recorder(recorder_.get());
    }
}

void DistRank::make_exchange(const Start& start) {
    exchange::SyncSettings settings;
    exchange::ExchangeSetup& setup = settings.buckets;
    setup.buckets.bucket_bytes = static_cast<std::int64_t>(c_.bucket_mb * 1024 * 1024);
    setup.buckets.first_bucket_bytes = static_cast<std::int64_t>(c_.first_bucket_mb * 1024 * 1024);
    setup.compression.seed = static_cast<std::uint32_t>(train::mix_seed(t_.seed, 0xc0) & 0xffffffffu);
    setup.compression.compressors.dgc.warmup_epochs = c_.dgc_warmup_epochs;
    settings.gravac = gravac_options(c_, session_.world());
    sync_ = exchange::make_run_sync(settings, tensors_, trainer_->parameters(), *session_.comm(), session_.device(),
                                    table_.specs(start.level));
    if (c_.resume) sync_->load_state(start.exchange_state);
    trainer_->set_exchange(sync_.get());
    if (c_.automatic)
        auto_ = std::make_unique<AutoMode>(auto_settings(c_), trainer_->parameters(), table_.levels,
                                           setup.compression);
}

int DistRank::run() {
    Start start;
    if (c_.resume) start = resume();
    else start_from_leader();  // every rank starts from rank 0's weights, as DDP does
    if (start.level.empty()) start.level.assign(tensors_.size(), 0);
    bytes_total_ = start.bytes_total;
    make_exchange(start);
    if (session_.leader()) open_outputs(start);
    train_epochs(start.epoch);
    if (session_.leader()) report(start.epoch);
    return cli::kExitOk;
}

// --auto, before each epoch: rank 0 says whether to measure, and every rank measures together.
void DistRank::measure_auto(std::int64_t epoch) {
    const double due = session_.leader() && auto_->due(epoch) ? 1 : 0;
    if (session_.broadcast(std::vector<double>{due}, 1).at(0) == 0) return auto_->skip_measure();
    auto_->measure(*session_.comm(), session_.device(), *session_.host(), session_.leader(),
                   [this] { return time_compute(); });
}

// The model's forward and backward pass on a batch of the run's shape, timed on every
// rank before the first epoch; the slowest rank's.
ComputeSeconds DistRank::time_compute() {
    train::ComputeTimingConfig config;
    config.model = t_.model;
    config.batch_size = t_.batch_size;
    config.warmup = 1;
    config.steps = 3;
    config.device = t_.device;
    config.device_index = session_.device().is_cuda() ? session_.device().index() : 0;
    config.seed = t_.seed;
    config.model_options = t_.model_options;
    config.input_shape = data_->info().shape.input;
    config.classes = data_->info().shape.classes;
    comm::Collectives* host = session_.host();
    const train::ComputeTimes times = train::time_compute(config, [host] { host->barrier(); });
    at::Tensor slowest = torch::tensor(
        std::vector<double>{perf::summarize(times.forward).median, perf::summarize(times.backward).median},
        torch::kFloat64);
    host->allreduce(slowest, comm::ReduceOp::max);
    return {slowest[0].item<double>(), slowest[1].item<double>()};
}

// What rank 0 decided for the epoch, on every rank.
DataParallelRank::EpochPlan DistRank::begin_epoch(std::int64_t epoch) {
    EpochOrders& o = orders_;
    o = EpochOrders();
    std::vector<double> message;
    if (auto_) measure_auto(epoch);
    if (plan_) {
        o.decided = plan_->levels_of(epoch);
        if (auto_) o.decided.level = auto_->plan(o.decided.critical).level;
        const std::int64_t batch = plan_->batch_mode() ? plan_->global_batch(epoch) / session_.world() : t_.batch_size;
        message = {t_.schedule.at(epoch) * plan_->lr_scale(epoch), static_cast<double>(batch)};
    }
    message = session_.broadcast(message, 2);
    o.lr = message[0];
    o.batch_size = static_cast<std::int64_t>(message[1]);
    o.level = session_.broadcast(o.decided.level, tensors_.size());
    sync_->begin_epoch({epoch, table_.specs(o.level), o.batch_size * session_.world()});
    trainer_->optimizer().set_momentum_in_gradient(sync_->momentum_in_gradient());
    return {o.lr, o.batch_size};
}

void DistRank::end_epoch(const train::EpochResult&, const EpochSummary& all) {
    const ExchangeTotals sent = sync_->take_totals();
    record_ = sync_->take_record(all.epoch);
    if (c_.gravac) log_gravac_epoch(record_.steps, session_.rank(), all.epoch);
    io::MetricsEpoch m = epoch_metrics(all, sent);
    spdlog::debug("rank {}: {} of {} buckets launched during the backward pass", session_.rank(), sent.early_launches,
                  sent.steps * sync_->buckets());
    write_epoch(all, m);
}

io::MetricsEpoch DistRank::epoch_metrics(const EpochSummary& all, const ExchangeTotals& sent) {
    io::MetricsEpoch m;
    m.lr = all.lr;
    m.steps = all.steps;
    m.samples = all.samples;
    m.loss = all.loss;
    m.accuracy = all.accuracy;
    m.batch_size = all.batch_size;
    m.test_loss = all.test_loss;
    m.test_accuracy = all.test_accuracy;
    bytes_total_ += sent.bytes;
    m.bytes_sent = sent.bytes;
    m.bytes_sent_total = bytes_total_;
    m.floats_sent = static_cast<double>(sent.bytes) / 4.0;
    m.floats_sent_total = static_cast<double>(bytes_total_) / 4.0;
    m.seconds = all.seconds;
    m.encode_seconds = sent.encode_seconds;
    m.decode_seconds = sent.decode_seconds;
    m.compression_seconds = sent.encode_seconds + sent.decode_seconds;
    m.communication_seconds = sent.communication_seconds;
    m.compute_seconds = std::max(0.0, all.seconds - m.compression_seconds - m.communication_seconds);
    m.level = orders_.level;
    // Every rank's time, to tell the network's from the wait for a slower rank.
    const auto ranks = session_.host()->allgather(
        torch::tensor(std::vector<double>{sent.communication_seconds}, torch::kFloat64));
    for (const auto& r : ranks) m.rank_communication_seconds.push_back(r.item<double>());
    return m;
}

// Every rank's exchange state to rank 0, which writes the metrics and the checkpoint.
void DistRank::write_epoch(const EpochSummary& all, io::MetricsEpoch& m) {
    const std::int64_t epoch = all.epoch;
    const EpochOrders& o = orders_;
    std::vector<train::TensorMap> states =
        exchange::gather_maps(*session_.host(), sync_->state());
    if (!session_.leader()) return;
    const size_t count = tensors_.size();
    if (plan_->online()) {
        plan_->record_norms(epoch, recorder_->finite_norms(trainer_->parameters(), epoch));
        m.norm.assign(plan_->norms().end() - static_cast<std::ptrdiff_t>(count), plan_->norms().end());
        m.critical = o.decided.critical;
        m.ratio = o.decided.ratio;
        m.reason = o.decided.reason;
    }
    if (auto_) {
        auto_->after_epoch(recorder_->sums(), m.seconds, m.compute_seconds, m.steps);
        m.has_auto = true;
        m.automatic = auto_->metrics();
    }
    train::TensorMap extra;
    for (size_t r = 0; r < states.size(); ++r)
        for (auto& [name, tensor] : states[r]) extra["ranks/" + std::to_string(r) + "/" + name] = tensor;
    extra["run/levels"] = text_tensor(table_.text());
    extra["run/level"] = torch::tensor(o.level, torch::kInt32);
    extra["run/bytes_sent_total"] = torch::tensor(std::vector<std::int64_t>{bytes_total_}, torch::kLong);
    if (plan_->online())
        extra["accordion/norm"] =
            torch::tensor(plan_->norms(), torch::kFloat64).view({epoch + 1, static_cast<std::int64_t>(count)});
    // The checkpoint is written first and put in place after the metrics: a full disk
    // stops the epoch whole, and a run killed between the two resumes from the older
    // checkpoint and writes the epoch again.
    const auto checkpoint =
        write_checkpoint(checkpoint_, epoch, run_settings(), std::move(extra), c_.provenance);
    if (c_.gravac) metrics_->append_gravac(record_.steps, record_.throughput);
    metrics_->append_epoch(m);
    checkpoint->commit();
    spdlog::info("{}{}", epoch_line(all, false),
                 epoch_tail(m, c_.gravac ? std::string("gravac ") + regime::gravac_family_name(*c_.gravac) + ": " +
                                               gravac_summary(record_.steps)
                                       : plan::levels_summary(table_.levels, o.level) +
                                             (auto_ ? "; auto " + auto_->summary() : std::string())));
    history_.push_back(epoch_json(all, m, table_.levels));
}

void DistRank::report(std::int64_t start) {
    metrics_->finish();
    const auto& rows = metrics_->metrics().epochs;
    const int world = session_.world();
    const std::string& dataset = data_->info().name;
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
                     c_.metrics, rows.size(), t_.model, dataset, world, world == 1 ? "rank" : "ranks",
                     si_count(last.floats_sent_total), si_count(static_cast<double>(last.bytes_sent_total)),
                     fmt::format("{:.1f}", compute), fmt::format("{:.1f}", compression),
                     fmt::format("{:.1f}", communication), checkpoint_);
    }
    if (!c_.json) return;
    nlohmann::json summary = {{"metrics", c_.metrics}, {"checkpoint", checkpoint_}, {"model", t_.model},
                              {"dataset", dataset},    {"world_size", world},       {"mode", mode_name(c_.mode())},
                              {"epochs", t_.epochs},   {"first_epoch", start},      {"trained", history_}};
    std::cout << summary.dump(2) << std::endl;
}

// One rank: join the group, train, and on any failure tell the others why.
int run_rank(const TrainDistConfig& c, const std::optional<io::Schedule>& schedule, comm::Backend backend) {
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
    std::optional<comm::PortReservation> reserved;
    if (rendezvous.world_size == 1 && c.rendezvous.master_port < 0 && !std::getenv("MASTER_PORT")) {
        reserved.emplace();
        rendezvous.master_port = reserved->port();
    }
    if (rendezvous.world_size > 1) cli::set_log_rank(rendezvous.rank);
    if (c.train.threads > 0)
        torch::set_num_threads(c.train.threads);
    else if (c.rendezvous.nproc > 1)  // ranks started here share this machine's cores
        torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / c.rendezvous.nproc));
    auto pg = comm::ProcessGroupCollectives::join(rendezvous, backend);
    return comm::run_in_group(*pg, [&] { return DistRank(c, schedule, *pg, backend).run(); });
}

}  // namespace

int run_train_dist(TrainDistConfig c, int argc, char** argv) {
    validate(c);
    // A bad schedule stops the run before any rank starts; only rank 0 (or the launcher) reads it, once.
    std::optional<io::Schedule> schedule;
    if (c.mode() == Mode::schedule && comm::resolve_rendezvous(c.rendezvous).rank == 0)
        schedule = io::read_schedule(c.schedule);
    check_device_available(c.train.device);
    const comm::Backend backend = backend_of(c);
    comm::check_backend_available(backend);
    return comm::run_ranks(c.rendezvous, argc, argv, "train-dist", [&] { return run_rank(c, schedule, backend); });
}

}  // namespace acc::app
