// lib/comm: rendezvous resolution, and the collectives over real Gloo process
// groups, one thread per rank on loopback.
#include "base/error.hpp"
#include "comm/launch.hpp"
#include "comm/process_group.hpp"
#include "comm/rendezvous.hpp"
#include "comm/run_store.hpp"
#include "support/gloo_ranks.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace acc::comm;
using acc::test::expect_all_ok;
using acc::test::gloo_ranks;

namespace {

Environment fake_env(std::map<std::string, std::string> vars) {
    auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
    return [shared](const char* name) -> const char* {
        auto it = shared->find(name);
        return it == shared->end() ? nullptr : it->second.c_str();
    };
}

std::string usage_error(const RendezvousConfig& config, const Environment& env) {
    try {
        resolve_rendezvous(config, env);
    } catch (const acc::UsageError& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST(Rendezvous, DefaultsToASingleLocalRank) {
    Rendezvous r = resolve_rendezvous({}, fake_env({}));
    EXPECT_EQ(r.rank, 0);
    EXPECT_EQ(r.world_size, 1);
    EXPECT_EQ(r.master_addr, "127.0.0.1");
    EXPECT_EQ(r.master_port, 29500);
    EXPECT_FALSE(r.agent_store);
}

TEST(Rendezvous, ReadsTorchrunsEnvironment) {
    Rendezvous r = resolve_rendezvous({}, fake_env({{"RANK", "3"},
                                                    {"WORLD_SIZE", "4"},
                                                    {"LOCAL_RANK", "1"},
                                                    {"MASTER_ADDR", "node7"},
                                                    {"MASTER_PORT", "1234"},
                                                    {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                                    {"TORCHELASTIC_RESTART_COUNT", "2"}}));
    EXPECT_EQ(r.rank, 3);
    EXPECT_EQ(r.world_size, 4);
    EXPECT_EQ(r.local_rank, 1);
    EXPECT_TRUE(r.local_rank_given);
    EXPECT_EQ(r.master_addr, "node7");
    EXPECT_EQ(r.master_port, 1234);
    EXPECT_TRUE(r.agent_store);
    EXPECT_EQ(r.restart_count, 2);
    EXPECT_EQ(agent_store_prefix(r.restart_count), "/worker/attempt_2");
    EXPECT_EQ(r.run_token, "");
    EXPECT_EQ(resolve_rendezvous({}, fake_env({{"ACC_RUN_TOKEN", "s3cret"}})).run_token, "s3cret");
}

TEST(Rendezvous, FlagsOverrideTheEnvironment) {
    RendezvousConfig c;
    c.rank = 1;
    c.world_size = 2;
    c.master_port = 4000;
    Rendezvous r = resolve_rendezvous(c, fake_env({{"RANK", "3"},
                                                   {"WORLD_SIZE", "4"},
                                                   {"LOCAL_RANK", "3"},
                                                   {"MASTER_PORT", "1234"},
                                                   {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
    EXPECT_EQ(r.rank, 1);
    EXPECT_EQ(r.world_size, 2);
    EXPECT_EQ(r.local_rank, 1);
    EXPECT_FALSE(r.local_rank_given) << "LOCAL_RANK belongs to the launcher whose RANK --rank replaced";
    EXPECT_EQ(r.master_port, 4000);
    EXPECT_FALSE(r.agent_store) << "a store moved by flags is not torchrun's agent store";
}

TEST(Rendezvous, NamesTheOptionOrVariableAtFault) {
    EXPECT_EQ(usage_error({}, fake_env({{"RANK", "two"}})),
              "RANK='two' in the environment is not a whole number in [0, 1048576]");
    EXPECT_EQ(usage_error({}, fake_env({{"MASTER_PORT", "70000"}})),
              "MASTER_PORT='70000' in the environment is not a whole number in [1, 65535]");
    EXPECT_EQ(usage_error({}, fake_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
              "RANK 2 is outside the world: WORLD_SIZE is 2, so ranks are 0..1");
    RendezvousConfig c;
    c.rank = 1;
    EXPECT_EQ(usage_error(c, fake_env({})),
              "--rank 1 is outside the world: the default world size is 1, so ranks are 0..0");
}

// A wildcard address would make rank 0's store listen on every interface.
TEST(Rendezvous, RefusesAWildcardMasterAddress) {
    RendezvousConfig c;
    for (const char* wildcard : {"0.0.0.0", "::", "[::]"}) {
        c.master_addr = wildcard;
        EXPECT_EQ(usage_error(c, fake_env({})).rfind("--master-addr " + std::string(wildcard) +
                                                         ": is the address the other ranks connect to", 0),
                  0u);
    }
    EXPECT_EQ(usage_error({}, fake_env({{"MASTER_ADDR", "0.0.0.0"}})).rfind("MASTER_ADDR=0.0.0.0: is the address", 0),
              0u);
    c.master_addr = "127.0.0.1";
    EXPECT_EQ(resolve_rendezvous(c, fake_env({})).master_addr, "127.0.0.1");
}

TEST(Launch, WithoutNprocRunsInThisProcess) {
    RendezvousConfig config;
    char name[] = "comm-profile";
    char* argv[] = {name, nullptr};
    EXPECT_EQ(run_ranks(config, 1, argv, "comm-profile", [] { return 7; }), 7);
    config.nproc = 2;
    config.rank = 0;
    EXPECT_THROW(run_ranks(config, 1, argv, "comm-profile", [] { return 7; }), acc::UsageError);
    EXPECT_GT(PortReservation().port(), 0);
}

namespace {

sockaddr_in loopback(int port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    return address;
}

// Binds a TCP socket to 127.0.0.1:port, optionally with SO_REUSEADDR; errno of bind, 0 when bound.
int bind_loopback(int fd, int port, bool reuse) {
    const int on = 1;
    if (reuse) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    const sockaddr_in address = loopback(port);
    return ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
}

}  // namespace

// A reserved port looks free to a connecting rank (refused) and to the store rank 0
// opens there (a listener with SO_REUSEADDR), but no socket that did not ask to
// share it gets it, and ranks meet there.
TEST(Launch, AReservedPortIsKeptForTheStore) {
    const PortReservation reserved;
    const int port = reserved.port();
    ASSERT_GT(port, 0);

    const int client = ::socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in address = loopback(port);
    EXPECT_NE(::connect(client, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
    EXPECT_EQ(errno, ECONNREFUSED);
    ::close(client);

    const int other = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(bind_loopback(other, port, false), EADDRINUSE);
    ::close(other);

    const int store = ::socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(bind_loopback(store, port, true), 0);
    EXPECT_EQ(::listen(store, 4), 0);
    ::close(store);

    std::vector<std::string> errors(2);
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r)
        ranks.emplace_back([&, r] {
            try {
                Rendezvous rv;
                rv.rank = r;
                rv.world_size = 2;
                rv.master_port = port;
                rv.timeout = 30;
                auto group = ProcessGroupCollectives::join(rv);
                group->finish();
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = e.what();
            }
        });
    for (auto& t : ranks) t.join();
    expect_all_ok(errors);
}

// Run as its own ranks by --nproc's launcher: rank 1 fails at once with status 3,
// rank 0 waits (as a rank blocked in a rendezvous or a collective would) until
// the launcher ends it. The launcher's status is rank 1's, not the 143 of the
// rank it ended.
TEST(Launch, ReturnsTheFailedRanksStatusNotThatOfTheRanksItEnded) {
    const char* launcher = std::getenv("ACC_NPROC_LAUNCHER");
    if (launcher && std::to_string(::getppid()) == launcher) {
        if (std::string(std::getenv("RANK")) == "1") std::_Exit(3);
        std::this_thread::sleep_for(std::chrono::seconds(60));
        std::_Exit(0);
    }
    RendezvousConfig config;
    config.nproc = 2;
    std::string self = "test_comm";
    std::string filter = "--gtest_filter=Launch.ReturnsTheFailedRanksStatusNotThatOfTheRanksItEnded";
    char* argv[] = {self.data(), filter.data(), nullptr};
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(run_ranks(config, 2, argv, "test_comm", [] { return 0; }, 1.0), 3);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));  // not rank 0's 60 s
}

TEST(Launch, ALiveLineReadTogetherWithTheNextLineIsSplitOff) {
    const std::string clear = "\r\033[K";
    // comm-profile drew its item's line, cleared it and wrote the result, all in one read.
    const auto [live, line] =
        acc::comm::split_live_lines(clear + "allreduce 4 KiB  item 1/9" + clear + clear + "  4096  1024\n");
    EXPECT_EQ(live, clear + "allreduce 4 KiB  item 1/9" + clear);
    EXPECT_EQ(line, clear + "  4096  1024\n");
    // Several live lines in front; a line after a cleared live line; plain lines.
    EXPECT_EQ(acc::comm::split_live_lines(clear + "a" + clear + "b" + clear + "c\n").first, clear + "a" + clear + "b");
    EXPECT_EQ(acc::comm::split_live_lines(clear + clear + "c\n"), std::make_pair(std::string(), clear + clear + "c\n"));
    EXPECT_EQ(acc::comm::split_live_lines("c\n"), std::make_pair(std::string(), std::string("c\n")));
    EXPECT_EQ(acc::comm::split_live_lines("c" + clear + "d\n").first, "");
}

TEST(ProcessGroup, TheBackendFollowsTheDeviceUnlessChosen) {
    EXPECT_EQ(run_backend(std::nullopt, acc::Device::cpu), Backend::gloo);
    EXPECT_EQ(run_backend(std::nullopt, acc::Device::cuda), Backend::nccl);
    EXPECT_EQ(run_backend(Backend::gloo, acc::Device::cuda), Backend::gloo);  // ranks sharing a GPU
    EXPECT_EQ(run_backend(Backend::nccl, acc::Device::cuda), Backend::nccl);
    try {
        run_backend(Backend::nccl, acc::Device::cpu);
        FAIL() << "nccl with --device cpu was accepted";
    } catch (const acc::UsageError& e) {
        EXPECT_STREQ(e.what(), "--backend nccl: needs --device cuda (NCCL reduces tensors on GPUs)");
    }
}

TEST(ProcessGroup, RanksStartedByHandTakeTheirRankModuloTheGpus) {
    // README's two-machine example: --rank 1 on a one-GPU machine uses GPU 0.
    RendezvousConfig c;
    c.rank = 1;
    c.world_size = 2;
    Rendezvous by_hand = resolve_rendezvous(c, fake_env({{"LOCAL_RANK", "1"}}));
    EXPECT_EQ(rank_gpu_index(by_hand, 1), 0);
    EXPECT_EQ(rank_gpu(by_hand.rank, rank_gpu_index(by_hand, 1), 1), at::Device(at::kCUDA, 0));
    c.rank = 9;
    c.world_size = 16;
    EXPECT_EQ(rank_gpu_index(resolve_rendezvous(c, fake_env({})), 8), 1);
    // RANK alone (a launcher that sets no LOCAL_RANK) likewise; torchrun's LOCAL_RANK is kept.
    EXPECT_EQ(rank_gpu_index(resolve_rendezvous({}, fake_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}})), 4), 1);
    const Rendezvous launched =
        resolve_rendezvous({}, fake_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "3"}}));
    EXPECT_EQ(rank_gpu_index(launched, 4), 3);
    EXPECT_EQ(rank_gpu_index(launched, 2), 3) << "a LOCAL_RANK beyond the GPUs is rank_gpu's to refuse";
    EXPECT_EQ(rank_gpu_index(resolve_rendezvous(c, fake_env({})), 0), 9) << "no GPU: rank_gpu refuses it";
}

TEST(ProcessGroup, EachRankNeedsItsOwnGpu) {
    EXPECT_EQ(rank_gpu(0, 0, 1), at::Device(at::kCUDA, 0));
    EXPECT_EQ(rank_gpu(5, 1, 2), at::Device(at::kCUDA, 1));  // LOCAL_RANK picks the GPU, not the global rank
    try {
        rank_gpu(1, 1, 1);
        FAIL() << "rank 1 on a machine with one GPU was accepted";
    } catch (const acc::UsageError&) {
        FAIL() << "a missing GPU is a runtime error, not a usage error";
    } catch (const acc::Error& e) {
        EXPECT_STREQ(e.what(),
                     "rank 1 needs GPU 1 (LOCAL_RANK), but this machine has 1 GPU; start at most one rank per GPU");
    }
    EXPECT_THROW(rank_gpu(0, 0, 0), acc::Error);
    // Gloo ranks share the GPUs there are (two ranks on a one-GPU machine), but need one.
    EXPECT_EQ(rank_gpu(1, 1, 1, Backend::gloo), at::Device(at::kCUDA, 0));
    EXPECT_EQ(rank_gpu(3, 3, 2, Backend::gloo), at::Device(at::kCUDA, 1));
    EXPECT_THROW(rank_gpu(1, 1, 0, Backend::gloo), acc::Error);
    EXPECT_THROW(rank_gpu(1, 1, 1, Backend::nccl), acc::Error);
    EXPECT_THROW(rank_gpu(0, -1, 4), acc::Error);
    // Counting the GPUs itself: a build or machine without one refuses every rank.
    if (!torch::cuda::is_available()) {
        EXPECT_THROW(rank_gpu(0, 0), acc::Error);
    }
}

TEST(ProcessGroup, AllreduceSumAverageAndMaxAreExactAndCounted) {
    expect_all_ok(gloo_ranks(2, [](ProcessGroupCollectives& comm) {
        const int r = comm.rank();
        at::Tensor t = torch::full({1000}, static_cast<float>(r + 1));
        comm.allreduce(t);
        EXPECT_TRUE(t.eq(3).all().item<bool>());
        at::Tensor a = torch::full({10}, static_cast<float>(2 * r + 1));  // 1 and 3: average 2
        comm.allreduce(a, acc::comm::ReduceOp::average);
        EXPECT_TRUE(a.eq(2).all().item<bool>());
        at::Tensor m = torch::tensor({static_cast<float>(r), static_cast<float>(-r)});
        comm.allreduce(m, acc::comm::ReduceOp::max);
        EXPECT_TRUE(m.equal(torch::tensor({1.0f, 0.0f})));
        // A strided view is reduced in place too.
        at::Tensor grid = torch::zeros({4, 4});
        at::Tensor column = grid.select(1, 2);
        column.fill_(static_cast<float>(r + 1));
        comm.allreduce(column);
        EXPECT_TRUE(grid.select(1, 2).eq(3).all().item<bool>());
        EXPECT_EQ(grid.sum().item<float>(), 12);
        // docs/metrics.md: an allreduce of 4n bytes counts 4n.
        EXPECT_EQ(comm.traffic().calls, 4);
        EXPECT_EQ(comm.traffic().bytes, 4000 + 40 + 8 + 16);
        EXPECT_DOUBLE_EQ(comm.traffic().floats(), 1016);
        EXPECT_GT(comm.traffic().seconds, 0);
    }));
}

TEST(ProcessGroup, GatherAndBroadcastCountTheirOwnPartOnce) {
    expect_all_ok(gloo_ranks(3, [](ProcessGroupCollectives& comm) {
        const int r = comm.rank();
        std::vector<at::Tensor> parts = comm.allgather(torch::full({5}, static_cast<float>(r)));
        ASSERT_EQ(parts.size(), 3u);
        for (int q = 0; q < 3; ++q) EXPECT_TRUE(parts[static_cast<size_t>(q)].eq(q).all().item<bool>());
        EXPECT_EQ(comm.traffic().bytes, 20);

        // Rank r sends r + 1 values.
        std::vector<at::Tensor> unequal = comm.allgather_unequal(torch::arange(r + 1, torch::kLong) * 10);
        for (int q = 0; q < 3; ++q)
            EXPECT_TRUE(unequal[static_cast<size_t>(q)].equal(torch::arange(q + 1, torch::kLong) * 10));
        EXPECT_EQ(comm.traffic().calls, 2);
        EXPECT_EQ(comm.traffic().bytes, 20 + 8 * (r + 1));

        at::Tensor b = r == 1 ? torch::arange(6, torch::kFloat) : torch::zeros({6});
        comm.broadcast(b, 1);
        EXPECT_TRUE(b.equal(torch::arange(6, torch::kFloat)));
        EXPECT_EQ(comm.traffic().bytes, 20 + 8 * (r + 1) + (r == 1 ? 24 : 0));
        comm.barrier();
        EXPECT_EQ(comm.traffic().calls, 4);
        EXPECT_THROW(comm.broadcast(b, 3), acc::Error);
        EXPECT_THROW(comm.allgather_unequal(torch::zeros({2, 2})), acc::Error);
        comm.reset_traffic();
        EXPECT_EQ(comm.traffic().bytes, 0);
        EXPECT_EQ(comm.hosts().size(), 3u);
    }));
}

TEST(ProcessGroup, AsyncAllreduceFinishesOnWait) {
    expect_all_ok(gloo_ranks(2, [](ProcessGroupCollectives& comm) {
        at::Tensor t = torch::full({1 << 16}, static_cast<float>(comm.rank() + 1));
        at::Tensor u = torch::full({8}, 4.0f * static_cast<float>(comm.rank() + 1));
        auto first = comm.allreduce_async(t);
        auto second = comm.allreduce_async(u, acc::comm::ReduceOp::average);
        EXPECT_EQ(comm.traffic().calls, 2);
        EXPECT_EQ(comm.traffic().bytes, 4 * (1 << 16) + 32);
        first->wait();
        second->wait();
        EXPECT_TRUE(t.eq(3).all().item<bool>());
        EXPECT_TRUE(u.eq(6).all().item<bool>());
    }));
}

TEST(ProcessGroup, ReduceScatterSumsAndKeepsThisRanksChunk) {
    // Three ranks: chunk boundaries are not halves.
    expect_all_ok(gloo_ranks(3, [](ProcessGroupCollectives& comm) {
        const float r = static_cast<float>(comm.rank());
        at::Tensor input = torch::arange(12, torch::kFloat) + r;
        at::Tensor output = torch::zeros({2, 2});
        comm.reduce_scatter(input, output);
        // Sum over ranks of (j + r) = 3 j + 3, chunk `rank`, in the output's shape.
        at::Tensor expected = torch::arange(12, torch::kFloat).mul(3).add(3).narrow(0, 4 * comm.rank(), 4).view({2, 2});
        EXPECT_TRUE(output.equal(expected)) << output;
        // The input is left as it was.
        EXPECT_TRUE(input.equal(torch::arange(12, torch::kFloat) + r));
        EXPECT_EQ(comm.traffic().calls, 1);
        EXPECT_EQ(comm.traffic().bytes, 48);
        at::Tensor wrong = torch::zeros({5});
        EXPECT_THROW(comm.reduce_scatter(input, wrong), acc::Error);
    }));
}

TEST(ProcessGroup, ARankThatNeverArrivesIsNamed) {
    auto errors = gloo_ranks(
        1, [](ProcessGroupCollectives&) {}, 1.0);  // a world of one never waits
    expect_all_ok(errors);
    const PortReservation reserved;
    const int port = reserved.port();
    Rendezvous rv;
    rv.rank = 0;
    rv.world_size = 3;
    rv.master_port = port;
    rv.timeout = 1.0;
    try {
        ProcessGroupCollectives::join(rv);
        FAIL();
    } catch (const acc::Error& e) {
        EXPECT_EQ(std::string(e.what()), "rendezvous at 127.0.0.1:" + std::to_string(port) +
                                             " timed out after 1.0 s: ranks 1, 2 of 3 never arrived");
    }
}

TEST(ProcessGroup, MismatchedWorldSizesAreNamed) {
    const PortReservation reserved;
    const int port = reserved.port();
    auto join_as = [port](int rank, int world, std::string* error) {
        try {
            Rendezvous rv;
            rv.rank = rank;
            rv.world_size = world;
            rv.master_port = port;
            rv.timeout = 2;
            ProcessGroupCollectives::join(rv);
        } catch (const std::exception& e) {
            *error = e.what();
        }
    };
    std::string error0, error1;
    std::thread other(join_as, 1, 3, &error1);
    join_as(0, 2, &error0);
    other.join();
    EXPECT_EQ(error0, "rendezvous: rank 1 was started with a world size of 3, rank 0 with 2");
    EXPECT_EQ(error1, error0) << "the rank still waiting reports the same cause";
}

TEST(ProcessGroup, ARankWithAnotherRunTokenIsTurnedAway) {
    const PortReservation reserved;
    const int port = reserved.port();
    auto join_as = [port](int rank, const std::string& token, double timeout, std::string* error) {
        try {
            Rendezvous rv;
            rv.rank = rank;
            rv.world_size = 2;
            rv.master_port = port;
            rv.timeout = timeout;
            rv.run_token = token;
            ProcessGroupCollectives::join(rv);
        } catch (const std::exception& e) {
            *error = e.what();
        }
    };
    std::string error0, error1;
    std::thread host(join_as, 0, "secret", 3.0, &error0);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 0 opens the store first
    join_as(1, "guess", 3.0, &error1);
    host.join();
    const std::string where = "127.0.0.1:" + std::to_string(port);
    EXPECT_EQ(error1, "rendezvous at " + where +
                          ": the store there belongs to another run (it was opened with another run token); give "
                          "every rank the same ACC_RUN_TOKEN, or none");
    // Rank 0 cannot tell a rank with another token from any other process on the
    // store, whose word it must not take: it reports rank 1 missing.
    EXPECT_EQ(error0, "rendezvous at " + where + " timed out after 3.0 s: rank 1 of 2 never arrived");
}

TEST(ProcessGroup, AnAbortingRankTellsTheOthersWhy) {
    auto errors = gloo_ranks(2, [](ProcessGroupCollectives& comm) {
        at::Tensor t = torch::ones({1024});
        comm.allreduce(t);
        if (comm.rank() == 1) {
            comm.abort("comm.h5: disk full");
            throw acc::Error("stopped");
        }
        comm.allreduce(t);  // rank 1 is gone
    });
    EXPECT_EQ(errors[0], "rank 1 stopped: comm.h5: disk full");
    EXPECT_EQ(errors[1], "stopped");
}

// Ranks that join and finish with no collective between: the first to finish
// does not close its connections while the other still makes them.
TEST(ProcessGroup, AGroupJoinedAndFinishedAtOnceEndsCleanly) {
    for (int i = 0; i < 20; ++i)
        expect_all_ok(gloo_ranks(2, [](ProcessGroupCollectives& comm) { comm.finish(); }));
}

// A rank that finishes while another stops after their last collective does not
// wait --timeout for a goodbye that will not come.
TEST(ProcessGroup, FinishingBesideAStoppedRankEndsAtOnce) {
    double finish_seconds = -1;
    auto errors = gloo_ranks(
        2,
        [&](ProcessGroupCollectives& comm) {
            at::Tensor t = torch::ones({16});
            comm.allreduce(t);
            if (comm.rank() == 0) {
                comm.abort("out.h5: disk full");
                throw acc::Error("stopped");
            }
            const auto start = std::chrono::steady_clock::now();
            comm.finish();
            finish_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        },
        /*timeout=*/30);
    EXPECT_EQ(errors[0], "stopped");
    EXPECT_EQ(errors[1], "");
    EXPECT_GE(finish_seconds, 0);
    EXPECT_LT(finish_seconds, 10);
}

// ---- the run's rendezvous store ----------------------------------------------

namespace {

using Millis = std::chrono::milliseconds;

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A raw TCP connection to 127.0.0.1:port, as a process without the token makes it.
struct Stranger {
    int fd = -1;
    explicit Stranger(int port) {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const sockaddr_in address = loopback(port);
        EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
        timeval bound{3, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound);
    }
    ~Stranger() { ::close(fd); }
    void send(const std::vector<uint8_t>& bytes) const {
        ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    }
    // Whether the store closed this connection (within the 3 s receive bound).
    bool closed() const {
        uint8_t byte;
        for (;;) {
            const ssize_t n = ::recv(fd, &byte, 1, 0);
            if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
            if (n < 0) return false;
        }
    }
};

}  // namespace

TEST(RunStore, KeepsKeysAsC10dStoresDo) {
    const PortReservation reserved;
    RunStoreServer server("127.0.0.1", reserved.port(), "digest");
    auto store = c10::make_intrusive<RunStoreClient>("127.0.0.1", reserved.port(), "digest", Millis(2000));
    store->set("a", std::vector<uint8_t>{1, 2, 3});
    EXPECT_EQ(store->get("a"), (std::vector<uint8_t>{1, 2, 3}));
    EXPECT_EQ(store->add("n", 5), 5);
    EXPECT_EQ(store->add("n", -7), -2);
    EXPECT_EQ(store->get("n"), (std::vector<uint8_t>{'-', '2'}));
    EXPECT_TRUE(store->check({"a", "n"}));
    EXPECT_FALSE(store->check({"a", "b"}));
    EXPECT_EQ(store->getNumKeys(), 2);
    EXPECT_THROW(store->add("a", 1), StoreUnavailable) << "a key that holds no number";
    // compareSet: set when absent and nothing expected, or when it holds what is expected.
    EXPECT_EQ(store->compareSet("c", {}, {'x'}), (std::vector<uint8_t>{'x'}));
    EXPECT_EQ(store->compareSet("c", {'y'}, {'z'}), (std::vector<uint8_t>{'x'}));
    EXPECT_EQ(store->compareSet("c", {'x'}, {'z'}), (std::vector<uint8_t>{'z'}));
    EXPECT_TRUE(store->deleteKey("c"));
    EXPECT_FALSE(store->deleteKey("c"));
    // get and wait wait for a key another client sets, up to their timeout.
    std::thread later([&] {
        std::this_thread::sleep_for(Millis(100));
        RunStoreClient other("127.0.0.1", reserved.port(), "digest", Millis(2000));
        other.set("late", std::vector<uint8_t>{7});
    });
    EXPECT_EQ(store->get("late"), (std::vector<uint8_t>{7}));
    later.join();
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(store->wait({"never"}, Millis(200)), StoreUnavailable);
    EXPECT_LT(seconds_since(start), 1.0);
    auto copy = store->clone();
    EXPECT_EQ(copy->get("a"), (std::vector<uint8_t>{1, 2, 3}));
    const auto counts = server.counts();
    EXPECT_EQ(counts.authenticated, 3);
    EXPECT_EQ(counts.refused, 0);
}

// A process without the token that sends one byte and waits, which stalled
// LibTorch 1.13's TCPStore for every rank and kept its host from exiting: the
// ranks go on at once, the stranger is closed after hello_deadline, and the
// host stops at once.
TEST(RunStore, AStrangerThatSendsAByteAndWaitsStallsNobody) {
    const PortReservation reserved;
    RunStoreLimits limits;
    limits.hello_deadline = Millis(300);
    auto server = std::make_unique<RunStoreServer>("127.0.0.1", reserved.port(), "digest", limits);
    const Stranger stranger(reserved.port());
    stranger.send({0});
    Stranger holder(reserved.port());
    holder.send({0});
    auto start = std::chrono::steady_clock::now();
    RunStoreClient store("127.0.0.1", reserved.port(), "digest", Millis(2000));
    for (int i = 0; i < 50; ++i) store.add("k", 1);
    EXPECT_EQ(store.get("k"), (std::vector<uint8_t>{'5', '0'}));
    EXPECT_LT(seconds_since(start), 0.25);
    EXPECT_TRUE(stranger.closed());
    EXPECT_GE(server->counts().timed_out, 1);
    Stranger late(reserved.port());
    late.send({1});
    start = std::chrono::steady_clock::now();
    server.reset();
    EXPECT_LT(seconds_since(start), 0.25) << "the store's host stops whatever its clients do";
}

// Nothing a stranger sends makes the store hold more than a hello: a message
// announced too long, another token, garbage, or many connections at once.
TEST(RunStore, AStrangerCannotMakeItHoldMore) {
    const PortReservation reserved;
    RunStoreLimits limits;
    limits.max_strangers = 2;
    limits.max_stored_bytes = 4096;
    RunStoreServer server("127.0.0.1", reserved.port(), "digest", limits);
    {
        const Stranger big(reserved.port());
        big.send({0x00, 0x00, 0x40, 0x06});  // a message of 100 MiB
        EXPECT_TRUE(big.closed());
        const Stranger garbage(reserved.port());
        garbage.send({9, 0, 0, 0, 2, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'});  // a set before the hello
        EXPECT_TRUE(garbage.closed());
    }
    {
        const Stranger first(reserved.port());
        const Stranger second(reserved.port());
        const Stranger third(reserved.port());
        EXPECT_TRUE(first.closed()) << "the oldest connection without the token gives way";
    }
    try {
        RunStoreClient other("127.0.0.1", reserved.port(), "guess", Millis(2000));
        ADD_FAILURE() << "a client with another token was let in";
    } catch (const acc::Error& e) {
        EXPECT_EQ(std::string(e.what()),
                  "rendezvous at 127.0.0.1:" + std::to_string(reserved.port()) +
                      ": the store there belongs to another run (it was opened with another run token); give "
                      "every rank the same ACC_RUN_TOKEN, or none");
    }
    RunStoreClient store("127.0.0.1", reserved.port(), "digest", Millis(2000));
    EXPECT_THROW(store.set("big", std::vector<uint8_t>(5000)), StoreUnavailable) << "over the bytes it stores";
    EXPECT_THROW(store.set("huge", std::vector<uint8_t>((1 << 20) + 1)), StoreUnavailable) << "over a value's bytes";
    store.set("small", std::vector<uint8_t>(100));
    EXPECT_EQ(store.get("small").size(), 100u);
    const auto counts = server.counts();
    EXPECT_EQ(counts.stored_bytes, 105);
    EXPECT_GE(counts.refused, 4);
    EXPECT_LT(counts.buffered_bytes, 100);
}

// A store that takes connections and never answers (its host stopped, or
// another program on the port): every call ends within its timeout and names
// the address.
TEST(RunStore, EveryCallEndsWithinItsTimeout) {
    const PortReservation reserved;
    const int silent = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(bind_loopback(silent, reserved.port(), true), 0);
    ASSERT_EQ(::listen(silent, 16), 0);  // the kernel accepts; nobody answers
    const std::string where = "127.0.0.1:" + std::to_string(reserved.port());
    auto start = std::chrono::steady_clock::now();
    try {
        RunStoreClient store("127.0.0.1", reserved.port(), "digest", Millis(500));
        ADD_FAILURE() << "a silent store answered";
    } catch (const StoreUnavailable& e) {
        EXPECT_NE(std::string(e.what()).find("the rendezvous store at " + where + " did not answer"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_LT(seconds_since(start), 1.0);
    // Joining as rank 1: the one-line error within --timeout.
    Rendezvous rv;
    rv.rank = 1;
    rv.world_size = 2;
    rv.master_port = reserved.port();
    rv.timeout = 1.0;
    start = std::chrono::steady_clock::now();
    try {
        ProcessGroupCollectives::join(rv);
        ADD_FAILURE() << "joined a silent store";
    } catch (const acc::Error& e) {
        EXPECT_NE(std::string(e.what()).find("rendezvous: rank 1: timed out after 1.0 s: the rendezvous store at " +
                                             where + " did not answer"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_LT(seconds_since(start), 1.5);
    ::close(silent);
}
