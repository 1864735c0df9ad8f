#include "exchange/staging.hpp"

namespace acc::exchange {
namespace {

// Copies the device result back into the host tensor once the collective is done.
class CopyBack final : public comm::Work {
public:
    CopyBack(std::unique_ptr<comm::Work> inner, at::Tensor on_device, at::Tensor target)
        : inner_(std::move(inner)), on_device_(std::move(on_device)), target_(std::move(target)) {}
    void wait() override {
        if (!inner_) return;
        inner_->wait();
        inner_.reset();
        target_.copy_(on_device_);
    }

private:
    std::unique_ptr<comm::Work> inner_;
    at::Tensor on_device_, target_;
};

class Staged final : public comm::Collectives {
public:
    Staged(comm::Collectives& inner, at::Device device) : inner_(inner), device_(device) {}
    int rank() const override { return inner_.rank(); }
    int world_size() const override { return inner_.world_size(); }
    double timeout_seconds() const override { return inner_.timeout_seconds(); }

    void allreduce(at::Tensor& tensor, comm::ReduceOp op) override {
        if (here(tensor)) return inner_.allreduce(tensor, op);
        at::Tensor d = tensor.to(device_);
        inner_.allreduce(d, op);
        tensor.copy_(d);
    }
    std::unique_ptr<comm::Work> allreduce_async(at::Tensor& tensor, comm::ReduceOp op) override {
        if (here(tensor)) return inner_.allreduce_async(tensor, op);
        at::Tensor d = tensor.to(device_);
        auto work = inner_.allreduce_async(d, op);
        return std::make_unique<CopyBack>(std::move(work), d, tensor);
    }
    std::vector<at::Tensor> allgather(const at::Tensor& tensor) override {
        return back(tensor, inner_.allgather(tensor.to(device_)));
    }
    std::vector<at::Tensor> allgather_unequal(const at::Tensor& tensor) override {
        return back(tensor, inner_.allgather_unequal(tensor.to(device_)));
    }
    void broadcast(at::Tensor& tensor, int root) override {
        if (here(tensor)) return inner_.broadcast(tensor, root);
        at::Tensor d = tensor.to(device_);
        inner_.broadcast(d, root);
        tensor.copy_(d);
    }
    void barrier() override { inner_.barrier(); }
    const comm::Traffic& traffic() const override { return inner_.traffic(); }

private:
    bool here(const at::Tensor& t) const { return t.device() == device_; }
    // Results come back where the caller's tensor lives.
    static std::vector<at::Tensor> back(const at::Tensor& like, std::vector<at::Tensor> parts) {
        for (auto& p : parts)
            if (p.device() != like.device()) p = p.to(like.device());
        return parts;
    }

    comm::Collectives& inner_;
    at::Device device_;
};

}  // namespace

std::unique_ptr<comm::Collectives> staged_collectives(comm::Collectives& inner, at::Device device) {
    return std::make_unique<Staged>(inner, device);
}

}  // namespace acc::exchange
