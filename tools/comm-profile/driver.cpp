#include "comm-profile/driver.hpp"

#include "app/build_info.hpp"
#include "app/rank_options.hpp"
#include "app/same_settings.hpp"
#include "app/training_options.hpp"
#include "base/error.hpp"
#include "base/memory.hpp"
#include "base/paths.hpp"
#include "base/text.hpp"
#include "base/version.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/launch.hpp"
#include "comm/torch_compat.hpp"
#include "comm/device_timer.hpp"
#include "io/output.hpp"
#include "train/compute_time.hpp"
#include "train/model_table.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

namespace acc::app {
namespace {

using comm::ProcessGroupCollectives;
using comm::ReduceOp;

// The tensors one size of one collective works on.
struct Buffers {
    at::Tensor data;                // the tensor passed to the call (reduce_scatter: the whole input)
    at::Tensor out;                 // reduce_scatter: this rank's chunk
    std::vector<at::Tensor> parts;  // allgather: one per rank
};

// Integer-valued floats below 2^24, so every sum is exact: (index mod 1024) + offset.
at::Tensor pattern(std::int64_t count, std::int64_t start, double offset, const at::TensorOptions& options) {
    return (at::arange(start, start + count, options.dtype(at::kLong)).remainder(1024) +
            static_cast<std::int64_t>(offset))
        .to(at::kFloat);
}

// How comm-profile runs each collective of perf::collective_table(): its
// buffers for `count` floats per rank, one timed call, and one call on data
// with exactly predictable results that returns this rank's wrong elements.
struct CollectiveRun {
    perf::Collective kind;
    bool probe;  // some backends lack it: one call before the sweep makes every rank refuse at once
    Buffers (*make)(std::int64_t count, int world, const at::TensorOptions& options);
    void (*run)(ProcessGroupCollectives& comm, Buffers& b);
    std::int64_t (*check)(ProcessGroupCollectives& comm, Buffers& b, std::int64_t count);
};

Buffers one_tensor(std::int64_t count, int, const at::TensorOptions& options) {
    return {at::zeros({count}, options), {}, {}};
}

Buffers gather_buffers(std::int64_t count, int world, const at::TensorOptions& options) {
    // The ranks' parts lie back to back in one buffer, as nccl-tests lays them out:
    // NCCL then gathers straight into it (ProcessGroupCollectives::allgather_into).
    Buffers b{at::zeros({count}, options), {}, {}};
    const at::Tensor all = at::zeros({count * world}, options);
    for (int r = 0; r < world; ++r) b.parts.push_back(all.narrow(0, r * count, count));
    return b;
}

Buffers scatter_buffers(std::int64_t count, int world, const at::TensorOptions& options) {
    return {at::zeros({count * world}, options), at::zeros({count}, options), {}};
}

// The sum over ranks of (rank + 1), which the checked reductions add to the pattern.
double ranks_sum(int world) { return static_cast<double>(std::int64_t{world} * (world + 1) / 2); }

std::int64_t check_allreduce(ProcessGroupCollectives& comm, Buffers& b, std::int64_t count) {
    const auto options = b.data.options();
    b.data.copy_(pattern(count, 0, comm.rank() + 1, options));
    comm.allreduce(b.data, ReduceOp::sum);
    at::Tensor expected = pattern(count, 0, 0, options) * comm.world_size() + ranks_sum(comm.world_size());
    return b.data.ne(expected).sum().item<std::int64_t>();
}

std::int64_t check_allgather(ProcessGroupCollectives& comm, Buffers& b, std::int64_t count) {
    const auto options = b.data.options();
    b.data.copy_(pattern(count, 0, comm.rank() * 1024.0, options));
    for (auto& p : b.parts) p.fill_(-1);
    comm.allgather_into(b.data, b.parts);
    std::int64_t wrong = 0;
    for (int q = 0; q < comm.world_size(); ++q)
        wrong += b.parts[static_cast<size_t>(q)].ne(pattern(count, 0, q * 1024.0, options)).sum().item<std::int64_t>();
    return wrong;
}

std::int64_t check_broadcast(ProcessGroupCollectives& comm, Buffers& b, std::int64_t count) {
    const auto options = b.data.options();
    if (comm.rank() == 0)
        b.data.copy_(pattern(count, 0, 1, options));
    else
        b.data.fill_(-1);
    comm.broadcast(b.data, 0);
    return b.data.ne(pattern(count, 0, 1, options)).sum().item<std::int64_t>();
}

std::int64_t check_reduce_scatter(ProcessGroupCollectives& comm, Buffers& b, std::int64_t count) {
    const auto options = b.data.options();
    const int world = comm.world_size();
    b.data.copy_(pattern(count * world, 0, comm.rank() + 1, options));
    b.out.fill_(-1);
    comm.reduce_scatter(b.data, b.out);
    at::Tensor expected = pattern(count, comm.rank() * count, 0, options) * world + ranks_sum(world);
    return b.out.ne(expected).sum().item<std::int64_t>();
}

const std::vector<CollectiveRun>& collective_runs() {
    static const std::vector<CollectiveRun> runs = {
        {perf::Collective::allreduce, false, one_tensor,
         [](ProcessGroupCollectives& comm, Buffers& b) { comm.allreduce(b.data, ReduceOp::sum); }, check_allreduce},
        {perf::Collective::allgather, false, gather_buffers,
         [](ProcessGroupCollectives& comm, Buffers& b) { comm.allgather_into(b.data, b.parts); }, check_allgather},
        {perf::Collective::broadcast, false, one_tensor,
         [](ProcessGroupCollectives& comm, Buffers& b) { comm.broadcast(b.data, 0); }, check_broadcast},
        {perf::Collective::reduce_scatter, true, scatter_buffers,
         [](ProcessGroupCollectives& comm, Buffers& b) { comm.reduce_scatter(b.data, b.out); },
         check_reduce_scatter},
    };
    return runs;
}

const CollectiveRun& run_of(perf::Collective c) {
    for (const CollectiveRun& run : collective_runs())
        if (run.kind == c) return run;
    throw Error(std::string("internal error: comm-profile cannot run ") + perf::collective_name(c));
}

// One checked call; the wrong elements summed over all ranks.
std::int64_t check_once(ProcessGroupCollectives& comm, const CollectiveRun& run, Buffers& b, std::int64_t count) {
    at::Tensor total = at::full({1}, run.check(comm, b, count), b.data.options().dtype(at::kLong));
    comm.allreduce(total, ReduceOp::sum);
    return total.cpu().item<std::int64_t>();
}

// Per iteration, the time of the slowest rank.
std::vector<double> slowest_rank(ProcessGroupCollectives& comm, const std::vector<double>& times) {
    at::Tensor slowest = at::tensor(times, at::TensorOptions().dtype(at::kDouble)).to(comm.device());
    comm.allreduce(slowest, ReduceOp::max);
    slowest = slowest.cpu();
    return std::vector<double>(slowest.data_ptr<double>(), slowest.data_ptr<double>() + slowest.numel());
}

// --batch-size, 128 unless given.
std::int64_t compute_batch(const ProfileConfig& config) { return config.batch_size > 0 ? config.batch_size : 128; }

// Every rank must run the same measurements: `options` lists what they are started with.
void agree_on(ProcessGroupCollectives& comm, const std::string& settings, const std::string& what,
              const std::string& options) {
    check_same_settings(comm, settings, what, " (" + options + " must be the same on every rank)", comm.device());
}

bool human_output() { return spdlog::default_logger()->level() <= spdlog::level::info; }

// GPU clock cycles a timed collective's stream waits before its start event:
// about a millisecond (1.5 to 2 GHz), far above c10d's tens of microseconds to
// queue a collective.
constexpr std::int64_t kHoldCycles = 2'000'000;

// One row of the sweep: `count` floats per rank, checked if asked, warmed up and timed.
SizeResult measure_size(ProcessGroupCollectives& comm, const CollectiveRun& run, std::int64_t count,
                        const SweepPlan& plan, const SweepObserver& observer) {
    const int world = comm.world_size();
    const auto options = at::TensorOptions().dtype(at::kFloat).device(comm.device());
    SizeResult row;
    row.count = count;
    row.size = collective_bytes(run.kind, count, world);
    Buffers buffers = [&] {
        Doing doing("allocating the buffers of a " + size_text(row.size) + " " + perf::collective_name(run.kind));
        return run.make(count, world, options);
    }();
    if (observer.size) observer.size(run.kind, row.size);
    if (plan.check) {
        row.wrong = check_once(comm, run, buffers, count);
        buffers = run.make(count, world, options);
    }
    for (int i = 0; i < plan.warmup; ++i) run.run(comm, buffers);
    std::vector<double> times(static_cast<size_t>(plan.iterations));
    // On a GPU the collective's time is the device's (CUDA events around it on the
    // caller's stream, which NCCL's wait orders after the collective), not the
    // host's time to queue it; on the CPU it is the host's clock. The stream is
    // held before the start event until the host has queued the collective, as
    // the back-to-back calls of nccl-tests hide it: else a small message's time
    // would count c10d's bookkeeping. With plan.agg_iters > 1 the calls of one
    // timing follow each other as a training step's collectives do, and the time
    // is their mean: a call's latency there, not that of a call alone.
    comm::DeviceTimer clock;
    int late = 0;
    for (auto& t : times) {
        comm.barrier();
        clock.begin_step(comm.device(), true);
        clock.hold(kHoldCycles);
        const comm::DeviceTimer::Mark start = clock.start();
        for (int call = 0; call < plan.agg_iters; ++call) run.run(comm, buffers);
        late += clock.reached(start);
        double seconds = 0;
        clock.stop(start, seconds);
        clock.finish_step();
        t = std::max(1e-9, seconds / plan.agg_iters);
    }
    if (late > 0)
        spdlog::warn("{} {}: the GPU reached {} of {} timings before the host had queued the collective; they "
                     "include the host's time to queue it",
                     perf::collective_name(run.kind), size_text(row.size), late, plan.iterations);
    row.time = perf::summarize(slowest_rank(comm, times));
    set_bandwidths(row, run.kind, world);
    return row;
}

// Bytes one rank holds on the CPU (Gloo) while measuring `count` floats per rank
// of `c`: the call's tensors and what Gloo adds to them (allgather gathers into a
// flat buffer of its own, then copies each part out; reduce_scatter copies the
// input its allreduce sums) and, with --check, the second set made after it and
// the pattern's temporaries (an int64 range, its remainder and sum, then floats:
// 28 bytes a value).
double rank_bytes(perf::Collective c, std::int64_t count, int world, bool check) {
    const double per_count = c == perf::Collective::allgather || c == perf::Collective::reduce_scatter
                                 ? 2 * world + 1
                                 : 1;
    const double buffers = 4.0 * static_cast<double>(count) * per_count;
    if (!check) return buffers;
    const double pattern = 28.0 * static_cast<double>(count) * (c == perf::Collective::reduce_scatter ? world : 1);
    return buffers + std::max(buffers, pattern);
}

// The most one rank holds over the sweep `plan`, and the collective that needs it.
std::pair<double, perf::Collective> sweep_bytes(const SweepPlan& plan, int world) {
    std::pair<double, perf::Collective> most{0, plan.collectives.front()};
    for (perf::Collective c : plan.collectives)
        for (std::int64_t count : plan_counts(c, plan, world))
            if (const double bytes = rank_bytes(c, count, world, plan.check); bytes > most.first) most = {bytes, c};
    return most;
}

std::string gib_text(double bytes) { return printf_text("%.1f GiB", bytes / (1024.0 * 1024 * 1024)); }

// Before the sweep, on the CPU: the largest size must fit in the memory of every
// host, shared by the ranks it runs. Every rank gathers every rank's figures and so
// refuses with the same words (one message under --nproc). A GPU's memory is the
// device's, which CUDA reports when it runs out.
void check_memory(ProcessGroupCollectives& comm, const SweepPlan& plan) {
    if (comm.device().is_cuda()) return;
    const int world = comm.world_size();
    const std::vector<std::string>& hosts = comm.hosts();
    const auto [need, worst] = sweep_bytes(plan, world);
    const auto local = std::count(hosts.begin(), hosts.end(), hosts[static_cast<size_t>(comm.rank())]);
    const double available = static_cast<double>(available_memory_bytes().value_or(-1));
    at::Tensor mine = at::tensor(std::vector<double>{need * static_cast<double>(local), available},
                                 at::TensorOptions().dtype(at::kDouble));
    std::vector<at::Tensor> all;
    for (int r = 0; r < world; ++r) all.push_back(at::zeros({2}, mine.options()));
    comm.allgather_into(mine, all);
    for (int r = 0; r < world; ++r) {
        const double host_need = all[static_cast<size_t>(r)][0].item<double>();
        const double host_room = all[static_cast<size_t>(r)][1].item<double>();
        if (host_room < 0 || host_need <= host_room) continue;
        const double ranks_there = host_need / need;
        // The largest size of the sweep that would fit there; when not even its
        // smallest does, the largest a step below it that fits alone.
        SweepPlan smaller = plan;
        std::string fits;
        for (std::int64_t size = plan.min_bytes; size <= plan.max_bytes && size <= INT64_MAX / plan.factor;
             size *= plan.factor) {
            smaller.max_bytes = size;
            if (sweep_bytes(smaller, world).first * ranks_there > host_room) break;
            fits = "lower -e/--max-bytes to " + size_text(size) + " or less";
        }
        for (std::int64_t size = plan.min_bytes / plan.factor; fits.empty() && size >= 1; size /= plan.factor) {
            smaller.min_bytes = smaller.max_bytes = size;
            if (sweep_bytes(smaller, world).first * ranks_there <= host_room)
                fits = "lower -b/--min-bytes and -e/--max-bytes to " + size_text(size) + " or less";
        }
        if (fits.empty()) fits = "lower -e/--max-bytes";
        throw UsageError("-e/--max-bytes: the sweep's largest " + std::string(perf::collective_name(worst)) +
                         " holds about " + gib_text(need) + " per rank" + (plan.check ? " (with --check)" : "") +
                         ", " + gib_text(host_need) + " for the " + std::to_string(std::llround(ranks_there)) +
                         (ranks_there > 1.5 ? " ranks" : " rank") + " on " + hosts[static_cast<size_t>(r)] +
                         ", which has " + gib_text(host_room) + " available; " + fits);
    }
}

}  // namespace

std::string comm_profile_description() {
    std::vector<std::string> names;
    for (const perf::CollectiveInfo& c : perf::collective_table()) names.push_back(c.name);
    return "Time collectives (" + join(names, ", ") +
           ") over a sweep of message sizes,\n"
           "report time, algbw and busbw as nccl-tests does, and fit t(S) = alpha + S/B per collective;\n"
           "with --model, also time a model's forward and backward pass per step.";
}

void add_comm_profile_options(CLI::App& app, ProfileConfig& config) {
    std::vector<std::string> names;
    for (const perf::CollectiveInfo& c : perf::collective_table()) names.push_back(c.name);
    app.add_option("--collectives", config.collectives,
                   "Comma-separated collectives: " + join(names, ", ") + " [" + join(config.collectives, ",") + "]")
        ->delimiter(',')
        ->default_str("");
    app.add_option("-b,--min-bytes", config.min_bytes, "Smallest message size in bytes (K, M, G: binary)");
    app.add_option("-e,--max-bytes", config.max_bytes, "Largest message size in bytes (K, M, G: binary)");
    app.add_option("--fit-from", config.fit_from,
                   "Fit the bandwidth over the sizes from this many bytes on, and the latency as the median of the "
                   "smaller ones' mean times: a link that lets a burst through (a token bucket) sustains less than its small messages "
                   "show [0: every size]");
    app.add_option("-f,--step-factor", config.factor, "Multiply the size by this much between rows")
        ->check(cli::whole_number(2, 1024));
    app.add_option("-n,--iters", config.iterations, "Timed iterations per size")->check(cli::whole_number(1, 1000000));
    app.add_option("-w,--warmup-iters", config.warmup, "Untimed iterations per size before the timed ones")
        ->check(cli::whole_number(0, 1000000));
    app.add_option("-m,--agg-iters", config.agg_iters,
                   "Collectives issued back to back in each timed iteration, whose time is their mean (as a "
                   "training step issues its exchange's collectives) [1: each alone, after a barrier]")
        ->check(cli::whole_number(1, 10000));
    app.add_flag("-c,--check", config.check,
                 "Check every collective on integer-valued data with exactly known results (#wrong)");
    add_device_option(app, config.device, "cpu (Gloo) or cuda (NCCL, in CUDA builds)");
    app.add_option("--model", config.model, "Also time the forward and backward pass of this model's training step")
        ->check(CLI::IsMember(train::model_names()));
    app.add_option("--batch-size", config.batch_size, "Samples per rank in the timed steps (streams for lstm) [128]")
        ->check(cli::whole_number(1, 1 << 20))
        ->default_str("");
    app.add_option("-o,--output", config.output, "Write the profile to this HDF5 file (accordion.comm-profile)");
    app.add_flag("--force", config.force, "Replace an output file that is read-only or not an HDF5 file");
    auto* csv = app.add_flag("--csv", config.csv, "Print the results as CSV on stdout");
    app.add_flag("--json", config.json, "Print the results and fits as JSON on stdout")->excludes(csv);
    add_rendezvous_options(app, config.rendezvous);
}

SweepPlan make_plan(const ProfileConfig& config) {
    SweepPlan plan;
    plan.collectives.clear();
    for (const std::string& name : config.collectives) {
        try {
            plan.collectives.push_back(perf::parse_collective(name));
        } catch (const UsageError& e) {
            throw UsageError(std::string("--collectives: ") + e.what());
        }
    }
    plan.min_bytes = parse_size(config.min_bytes, "-b/--min-bytes");
    plan.max_bytes = parse_size(config.max_bytes, "-e/--max-bytes");
    plan.fit_from = config.fit_from == "0" ? 0 : parse_size(config.fit_from, "--fit-from");
    plan.factor = config.factor;
    plan.iterations = config.iterations;
    plan.warmup = config.warmup;
    plan.agg_iters = config.agg_iters;
    plan.check = config.check;
    plan.validate();
    return plan;
}

std::vector<CollectiveResult> measure(ProcessGroupCollectives& comm, const SweepPlan& plan,
                                      const SweepObserver& observer) {
    const int world = comm.world_size();
    agree_on(comm, plan.signature(), "sweep options", "--collectives, -b, -e, -f, -n, -w, -m and --check");
    check_memory(comm, plan);
    for (perf::Collective c : plan.collectives) {
        const CollectiveRun& run = run_of(c);
        if (!run.probe) continue;
        Buffers probe = run.make(1, world, at::TensorOptions().dtype(at::kFloat).device(comm.device()));
        run.run(comm, probe);
    }
    std::vector<CollectiveResult> results;
    for (perf::Collective c : plan.collectives) {
        const CollectiveRun& run = run_of(c);
        CollectiveResult result;
        result.collective = c;
        result.bus_factor = perf::bus_factor(c, world);
        if (observer.begin) observer.begin(c);
        for (std::int64_t count : plan_counts(c, plan, world)) {
            result.rows.push_back(measure_size(comm, run, count, plan, observer));
            if (observer.row) observer.row(result.rows.back());
        }
        fit_rows(result, plan.fit_from);
        if (observer.end) observer.end(result);
        results.push_back(std::move(result));
    }
    return results;
}

io::ComputeProfile measure_compute(ProcessGroupCollectives& comm, const ProfileConfig& config, const SweepPlan& plan) {
    train::ComputeTimingConfig timing;
    timing.model = config.model;
    timing.batch_size = compute_batch(config);
    timing.warmup = plan.warmup;
    timing.steps = plan.iterations;
    timing.device = config.device;
    timing.device_index = config.device == acc::Device::cuda
                              ? comm::rank_gpu(comm.rank(), comm.local_rank(), comm.backend()).index()
                              : comm.local_rank();
    const train::ComputeTimes times = train::time_compute(timing, [&] { comm.barrier(); });
    const train::ComputeInput input = train::default_compute_input(config.model);
    io::ComputeProfile c;
    c.model = config.model;
    c.batch_size = timing.batch_size;
    c.input_shape = input.shape;
    c.classes = input.classes;
    c.input = input.source;
    c.warmup_steps = plan.warmup;
    c.threads = at::get_num_threads();
    c.forward = slowest_rank(comm, times.forward);
    c.backward = slowest_rank(comm, times.backward);
    c.forward_seconds = perf::median(c.forward);
    c.backward_seconds = perf::median(c.backward);
    return c;
}

namespace {

// The lines above the table: who measures what, and how.
void print_banner(const ProfileMeta& meta, const SweepPlan& plan) {
    const size_t machines = std::set<std::string>(meta.hosts.begin(), meta.hosts.end()).size();
    std::cerr << "# comm-profile " << ACC_VERSION << ": " << meta.world_size
              << (meta.world_size == 1 ? " rank" : " ranks") << " on " << machines
              << (machines == 1 ? " host" : " hosts") << ", " << comm::backend_name(meta.backend) << " ("
              << device_name(meta.device) << "), LibTorch " << comm::compat::torch_version() << "\n"
              << "# sizes " << size_text(plan.min_bytes) << " .. " << size_text(plan.max_bytes) << " (factor "
              << plan.factor << "), " << plan.iterations << " timed iterations"
              << (plan.agg_iters > 1 ? " of " + std::to_string(plan.agg_iters) + " back-to-back calls" : "")
              << " after " << plan.warmup << " warm-up per size; each time is the slowest rank's"
              << (plan.agg_iters > 1 ? " mean per call" : "") << "\n"
              << "# check: " << (plan.check ? "on" : "off") << "\n#\n";
}

// What the sweep shows as it goes: which size runs and the time left, and with
// `table` (rank 0 at info level) the table, row by row.
SweepObserver sweep_observer(cli::Progress& progress, const SweepPlan& plan, int world, bool table) {
    std::int64_t sizes = 0;
    double work = 0;
    auto size_work = [&plan](std::int64_t bytes) {  // a call costs about its latency plus its bytes
        return static_cast<double>(plan.iterations * plan.agg_iters + plan.warmup) *
               (65536.0 + static_cast<double>(bytes));
    };
    for (perf::Collective c : plan.collectives)
        for (std::int64_t count : plan_counts(c, plan, world)) {
            ++sizes;
            work += size_work(collective_bytes(c, count, world));
        }
    progress.begin_items(sizes, work);
    SweepObserver observer;
    observer.size = [&progress, size_work](perf::Collective c, std::int64_t bytes) {
        progress.start_item(std::string(perf::collective_name(c)) + " " + size_text(bytes), size_work(bytes));
    };
    observer.row = [&progress, table](const SizeResult& row) {
        progress.finish_item();
        if (table) std::cerr << table_row(row);
    };
    if (table) {
        observer.begin = [](perf::Collective c) { std::cerr << table_header(c); };
        observer.end = [](const CollectiveResult& r) { std::cerr << fit_line(r) << "#\n"; };
    }
    return observer;
}

// The sweep and, with --model, the compute timing; rank 0 writes and prints the results.
std::vector<CollectiveResult> profile_in_group(ProcessGroupCollectives& comm, const ProfileConfig& config,
                                               const SweepPlan& plan, ProfileMeta& meta) {
    const bool leader = comm.rank() == 0;
    const bool human = leader && human_output();
    std::vector<io::OutputClaim> claims;
    if (leader) claims = io::claim_outputs({config.output}, "comm-profile", config.force);
    if (human) print_banner(meta, plan);
    cli::Progress::Options progress_options;
    if (!leader) progress_options.style = cli::Progress::Style::quiet;
    cli::Progress progress(progress_options);
    const SweepObserver observer = sweep_observer(progress, plan, meta.world_size, human);
    // Before the sweep: a rank that would time a model and one that would not must not meet halfway.
    agree_on(comm, config.model.empty() ? "" : config.model + ":" + std::to_string(compute_batch(config)),
             "model options", "--model and --batch-size");
    std::vector<CollectiveResult> results = measure(comm, plan, observer);
    if (!config.model.empty()) {
        meta.compute = measure_compute(comm, config, plan);
        if (human) std::cerr << compute_lines(*meta.compute, meta.world_size);
    }
    comm.confirm();  // on NCCL, that the last collectives did not fail unseen: no figures from them
    if (leader) {
        if (!config.output.empty()) io::write_comm_profile(config.output, to_comm_profile(results, meta));
        if (config.csv) std::cout << results_csv(results) << std::flush;
        if (config.json) std::cout << results_json(results, meta) << std::flush;
    }
    return results;
}

// One rank's part of the run.
int profile_rank(const ProfileConfig& config, const SweepPlan& plan, comm::Backend backend) {
    const comm::Rendezvous rendezvous = comm::resolve_rendezvous(config.rendezvous);
    if (rendezvous.world_size > 1) cli::set_log_rank(rendezvous.rank);
    at::set_num_threads(1);

    auto group = ProcessGroupCollectives::join(rendezvous, backend);
    const bool leader = group->rank() == 0;
    const bool human = leader && human_output();
    ProfileMeta meta;
    meta.world_size = group->world_size();
    meta.backend = backend;
    meta.device = config.device;
    meta.hosts = group->hosts();
    meta.plan = plan;
    meta.provenance = config.provenance;
    meta.output = config.output;
    // One rank's collectives copy memory within the process: their "bandwidth" says nothing of a network.
    if (leader && meta.world_size == 1)
        spdlog::warn("one rank measures no network; run 2 or more ranks (--nproc 2 on this machine, or "
                     "torchrun on several machines) for a profile compress-bench can use");
    std::vector<CollectiveResult> results;
    comm::run_in_group(*group, [&] {
        results = profile_in_group(*group, config, plan, meta);
        return cli::kExitOk;
    });
    const std::int64_t wrong = total_wrong(results);
    if (human) {
        std::cerr << "# Avg bus bandwidth: " << fit_number(average_busbw(results) / 1e9, 10) << " GB/s\n";
        if (plan.check) std::cerr << "# Wrong values: " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
    }
    if (leader && !config.output.empty()) spdlog::info("wrote {}", config.output);
    if (wrong > 0)
        throw Error("--check: " + std::to_string(wrong) + " values were wrong; the " +
                    comm::backend_name(backend) + " collectives returned incorrect results");
    return cli::kExitOk;
}

}  // namespace

int run_profile(const ProfileConfig& config, int argc, char** argv) {
    // Everything that can be checked alone is checked before any rank starts.
    const SweepPlan plan = make_plan(config);
    if (config.csv && config.json) throw UsageError("--csv and --json both print on standard output; choose one");
    if (!config.model.empty()) train::model_info(config.model);  // --model: unknown model '...' (known: ...)
    if (config.model.empty() && config.batch_size != 0)
        throw UsageError("--batch-size: sets the batch of the timed model; it needs --model");
    if (config.batch_size < 0) throw UsageError("--batch-size: must be at least 1");
    const comm::Backend backend = comm::default_backend(config.device);
    // The device first: a CPU-only build refuses --device cuda as every program does.
    check_device_available(config.device);
    comm::check_backend_available(backend);
    return comm::run_ranks(config.rendezvous, argc, argv, "comm-profile",
                           [&] { return profile_rank(config, plan, backend); });
}

}  // namespace acc::app
