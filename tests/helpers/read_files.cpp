// Reads files of one kind through lib/io, each in its own child process under a
// time limit, and counts how each ended; the fuzz test uses it to prove that no
// damaged file crashes or hangs a reader.
//   read_files grads|schedule|metrics|comm-profile|compress-bench SECONDS FILE...
// Prints "<file>: ok|error|crash (signal N)|hang" per file and a summary line;
// exits 1 when any file crashed or hung.
#include "base/error.hpp"
#include "io/bench.hpp"
#include "io/comm_profile.hpp"
#include "io/grads.hpp"
#include "io/metrics.hpp"
#include "io/schedule.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

void read_one(const std::string& kind, const std::string& path) {
    using namespace acc::io;
    if (kind == "grads") {
        GradStats g = read_grads(path);
        for (std::int64_t e : g.snapshot_epochs) read_snapshot(path, e);
    } else if (kind == "schedule") {
        read_schedule(path);
    } else if (kind == "metrics") {
        read_metrics(path);
    } else if (kind == "comm-profile") {
        read_comm_profile(path);
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
    int ok = 0, errors = 0, crashes = 0, hangs = 0;
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
        } else {
            ++crashes;
            std::printf("%s: exit %d\n", argv[i], WEXITSTATUS(status));
        }
    }
    std::printf("%s: %d files, %d read, %d refused, %d crashed, %d hung\n", kind.c_str(), argc - 3, ok, errors, crashes,
                hangs);
    return crashes + hangs > 0 ? 1 : 0;
}
