#include "support/gloo_ranks.hpp"

#include "comm/launch.hpp"
#include "comm/rendezvous.hpp"

#include <csignal>
#include <exception>
#include <thread>

namespace acc::test {

std::vector<std::string> gloo_ranks(int world, const std::function<void(comm::ProcessGroupCollectives&)>& body,
                                    double timeout) {
    // As the tools do (cli/tool.cpp): a rank writing to a peer that has gone gets an
    // error to report, not SIGPIPE, which would end the whole test process.
    std::signal(SIGPIPE, SIG_IGN);
    const int port = comm::free_local_port();
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
