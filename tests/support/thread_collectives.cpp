#include "support/thread_collectives.hpp"

#include "base/clock.hpp"
#include "base/error.hpp"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace acc::test {

namespace {
using Clock = std::chrono::steady_clock;
}

// One collective in progress: every rank's tensor, and the result once all arrived.
struct Slot {
    std::string kind;
    comm::ReduceOp op = comm::ReduceOp::sum;
    int root = 0;
    int arrived = 0;
    int collected = 0;
    bool done = false;
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> gathered;
};

struct ThreadGroup::Shared {
    int world = 1;
    double timeout = 60;
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::int64_t, Slot> slots;
    std::string abort_reason;

    // Completes a slot once the last rank has arrived (called with the mutex held).
    void complete(Slot& s) {
        if (s.kind == "allreduce") {
            // Integers add as int64, floats in double, rounded once to the tensor's type.
            const at::ScalarType work = at::isIntegralType(s.inputs[0].scalar_type(), true) ? at::kLong : at::kDouble;
            at::Tensor acc = s.inputs[0].to(work);
            for (int r = 1; r < world; ++r) {
                at::Tensor x = s.inputs[static_cast<size_t>(r)].to(work);
                acc = s.op == comm::ReduceOp::max ? at::maximum(acc, x) : acc + x;
            }
            if (s.op == comm::ReduceOp::average) acc = work == at::kLong ? at::div(acc, world, "trunc") : acc / world;
            for (auto& t : s.inputs) t.copy_(acc.to(t.scalar_type()));
        } else if (s.kind == "allgather" || s.kind == "allgather_unequal") {
            for (auto& t : s.inputs) s.gathered.push_back(t.clone());
        } else if (s.kind == "broadcast") {
            for (int r = 0; r < world; ++r)
                if (r != s.root) s.inputs[static_cast<size_t>(r)].copy_(s.inputs[static_cast<size_t>(s.root)]);
        }
        s.done = true;
        changed.notify_all();
    }

    // Hands `tensor` in as `rank`'s part of collective number `seq`.
    void arrive(std::int64_t seq, int rank, const std::string& kind, const at::Tensor& tensor, comm::ReduceOp op,
                int root) {
        std::unique_lock<std::mutex> lock(mutex);
        if (!abort_reason.empty()) throw Error("rank " + std::to_string(rank) + ": " + abort_reason);
        Slot& s = slots[seq];
        if (s.inputs.empty()) {
            s.kind = kind;
            s.op = op;
            s.root = root;
            s.inputs.resize(static_cast<size_t>(world));
        } else if (s.kind != kind) {
            throw Error("rank " + std::to_string(rank) + " called " + kind + " as collective #" + std::to_string(seq) +
                        " where another rank called " + s.kind);
        }
        s.inputs[static_cast<size_t>(rank)] = tensor;
        if (++s.arrived == world) {
            for (int r = 1; r < world; ++r)
                if (s.inputs[static_cast<size_t>(r)].sizes() != s.inputs[0].sizes() && kind != "allgather_unequal")
                    throw Error("collective #" + std::to_string(seq) + ": ranks passed tensors of different shapes");
            complete(s);
        }
    }

    // Waits for collective `seq` to complete; returns the gathered tensors (allgather).
    std::vector<at::Tensor> wait(std::int64_t seq, int rank) {
        std::unique_lock<std::mutex> lock(mutex);
        auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout));
        Slot& s = slots[seq];
        while (!s.done) {
            if (!abort_reason.empty()) throw Error("rank " + std::to_string(rank) + ": " + abort_reason);
            if (changed.wait_until(lock, deadline) == std::cv_status::timeout && !s.done)
                throw Error("rank " + std::to_string(rank) + ": collective #" + std::to_string(seq) + " (" + s.kind +
                            ") timed out: " + std::to_string(world - s.arrived) + " rank(s) never arrived");
        }
        std::vector<at::Tensor> out;
        for (auto& t : s.gathered) out.push_back(t.clone());
        if (++s.collected == world) slots.erase(seq);
        return out;
    }

    void abort(const std::string& reason) {
        std::lock_guard<std::mutex> lock(mutex);
        if (abort_reason.empty()) abort_reason = reason;
        changed.notify_all();
    }
};

namespace {

class ThreadWork : public comm::Work {
public:
    ThreadWork(std::shared_ptr<ThreadGroup::Shared> shared, std::int64_t seq, int rank, comm::Traffic& traffic)
        : shared_(std::move(shared)), seq_(seq), rank_(rank), traffic_(traffic) {}
    void wait() override {
        if (waited_) return;
        auto t0 = Clock::now();
        shared_->wait(seq_, rank_);
        waited_ = true;
        traffic_.seconds += seconds_since(t0);
    }

private:
    std::shared_ptr<ThreadGroup::Shared> shared_;
    std::int64_t seq_;
    int rank_;
    comm::Traffic& traffic_;
    bool waited_ = false;
};

class ThreadCollectives : public comm::Collectives {
public:
    ThreadCollectives(std::shared_ptr<ThreadGroup::Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return shared_->world; }

    void allreduce(at::Tensor& tensor, comm::ReduceOp op) override { allreduce_async(tensor, op)->wait(); }

    std::unique_ptr<comm::Work> allreduce_async(at::Tensor& tensor, comm::ReduceOp op) override {
        count(tensor);
        std::int64_t seq = next_++;
        shared_->arrive(seq, rank_, "allreduce", tensor, op, 0);
        return std::make_unique<ThreadWork>(shared_, seq, rank_, traffic_);
    }

    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override { return gather(tensor, "allgather"); }
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override {
        return gather(tensor, "allgather_unequal");
    }

    void broadcast(at::Tensor& tensor, int root) override {
        count(tensor);
        std::int64_t seq = next_++;
        shared_->arrive(seq, rank_, "broadcast", tensor, comm::ReduceOp::sum, root);
        ThreadWork(shared_, seq, rank_, traffic_).wait();
    }

    void barrier() override {
        at::Tensor token = at::zeros({1});
        allreduce(token, comm::ReduceOp::sum);
    }

    const comm::Traffic& traffic() const override { return traffic_; }

private:
    void count(const at::Tensor& tensor) {
        traffic_.calls += 1;
        traffic_.bytes += static_cast<std::int64_t>(tensor.nbytes());
    }

    std::vector<at::Tensor> gather(const at::Tensor& tensor, const std::string& kind) {
        count(tensor);
        std::int64_t seq = next_++;
        auto t0 = Clock::now();
        shared_->arrive(seq, rank_, kind, tensor, comm::ReduceOp::sum, 0);
        auto out = shared_->wait(seq, rank_);
        traffic_.seconds += seconds_since(t0);
        return out;
    }

    std::shared_ptr<ThreadGroup::Shared> shared_;
    int rank_;
    std::int64_t next_ = 0;
    comm::Traffic traffic_;
};

}  // namespace

ThreadGroup::ThreadGroup(int world_size, double timeout_seconds) : shared_(std::make_shared<Shared>()) {
    shared_->world = world_size;
    shared_->timeout = timeout_seconds;
    for (int r = 0; r < world_size; ++r) ranks_.push_back(std::make_unique<ThreadCollectives>(shared_, r));
}

ThreadGroup::~ThreadGroup() = default;

int ThreadGroup::world_size() const { return shared_->world; }

comm::Collectives& ThreadGroup::rank(int r) { return *ranks_.at(static_cast<size_t>(r)); }

void ThreadGroup::run(const std::function<void(int, comm::Collectives&)>& body) {
    std::vector<std::exception_ptr> errors(ranks_.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < world_size(); ++r)
        threads.emplace_back([&, r] {
            try {
                body(r, rank(r));
            } catch (const std::exception& e) {
                errors[static_cast<size_t>(r)] = std::current_exception();
                shared_->abort("aborted: rank " + std::to_string(r) + " failed: " + e.what());
            } catch (...) {
                errors[static_cast<size_t>(r)] = std::current_exception();
                shared_->abort("aborted: rank " + std::to_string(r) + " failed");
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

std::vector<std::string> ThreadGroup::run_collect(const std::function<void(int, comm::Collectives&)>& body) {
    std::vector<std::string> messages(ranks_.size());
    run([&](int r, comm::Collectives& comm) {
        try {
            body(r, comm);
        } catch (const std::exception& e) {
            messages[static_cast<size_t>(r)] = e.what();
            shared_->abort("aborted: rank " + std::to_string(r) + " failed: " + e.what());
        }
    });
    return messages;
}

void RecordingCollectives::allreduce(at::Tensor& tensor, comm::ReduceOp op) {
    calls.push_back({"allreduce", tensor.clone()});
    inner_.allreduce(tensor, op);
}

std::unique_ptr<comm::Work> RecordingCollectives::allreduce_async(at::Tensor& tensor, comm::ReduceOp op) {
    calls.push_back({"allreduce", tensor.clone()});
    return inner_.allreduce_async(tensor, op);
}

std::vector<at::Tensor> RecordingCollectives::allgather(const at::Tensor& tensor) {
    calls.push_back({"allgather", tensor.clone()});
    return inner_.allgather(tensor);
}

std::vector<at::Tensor> RecordingCollectives::allgather_unequal(const at::Tensor& tensor) {
    calls.push_back({"allgather", tensor.clone()});
    return inner_.allgather_unequal(tensor);
}

void RecordingCollectives::broadcast(at::Tensor& tensor, int root) {
    calls.push_back({"broadcast", tensor.clone()});
    inner_.broadcast(tensor, root);
}

void thread_ranks(int world, const std::function<void(int, comm::Collectives&)>& body) {
    ThreadGroup group(world, 30);
    group.run(body);
}

}  // namespace acc::test
