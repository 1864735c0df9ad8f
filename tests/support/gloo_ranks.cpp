#include "support/gloo_ranks.hpp"

#include "comm/launch.hpp"
#include "comm/rendezvous.hpp"

#include <csignal>
#include <cstdlib>
#include <exception>
#include <thread>

namespace acc::test {
namespace {

// LibTorch 2.x's flight recorder, one per process, records every Gloo collective;
// several process groups of one process used from several threads race in it
// (seen with 2.11: a segfault in about one run in eight). The tools run one group
// per process; a test program runs several ranks' groups in one, so it is off
// (unless the caller set it) from the program's start: the recorder reads its size
// once, when the first group is made, which may be a test's own before any
// gloo_ranks() call.
const bool flight_recorder_off = [] { return ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0) == 0; }();

}  // namespace

std::vector<std::string> gloo_ranks(int world, const std::function<void(comm::ProcessGroupCollectives&)>& body,
                                    double timeout) {
    // As the tools do (cli/tool.cpp): a rank writing to a peer that has gone gets an
    // error to report, not SIGPIPE, which would end the whole test process.
    std::signal(SIGPIPE, SIG_IGN);
    const comm::PortReservation reserved;
    const int port = reserved.port();
    std::vector<std::string> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
        threads.emplace_back([&, r] {
            try {
                comm::Rendezvous rv;
                rv.rank = r;
                rv.world_size = world;
                rv.master_port = port;
                rv.timeout = timeout;
                auto comm = comm::ProcessGroupCollectives::join(rv);
                body(*comm);
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = e.what();
            }
        });
    }
    for (auto& t : threads) t.join();
    return errors;
}

}  // namespace acc::test
