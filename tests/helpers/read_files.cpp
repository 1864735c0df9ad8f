// Reads files of one kind through lib/io, each in its own child process under a
// time limit, and counts how each ended; the fuzz test uses it to prove that no
// damaged file crashes or hangs a reader. A schedule that reads is also planned as
// train-dist plans it, and a comm profile turned into compress-bench's network
// model: what they give must be usable numbers, or the file must be refused.
//   read_files grads|schedule|metrics|comm-profile|compress-bench SECONDS FILE...
// Prints "<file>: ok|error|crash (signal N)|hang|garbage" per file and a summary
// line; exits 1 when any file crashed, hung or gave garbage.
#include "plan/run_plan.hpp"
#include "base/error.hpp"
#include "io/bench.hpp"
#include "io/comm_profile.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "io/metrics.hpp"
#include "io/schedule.hpp"
#include "perf/fit.hpp"
#include "perf/model.hpp"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

constexpr int kGarbage = 4;  // the child's exit code when a file was accepted but its numbers are unusable

void garbage(const std::string& path, const std::string& what) {
    std::fprintf(stderr, "%s: accepted, but %s\n", path.c_str(), what.c_str());
    std::_Exit(kGarbage);
}

// What train-dist does with a schedule before and while training.
void plan_schedule(const acc::io::Schedule& s, const std::string& path) {
    const auto levels = acc::plan::check_schedule(s, path, s.parameters, s.epochs, false, 1, false);
    const acc::plan::RunPlan plan = acc::plan::RunPlan::from_schedule(s, levels, s.parameters, s.epochs);
    for (std::int64_t e = 0; e < plan.epochs(); ++e) {
        for (std::int32_t level : plan.levels_of(e).level)
            if (level < 0 || static_cast<size_t>(level) >= plan.levels().size()) garbage(path, "a level out of range");
        if (!plan.batch_mode()) continue;
        const double scale = plan.lr_scale(e);
        if (plan.global_batch(e) < 1) garbage(path, "a batch size below 1");
        if (!(scale > 0) || !std::isfinite(static_cast<float>(scale))) garbage(path, "an lr_scale train-dist cannot use");
    }
}

// What compress-bench does with a comm profile: a network model per collective.
void model_network(const acc::io::CommProfile& profile, const std::string& path) {
    for (const auto& c : profile.collectives) {
        if (!(c.alpha >= 0) || !std::isfinite(c.alpha) || !(c.bandwidth > 0))
            garbage(path, c.name + "'s fit is not a latency and a bandwidth");
        const acc::perf::Collective kind = acc::perf::parse_collective(c.name);
        const acc::perf::Network net =
            acc::perf::network_from_fit(kind, static_cast<int>(profile.world_size), c.alpha, c.bandwidth);
        if (!std::isfinite(net.alpha) || net.alpha < 0 || !(net.bandwidth > 0))
            garbage(path, c.name + " gives a network model without a finite latency and a positive bandwidth");
    }
}

// What a grads file that reads must hold: ranks to plan for, a profile only from
// 1.1 on, a spectrum for no name but a matrix parameter's, and Top-k tails of 0
// where Top-k keeps everything (fraction 1, or one entry).
void check_grads(const acc::io::GradStats& g, const std::string& path) {
    if (g.run.world_size < 1) garbage(path, "a world_size below 1");
    if (!g.has_profile) return;
    if (g.header.major == 1 && g.header.minor < 1) garbage(path, "a profile in a 1.0 file");
    const acc::io::H5File f = acc::io::H5File::open(path, false);
    if (f.exists("/profile/singular_values"))
        for (const std::string& name : f.list("/profile/singular_values")) {
            bool matrix = false;
            for (const auto& p : g.parameters) matrix = matrix || (p.name == name && p.is_matrix());
            if (!matrix) garbage(path, "/profile/singular_values/" + name + ", which names no matrix parameter");
        }
    for (const auto& epoch : g.profile.topk_tail)
        for (size_t p = 0; p < epoch.size(); ++p)
            for (size_t k = 0; k < epoch[p].size(); ++k)
                if (epoch[p][k] != 0 && (g.profile.topk_fractions[k] == 1 || g.parameters[p].numel() <= 1))
                    garbage(path, "a Top-k tail where Top-k keeps every entry");
}

// A schedule's epochs as a reader must have found them numbered.
void check_epoch_index(const acc::io::Schedule& s, const std::string& path) {
    const acc::io::H5File f = acc::io::H5File::open(path, false);
    if (!f.exists("/epochs/epoch")) return;
    const auto index = f.read<std::int64_t>("/epochs/epoch");
    if (static_cast<std::int64_t>(index.size()) != s.epochs) garbage(path, "an /epochs/epoch of another length");
    for (size_t e = 0; e < index.size(); ++e)
        if (index[e] != static_cast<std::int64_t>(e)) garbage(path, "an /epochs/epoch that is not 0..E-1");
}

void read_one(const std::string& kind, const std::string& path) {
    using namespace acc::io;
    if (kind == "grads") {
        GradStats g = read_grads(path);
        for (std::int64_t e : g.snapshot_epochs) read_snapshot(path, e);
        check_grads(g, path);
    } else if (kind == "schedule") {
        const Schedule s = read_schedule(path);
        check_epoch_index(s, path);
        plan_schedule(s, path);
    } else if (kind == "metrics") {
        read_metrics(path);
    } else if (kind == "comm-profile") {
        model_network(read_comm_profile(path), path);
    } else if (kind == "compress-bench") {
        read_bench(path);
    } else {
        std::fprintf(stderr, "read_files: unknown kind '%s'\n", kind.c_str());
        std::_Exit(2);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: read_files KIND SECONDS FILE...\n");
        return 2;
    }
    const std::string kind = argv[1];
    const unsigned seconds = static_cast<unsigned>(std::atoi(argv[2]));
    int ok = 0, errors = 0, crashes = 0, hangs = 0, garbled = 0;
    for (int i = 3; i < argc; ++i) {
        std::fflush(stdout);
        pid_t child = fork();
        if (child < 0) {
            std::perror("read_files: fork");
            return 2;
        }
        if (child == 0) {
            // A reader must refuse a damaged file without asking for absurd memory.
            rlimit memory{std::size_t{4} << 30, std::size_t{4} << 30};
            setrlimit(RLIMIT_AS, &memory);
            alarm(seconds);
            int code = 0;
            try {
                read_one(kind, argv[i]);
            } catch (const acc::Error& e) {
                code = 1;
            } catch (const std::exception& e) {
                std::fprintf(stderr, "%s: unexpected %s\n", argv[i], e.what());
                code = 3;
            }
            std::_Exit(code);
        }
        int status = 0;
        waitpid(child, &status, 0);
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
            ++hangs;
            std::printf("%s: hang\n", argv[i]);
        } else if (WIFSIGNALED(status)) {
            ++crashes;
            std::printf("%s: crash (signal %d)\n", argv[i], WTERMSIG(status));
        } else if (WEXITSTATUS(status) == 0) {
            ++ok;
        } else if (WEXITSTATUS(status) == 1) {
            ++errors;
        } else if (WEXITSTATUS(status) == kGarbage) {
            ++garbled;
            std::printf("%s: garbage\n", argv[i]);
        } else {
            ++crashes;
            std::printf("%s: exit %d\n", argv[i], WEXITSTATUS(status));
        }
    }
    std::printf("%s: %d files, %d read, %d refused, %d crashed, %d hung, %d garbage\n", kind.c_str(), argc - 3, ok,
                errors, crashes, hangs, garbled);
    return crashes + hangs + garbled > 0 ? 1 : 0;
}
