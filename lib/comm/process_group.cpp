// ProcessGroupCollectives' collectives: each checks that the group is still usable,
// runs on the c10d backend, counts the bytes it sends and the time it takes, and turns
// a backend failure into the lost-peer diagnosis (liveness.cpp).
#include "comm/process_group_impl.hpp"

#include "base/error.hpp"
#include "comm/c10d_allreduce.hpp"

#include <algorithm>

namespace acc::comm {

using namespace internal;

void ProcessGroupCollectives::Impl::check_usable() const {
    if (failure) throw Error(*failure);
    if (!pg) throw Error("the process group is closed");
}

// Runs one blocking collective: checks, times, counts, and turns a backend failure into a diagnosis.
template <class Issue>
void ProcessGroupCollectives::Impl::run(const char* op, std::int64_t bytes, Issue&& issue) {
    check_usable();
    const auto start = Clock::now();
    try {
        c10::intrusive_ptr<c10d::Work> work = issue();
        work->wait();
    } catch (const acc::Error&) {
        throw;
    } catch (const std::exception& e) {
        fail(op, start, e);
    }
    traffic.calls += 1;
    traffic.bytes += bytes;
    traffic.seconds += seconds_since(start);
}

namespace {

class AsyncWork final : public PendingAllreduce {
public:
    AsyncWork(ProcessGroupCollectives::Impl* impl, c10::intrusive_ptr<c10d::Work> work, at::Tensor target,
              at::Tensor buffer, ReduceOp op)
        : PendingAllreduce(std::move(target), std::move(buffer), op, impl->world(), impl->traffic.seconds),
          impl_(impl), work_(std::move(work)) {}
    ~AsyncWork() override { wait_quietly(); }

private:
    void wait_for_backend(SteadyClock::time_point start) override {
        impl_->check_usable();
        try {
            work_->wait();
        } catch (const acc::Error&) {
            throw;
        } catch (const std::exception& e) {
            impl_->fail("allreduce", start, e);
        }
    }

    ProcessGroupCollectives::Impl* impl_;
    c10::intrusive_ptr<c10d::Work> work_;
};

c10d::ReduceOp to_c10d(ReduceOp op) { return op == ReduceOp::max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM; }

std::int64_t byte_size(const at::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

}  // namespace

int ProcessGroupCollectives::rank() const { return impl_->rank(); }
int ProcessGroupCollectives::world_size() const { return impl_->world(); }
int ProcessGroupCollectives::local_rank() const { return impl_->rendezvous.local_rank; }
Backend ProcessGroupCollectives::backend() const { return impl_->backend; }
at::Device ProcessGroupCollectives::device() const { return impl_->device; }
const std::vector<std::string>& ProcessGroupCollectives::hosts() const { return impl_->hosts; }
const Traffic& ProcessGroupCollectives::traffic() const { return impl_->traffic; }
double ProcessGroupCollectives::timeout_seconds() const { return impl_->rendezvous.timeout; }
void ProcessGroupCollectives::reset_traffic() { impl_->traffic = Traffic{}; }

void ProcessGroupCollectives::allreduce(at::Tensor& tensor, ReduceOp op) {
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    impl_->run("allreduce", byte_size(tensor), [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::AllreduceOptions options;
        options.reduceOp = to_c10d(op);
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->allreduce(tensors, options);
    });
    finish_allreduce(buffer, tensor, op, impl_->world());
}

std::unique_ptr<Work> ProcessGroupCollectives::allreduce_async(at::Tensor& tensor, ReduceOp op) {
    impl_->check_usable();
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto start = Clock::now();
    c10::intrusive_ptr<c10d::Work> work;
    try {
        std::vector<at::Tensor> tensors{buffer};
        c10d::AllreduceOptions options;
        options.reduceOp = to_c10d(op);
        options.timeout = to_ms(impl_->rendezvous.timeout);
        work = impl_->pg->allreduce(tensors, options);
    } catch (const std::exception& e) {
        impl_->fail("allreduce", start, e);
    }
    impl_->traffic.calls += 1;
    impl_->traffic.bytes += byte_size(tensor);
    impl_->traffic.seconds += seconds_since(start);
    return std::make_unique<AsyncWork>(impl_.get(), std::move(work), tensor, buffer, op);
}

namespace {

// The one buffer `parts` are consecutive views of (each contiguous, `n` elements, the
// input's type), or an undefined tensor.
at::Tensor buffer_of_parts(const std::vector<at::Tensor>& parts, const at::Tensor& input) {
    const std::int64_t n = input.numel();
    for (size_t r = 0; r < parts.size(); ++r) {
        const at::Tensor& p = parts[r];
        if (!p.defined() || !p.is_contiguous() || p.numel() != n || p.scalar_type() != input.scalar_type() ||
            p.device() != input.device() || !p.storage().is_alias_of(parts[0].storage()) ||
            p.storage_offset() != parts[0].storage_offset() + static_cast<std::int64_t>(r) * n)
            return at::Tensor();
    }
    return parts[0].as_strided({static_cast<std::int64_t>(parts.size()) * n}, {1});
}

}  // namespace

void ProcessGroupCollectives::allgather_into(const at::Tensor& tensor, std::vector<at::Tensor>& outputs) {
    if (static_cast<int>(outputs.size()) != world_size())
        throw Error("allgather: " + std::to_string(outputs.size()) + " output tensors for " +
                    std::to_string(world_size()) + " ranks");
    at::Tensor input = tensor.contiguous();
    if (backend() == Backend::nccl) {
        // Parts back to back in one buffer: NCCL gathers into it directly. Given a list,
        // c10d's NCCL gathers into a buffer of its own and copies each part out.
        if (at::Tensor all = buffer_of_parts(outputs, input); all.defined()) {
            impl_->run("allgather", byte_size(tensor), [&] {
                c10d::AllgatherOptions options;
                options.timeout = to_ms(impl_->rendezvous.timeout);
                return impl_->pg->_allgather_base(all, input, options);
            });
            return;
        }
    }
    impl_->run("allgather", byte_size(tensor), [&] {
        std::vector<std::vector<at::Tensor>> out{outputs};
        std::vector<at::Tensor> in{input};
        return impl_->pg->allgather(out, in);
    });
}

std::vector<at::Tensor> ProcessGroupCollectives::allgather(const at::Tensor& tensor) {
    std::vector<at::Tensor> outputs;
    const std::int64_t n = tensor.numel();
    const at::Tensor all = at::empty({world_size() * n}, tensor.options());
    for (int r = 0; r < world_size(); ++r) outputs.push_back(all.narrow(0, r * n, n).view(tensor.sizes()));
    allgather_into(tensor, outputs);
    return outputs;
}

std::vector<at::Tensor> ProcessGroupCollectives::allgather_unequal(const at::Tensor& tensor) {
    if (tensor.dim() != 1)
        throw Error("allgather_unequal: needs a 1-D tensor, not one of " + std::to_string(tensor.dim()) +
                    " dimensions");
    const int world = world_size();
    const auto start = Clock::now();
    const Traffic before = impl_->traffic;
    // Lengths first, then every part padded to the longest.
    at::Tensor length = at::full({1}, tensor.numel(), at::TensorOptions().dtype(at::kLong).device(device()));
    std::vector<at::Tensor> lengths = allgather(length);
    std::int64_t longest = 0;
    std::vector<std::int64_t> sizes;
    for (const auto& l : lengths) {
        sizes.push_back(l.cpu().item<std::int64_t>());
        longest = std::max(longest, sizes.back());
    }
    at::Tensor padded = at::zeros({longest}, tensor.options());
    padded.narrow(0, 0, tensor.numel()).copy_(tensor);
    std::vector<at::Tensor> parts = allgather(padded);
    std::vector<at::Tensor> result;
    for (int r = 0; r < world; ++r)
        result.push_back(parts[static_cast<size_t>(r)].narrow(0, 0, sizes[static_cast<size_t>(r)]));
    // One call, counting this rank's own part once.
    impl_->traffic.calls = before.calls + 1;
    impl_->traffic.bytes = before.bytes + byte_size(tensor);
    impl_->traffic.seconds = before.seconds + seconds_since(start);
    return result;
}

void ProcessGroupCollectives::broadcast(at::Tensor& tensor, int root) {
    if (root < 0 || root >= world_size())
        throw Error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                    std::to_string(world_size()));
    at::Tensor buffer = tensor.is_contiguous() ? tensor : tensor.contiguous();
    impl_->run("broadcast", rank() == root ? byte_size(tensor) : 0, [&] {
        std::vector<at::Tensor> tensors{buffer};
        c10d::BroadcastOptions options;
        options.rootRank = root;
        options.rootTensor = 0;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->broadcast(tensors, options);
    });
    if (!buffer.is_same(tensor)) tensor.copy_(buffer);
}

void ProcessGroupCollectives::barrier() {
    impl_->run("barrier", 0, [&] {
        c10d::BarrierOptions options;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->barrier(options);
    });
}

void ProcessGroupCollectives::reduce_scatter(const at::Tensor& input, at::Tensor& output) {
    const std::int64_t world = world_size();
    if (input.numel() != world * output.numel())
        throw Error("reduce_scatter: the input has " + std::to_string(input.numel()) + " elements, expected " +
                    std::to_string(world) + " x " + std::to_string(output.numel()));
    impl_->check_usable();
    const std::int64_t chunk = output.numel();
    if (backend() == Backend::gloo) {
        // Gloo has no reduce-scatter algorithm: LibTorch 1.13 refuses the call and
        // later versions run one allreduce per rank behind a composite work item.
        // One allreduce of the whole input, keeping this rank's chunk, moves the
        // same bytes in one collective and behaves alike in both versions.
        at::Tensor sum = input.contiguous().view({-1}).clone();
        impl_->run("reduce_scatter", byte_size(input), [&] {
            std::vector<at::Tensor> tensors{sum};
            c10d::AllreduceOptions options;
            options.reduceOp = c10d::ReduceOp::SUM;
            options.timeout = to_ms(impl_->rendezvous.timeout);
            return impl_->pg->allreduce(tensors, options);
        });
        output.copy_(sum.narrow(0, rank() * chunk, chunk).view(output.sizes()));
        return;
    }
    at::Tensor flat = input.contiguous().view({-1});
    at::Tensor result = output.is_contiguous() ? output : output.contiguous();
    if (backend() == Backend::nccl) {
        // One flat input: with a list, c10d's NCCL would first copy it into a buffer of its own.
        impl_->run("reduce_scatter", byte_size(input), [&] {
            c10d::ReduceScatterOptions options;
            options.reduceOp = c10d::ReduceOp::SUM;
            options.timeout = to_ms(impl_->rendezvous.timeout);
            at::Tensor out = result.view({-1});
            return impl_->pg->_reduce_scatter_base(out, flat, options);
        });
        if (!result.is_same(output)) output.copy_(result);
        return;
    }
    std::vector<at::Tensor> chunks;
    for (std::int64_t r = 0; r < world; ++r) chunks.push_back(flat.narrow(0, r * chunk, chunk).view(output.sizes()));
    impl_->run("reduce_scatter", byte_size(input), [&] {
        std::vector<at::Tensor> outputs{result};
        std::vector<std::vector<at::Tensor>> inputs{chunks};
        c10d::ReduceScatterOptions options;
        options.reduceOp = c10d::ReduceOp::SUM;
        options.timeout = to_ms(impl_->rendezvous.timeout);
        return impl_->pg->reduce_scatter(outputs, inputs, options);
    });
    if (!result.is_same(output)) output.copy_(result);
}

void ProcessGroupCollectives::confirm() {
#ifdef ACC_HAVE_CUDA
    if (impl_->backend != Backend::nccl || impl_->world() == 1 || impl_->finished || impl_->failure) return;
    // NCCL's barrier waits on the host for its collective, and so for every one queued
    // before it; one of those that failed meanwhile aborted the communicators, which the
    // barrier or getError() reports.
    barrier();
    const std::string error = compat::nccl_error(static_cast<c10d::ProcessGroupNCCL&>(*impl_->pg));
    if (!error.empty()) impl_->fail("an earlier collective", Clock::now(), std::runtime_error(error));
#endif
}

}  // namespace acc::comm
