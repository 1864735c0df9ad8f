// Collectives over the threads of one process: W "ranks", each a thread with its own
// objects, meeting in shared slots. The tests of code written against
// acc::comm::Collectives run here on 2-3 ranks without a network; the same test
// bodies can run on real process-group ranks, since they only see the interface.
#pragma once

#include "comm/collectives.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace acc::test {

/// W ranks of in-process collectives. Collectives are matched by their order on each
/// rank, as with a process group; a rank that does not arrive within the timeout makes
/// the others throw acc::Error, and a rank that throws aborts the others at once.
class ThreadGroup {
public:
    explicit ThreadGroup(int world_size, double timeout_seconds = 60);
    ~ThreadGroup();
    int world_size() const;
    comm::Collectives& rank(int r);
    /// Runs body(rank, collectives) on one thread per rank and waits for all; rethrows
    /// the first exception (by rank order) after every thread has ended.
    void run(const std::function<void(int, comm::Collectives&)>& body);
    /// The same, returning each rank's error message ("" for a rank that succeeded).
    std::vector<std::string> run_collect(const std::function<void(int, comm::Collectives&)>& body);

    struct Shared;

private:
    std::shared_ptr<Shared> shared_;
    std::vector<std::unique_ptr<comm::Collectives>> ranks_;
};

/// Runs body(rank, collectives) on `world` ranks of a ThreadGroup (30 s timeout) and
/// waits for all; rethrows the first rank's exception, as ThreadGroup::run does.
void thread_ranks(int world, const std::function<void(int, comm::Collectives&)>& body);

/// One recorded collective call: what this rank handed in.
struct Recorded {
    std::string kind;  ///< "allreduce", "allgather", "broadcast"
    at::Tensor input;  ///< a copy taken at the call
};

/// Forwards to another Collectives and keeps a copy of every input.
class RecordingCollectives : public comm::Collectives {
public:
    explicit RecordingCollectives(comm::Collectives& inner) : inner_(inner) {}
    int rank() const override { return inner_.rank(); }
    int world_size() const override { return inner_.world_size(); }
    void allreduce(at::Tensor& tensor, comm::ReduceOp op = comm::ReduceOp::sum) override;
    std::unique_ptr<comm::Work> allreduce_async(at::Tensor& tensor, comm::ReduceOp op = comm::ReduceOp::sum) override;
    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override;
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override;
    void broadcast(at::Tensor& tensor, int root) override;
    void barrier() override { inner_.barrier(); }
    const comm::Traffic& traffic() const override { return inner_.traffic(); }

    std::vector<Recorded> calls;

private:
    comm::Collectives& inner_;
};

}  // namespace acc::test
