#include "app/comm_profile.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "base/hash.hpp"
#include "base/text.hpp"
#include "base/version.hpp"
#include "cli/progress.hpp"
#include "cli/tool.hpp"
#include "comm/torch_compat.hpp"
#include "io/atomic.hpp"
#include "train/compute_time.hpp"
#include "train/config.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <set>

namespace acc::comm {
namespace {

using Clock = std::chrono::steady_clock;

// The tensors one size of one collective works on.
struct Buffers {
    at::Tensor data;                // allreduce, broadcast: the tensor; allgather: this rank's part;
                                    // reduce_scatter: the whole input
    at::Tensor out;                 // reduce_scatter: this rank's chunk
    std::vector<at::Tensor> parts;  // allgather: one per rank
};

Buffers make_buffers(perf::Collective c, std::int64_t count, int world, const at::TensorOptions& options) {
    Buffers b;
    switch (c) {
    case perf::Collective::allreduce:
    case perf::Collective::broadcast: b.data = at::zeros({count}, options); break;
    case perf::Collective::allgather:
        b.data = at::zeros({count}, options);
        for (int r = 0; r < world; ++r) b.parts.push_back(at::zeros({count}, options));
        break;
    case perf::Collective::reduce_scatter:
        b.data = at::zeros({count * world}, options);
        b.out = at::zeros({count}, options);
        break;
    }
    return b;
}

void run_once(ProcessGroupCollectives& comm, perf::Collective c, Buffers& b) {
    switch (c) {
    case perf::Collective::allreduce: comm.allreduce(b.data, ReduceOp::sum); break;
    case perf::Collective::allgather: comm.allgather_into(b.data, b.parts); break;
    case perf::Collective::broadcast: comm.broadcast(b.data, 0); break;
    case perf::Collective::reduce_scatter: comm.reduce_scatter(b.data, b.out); break;
    }
}

// Integer-valued floats below 2^24, so every sum is exact: (index mod 1024) + offset.
at::Tensor pattern(std::int64_t count, std::int64_t start, double offset, const at::TensorOptions& options) {
    return (at::arange(start, start + count, options.dtype(at::kLong)).remainder(1024) +
            static_cast<std::int64_t>(offset))
        .to(at::kFloat);
}

// Runs one call on data with exactly predictable results; returns the wrong
// elements summed over all ranks.
std::int64_t check_once(ProcessGroupCollectives& comm, perf::Collective c, Buffers& b, std::int64_t count) {
    const int world = comm.world_size(), rank = comm.rank();
    const auto options = b.data.options();
    const std::int64_t ranks_sum = std::int64_t{world} * (world + 1) / 2;  // sum of (rank + 1)
    std::int64_t wrong = 0;
    switch (c) {
    case perf::Collective::allreduce: {
        b.data.copy_(pattern(count, 0, rank + 1, options));
        comm.allreduce(b.data, ReduceOp::sum);
        at::Tensor expected = pattern(count, 0, 0, options) * world + static_cast<double>(ranks_sum);
        wrong = b.data.ne(expected).sum().item<std::int64_t>();
        break;
    }
    case perf::Collective::allgather: {
        b.data.copy_(pattern(count, 0, rank * 1024.0, options));
        for (auto& p : b.parts) p.fill_(-1);
        comm.allgather_into(b.data, b.parts);
        for (int q = 0; q < world; ++q)
            wrong +=
                b.parts[static_cast<size_t>(q)].ne(pattern(count, 0, q * 1024.0, options)).sum().item<std::int64_t>();
        break;
    }
    case perf::Collective::broadcast: {
        if (rank == 0)
            b.data.copy_(pattern(count, 0, 1, options));
        else
            b.data.fill_(-1);
        comm.broadcast(b.data, 0);
        wrong = b.data.ne(pattern(count, 0, 1, options)).sum().item<std::int64_t>();
        break;
    }
    case perf::Collective::reduce_scatter: {
        b.data.copy_(pattern(count * world, 0, rank + 1, options));
        b.out.fill_(-1);
        comm.reduce_scatter(b.data, b.out);
        at::Tensor expected = pattern(count, rank * count, 0, options) * world + static_cast<double>(ranks_sum);
        wrong = b.out.ne(expected).sum().item<std::int64_t>();
        break;
    }
    }
    at::Tensor total = at::full({1}, wrong, options.dtype(at::kLong));
    comm.allreduce(total, ReduceOp::sum);
    return total.cpu().item<std::int64_t>();
}

// The same text gives the same number on every machine.
std::int64_t fingerprint(const std::string& text) { return static_cast<std::int64_t>(fnv1a(text) >> 1); }

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
void agree_on(ProcessGroupCollectives& comm, const std::string& signature, const std::string& what,
              const std::string& options) {
    at::Tensor mine =
        at::full({1}, fingerprint(signature), at::TensorOptions().dtype(at::kLong).device(comm.device()));
    std::vector<at::Tensor> all = comm.allgather(mine);
    const std::int64_t reference = all[0].cpu().item<std::int64_t>();
    for (int r = 1; r < comm.world_size(); ++r)
        if (all[static_cast<size_t>(r)].cpu().item<std::int64_t>() != reference)
            throw UsageError("rank " + std::to_string(r) + " was started with other " + what + " than rank 0 (" +
                             options + " must be the same on every rank)");
}

bool human_output() { return spdlog::default_logger()->level() <= spdlog::level::info; }

}  // namespace

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
    plan.factor = config.factor;
    plan.iterations = config.iterations;
    plan.warmup = config.warmup;
    plan.check = config.check;
    plan.validate();
    return plan;
}

std::vector<CollectiveResult> measure(ProcessGroupCollectives& comm, const SweepPlan& plan,
                                      const SweepObserver& observer) {
    const int world = comm.world_size();
    const auto options = at::TensorOptions().dtype(at::kFloat).device(comm.device());
    agree_on(comm, plan.signature(), "sweep options", "--collectives, -b, -e, -f, -n, -w and --check");
    for (perf::Collective c : plan.collectives) {
        // Refused at once, identically on every rank, by backends without it.
        if (c == perf::Collective::reduce_scatter) {
            Buffers probe = make_buffers(c, 1, world, options);
            comm.reduce_scatter(probe.data, probe.out);
        }
    }
    std::vector<CollectiveResult> results;
    for (perf::Collective c : plan.collectives) {
        CollectiveResult result;
        result.collective = c;
        result.bus_factor = perf::bus_factor(c, world);
        if (observer.begin) observer.begin(c);
        for (std::int64_t count : plan_counts(c, plan, world)) {
            Buffers buffers = [&] {
                Doing doing("allocating the buffers of a " + size_text(collective_bytes(c, count, world)) + " " +
                            perf::collective_name(c));
                return make_buffers(c, count, world, options);
            }();
            SizeResult row;
            row.count = count;
            row.size = collective_bytes(c, count, world);
            if (observer.size) observer.size(c, row.size);
            if (plan.check) {
                row.wrong = check_once(comm, c, buffers, count);
                buffers = make_buffers(c, count, world, options);
            }
            for (int i = 0; i < plan.warmup; ++i) run_once(comm, c, buffers);
            std::vector<double> times(static_cast<size_t>(plan.iterations));
            for (auto& t : times) {
                comm.barrier();
                const auto start = Clock::now();
                run_once(comm, c, buffers);
                t = std::max(1e-9, seconds_since(start));
            }
            row.time = perf::summarize(slowest_rank(comm, times));
            set_bandwidths(row, c, world);
            if (observer.row) observer.row(row);
            result.rows.push_back(row);
        }
        fit_rows(result);
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
    timing.device_index = comm.local_rank();
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

// One rank's part of the run.
int profile_rank(const ProfileConfig& config, const SweepPlan& plan, Backend backend) {
    const Rendezvous rendezvous = resolve_rendezvous(config.rendezvous);
    if (rendezvous.world_size > 1) cli::set_log_rank(rendezvous.rank);
    at::set_num_threads(1);

    auto comm = ProcessGroupCollectives::join(rendezvous, backend);
    const bool leader = comm->rank() == 0;
    const bool human = leader && human_output();
    ProfileMeta meta;
    meta.world_size = comm->world_size();
    meta.backend = backend_name(backend);
    meta.device = config.device;
    meta.hosts = comm->hosts();
    meta.plan = plan;
    meta.provenance = config.provenance;
    meta.output = config.output;
    // One rank's collectives copy memory within the process: their "bandwidth" says nothing of a network.
    if (leader && meta.world_size == 1)
        spdlog::warn("one rank measures no network; run 2 or more ranks (--nproc 2 on this machine, or "
                     "torchrun on several machines) for a profile compress-bench can use");
    std::vector<CollectiveResult> results;
    run_in_group(*comm, [&] {
        if (leader && !config.output.empty()) {
            create_parent_directories(config.output);
            io::check_writable_destination(config.output);
        }
        if (human) {
            const size_t machines = std::set<std::string>(meta.hosts.begin(), meta.hosts.end()).size();
            std::cerr << "# comm-profile " << ACC_VERSION << ": " << meta.world_size
                      << (meta.world_size == 1 ? " rank" : " ranks") << " on " << machines
                      << (machines == 1 ? " host" : " hosts") << ", " << meta.backend << " (" << meta.device
                      << "), LibTorch " << compat::torch_version() << "\n"
                      << "# sizes " << size_text(plan.min_bytes) << " .. " << size_text(plan.max_bytes) << " (factor "
                      << plan.factor << "), " << plan.iterations << " timed iterations after " << plan.warmup
                      << " warm-up per size; each time is the slowest rank's\n"
                      << "# check: " << (plan.check ? "on" : "off") << "\n#\n";
        }
        SweepObserver observer;
        // Which size runs, and the time left: large sizes take seconds each.
        cli::Progress::Options progress_options;
        if (!leader) progress_options.style = cli::Progress::Style::quiet;
        cli::Progress progress(progress_options);
        std::int64_t sizes = 0;
        double work = 0;
        auto size_work = [&](std::int64_t bytes) {  // a call costs about its latency plus its bytes
            return static_cast<double>(plan.iterations + plan.warmup) * (65536.0 + static_cast<double>(bytes));
        };
        for (perf::Collective c : plan.collectives)
            for (std::int64_t count : plan_counts(c, plan, meta.world_size)) {
                ++sizes;
                work += size_work(collective_bytes(c, count, meta.world_size));
            }
        progress.begin_items(sizes, work);
        observer.size = [&](perf::Collective c, std::int64_t bytes) {
            progress.start_item(std::string(perf::collective_name(c)) + " " + size_text(bytes), size_work(bytes));
        };
        observer.row = [&](const SizeResult&) { progress.finish_item(); };
        if (human) {
            observer.begin = [](perf::Collective c) { std::cerr << table_header(c); };
            observer.row = [&](const SizeResult& row) {
                progress.finish_item();
                std::cerr << table_row(row);
            };
            observer.end = [](const CollectiveResult& r) { std::cerr << fit_line(r) << "#\n"; };
        }
        // Before the sweep: a rank that would time a model and one that would not must not meet halfway.
        agree_on(*comm, config.model.empty() ? "" : config.model + ":" + std::to_string(compute_batch(config)),
                 "model options", "--model and --batch-size");
        results = measure(*comm, plan, observer);
        if (!config.model.empty()) {
            meta.compute = measure_compute(*comm, config, plan);
            if (human) std::cerr << compute_lines(*meta.compute, meta.world_size);
        }
        if (leader) {
            if (!config.output.empty()) io::write_comm_profile(config.output, to_comm_profile(results, meta));
            if (config.csv) std::cout << results_csv(results) << std::flush;
            if (config.json) std::cout << results_json(results, meta) << std::flush;
        }
        return cli::kExitOk;
    });
    const std::int64_t wrong = total_wrong(results);
    if (human) {
        std::cerr << "# Avg bus bandwidth: " << fit_number(average_busbw(results) / 1e9, 10) << " GB/s\n";
        if (plan.check) std::cerr << "# Wrong values: " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
    }
    if (leader && !config.output.empty()) spdlog::info("wrote {}", config.output);
    if (wrong > 0)
        throw Error("--check: " + std::to_string(wrong) + " values were wrong; the " + meta.backend +
                    " collectives returned incorrect results");
    return cli::kExitOk;
}

}  // namespace

int run_profile(const ProfileConfig& config, int argc, char** argv) {
    // Everything that can be checked alone is checked before any rank starts.
    const SweepPlan plan = make_plan(config);
    if (config.csv && config.json) throw UsageError("--csv and --json both print on standard output; choose one");
    const auto& models = train::model_names();
    if (!config.model.empty() && std::find(models.begin(), models.end(), config.model) == models.end())
        throw UsageError("--model: unknown model '" + config.model + "' (known: " + join(models, ", ") + ")");
    if (config.model.empty() && config.batch_size != 0)
        throw UsageError("--batch-size: sets the batch of the timed model; it needs --model");
    if (config.batch_size < 0) throw UsageError("--batch-size: must be at least 1");
    if (config.device != "cpu" && config.device != "cuda")
        throw UsageError("--device: must be 'cpu' or 'cuda', not '" + config.device + "'");
    const Backend backend = config.device == "cuda" ? Backend::nccl : Backend::gloo;
    check_backend_available(backend);
    return run_ranks(config.rendezvous, argc, argv, "comm-profile",
                     [&] { return profile_rank(config, plan, backend); });
}

}  // namespace acc::comm
