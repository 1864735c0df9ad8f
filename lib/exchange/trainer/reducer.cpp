#include "exchange/trainer/reducer.hpp"

#include "base/error.hpp"
#include "comm/c10d_allreduce.hpp"

#include <chrono>
#include <map>

namespace acc::exchange {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

BucketReducer::BucketReducer(std::vector<torch::Tensor> parameters, comm::Collectives& comm, torch::Device device,
                             BucketOptions options, BucketExchange* exchange)
    : parameters_(std::move(parameters)),
      comm_(comm),
      device_(device),
      options_(options),
      exchange_(exchange),
      routes_(parameters_.size(), Route::outside),
      bucket_of_(parameters_.size(), 0),
      offset_of_(parameters_.size(), 0),
      leftovers_(parameters_.size()),
      ready_(parameters_.size(), false) {
    for (const auto& p : parameters_)
        if (p.scalar_type() != torch::kFloat32)
            throw Error("gradient buckets: parameters must be float32, not " + std::string(c10::toString(p.scalar_type())));
    // The hook sees the gradient autograd is about to accumulate into .grad. It holds
    // the parameter's index, not the parameter, so that no tensor owns itself.
    for (size_t i = 0; i < parameters_.size(); ++i)
        hooks_.push_back(parameters_[i].register_hook([this, i](torch::Tensor gradient) { on_gradient(i, gradient); }));
}

BucketReducer::~BucketReducer() {
    works_.clear();  // waits for any allreduce still in flight
    for (size_t i = 0; i < hooks_.size(); ++i) {
        try {
            parameters_[i].remove_hook(hooks_[i]);
        } catch (...) {
        }
    }
}

void BucketReducer::set_members(const std::vector<bool>& members) {
    std::vector<Route> routes;
    for (bool m : members) routes.push_back(m ? Route::allreduce : Route::outside);
    set_routes(routes);
}

void BucketReducer::set_routes(const std::vector<Route>& routes) {
    if (routes.size() != parameters_.size())
        throw Error("internal error: bucket routes for " + std::to_string(routes.size()) + " of " +
                    std::to_string(parameters_.size()) + " parameters");
    if (armed_ || next_launch_ != 0) throw Error("internal error: bucket routes changed during a step");
    if (routes == routes_ && !buckets_.empty()) return;
    for (size_t k = 0; k < routes.size(); ++k) {
        if (routes[k] == Route::compressed && !exchange_)
            throw Error("internal error: a compressed bucket without an exchange");
        if (routes[k] != Route::allreduce && leftovers_[k].defined())
            throw Error("internal error: parameter " + std::to_string(k) + " left the allreduce with values to send");
    }
    routes_ = routes;
    buckets_.clear();
    bucket_routes_.clear();
    buffers_.clear();
    // Each route fills its own open bucket; a bucket's place in the launch order is
    // where its first (last in model order) parameter comes.
    struct Open {
        size_t bucket = 0;
        std::int64_t filled = 0;
        size_t closed = 0;  // buckets of this route before the open one
        bool any = false;
    };
    std::map<Route, Open> open;
    for (size_t k = parameters_.size(); k-- > 0;) {
        if (routes_[k] == Route::outside) continue;
        Open& o = open[routes_[k]];
        if (!o.any || o.filled >= (o.closed == 0 ? options_.first_bucket_bytes : options_.bucket_bytes)) {
            if (o.any) ++o.closed;
            o.any = true;
            o.bucket = buckets_.size();
            o.filled = 0;
            buckets_.emplace_back();
            bucket_routes_.push_back(routes_[k]);
        }
        bucket_of_[k] = o.bucket;
        offset_of_[k] = o.filled / 4;
        buckets_[o.bucket].push_back(k);
        o.filled += 4 * parameters_[k].numel();
    }
    for (size_t b = 0; b < buckets_.size(); ++b) {
        std::int64_t n = 0;
        for (size_t k : buckets_[b]) n += parameters_[k].numel();
        // Compressed buckets stay where the gradients are: the exchange decides where its collectives run.
        const torch::Device on = bucket_routes_[b] == Route::compressed ? parameters_[buckets_[b].front()].device() : device_;
        buffers_.push_back(torch::zeros({n}, torch::TensorOptions().dtype(torch::kFloat32).device(on)));
    }
    pending_.assign(buckets_.size(), 0);
    works_.clear();
    works_.resize(buckets_.size());
}

void BucketReducer::add_leftover(size_t parameter, torch::Tensor values) {
    torch::NoGradGuard no_grad;
    torch::Tensor v = values.detach().to(device_, torch::kFloat32).reshape({-1});
    if (v.numel() != parameters_.at(parameter).numel())
        throw Error("internal error: leftover of " + std::to_string(v.numel()) + " values for a parameter of " +
                    std::to_string(parameters_[parameter].numel()));
    leftovers_[parameter] = leftovers_[parameter].defined() ? leftovers_[parameter].add(v) : v.clone();
}

torch::Tensor BucketReducer::take_leftover(size_t parameter) {
    torch::Tensor out = leftovers_.at(parameter);
    leftovers_[parameter] = torch::Tensor();
    return out;
}

void BucketReducer::arm(bool accumulated) {
    armed_ = !buckets_.empty();
    accumulated_ = accumulated;
    error_ = nullptr;
    std::fill(ready_.begin(), ready_.end(), false);
    for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
    next_launch_ = 0;
}

void BucketReducer::on_gradient(size_t parameter, const torch::Tensor& gradient) {
    if (!armed_ || routes_[parameter] == Route::outside || ready_[parameter] || error_) return;
    // An exception must not unwind through autograd's engine (it would come back
    // reworded); keep it for launch_rest, which runs right after the backward pass.
    try {
        const torch::Tensor& grad = parameters_[parameter].grad();
        fill(parameter, gradient, accumulated_ && grad.defined() ? grad : torch::Tensor());
        launch_ready();
    } catch (...) {
        error_ = std::current_exception();
    }
}

void BucketReducer::fill(size_t k, const torch::Tensor& gradient, const torch::Tensor& earlier) {
    torch::NoGradGuard no_grad;
    const auto t0 = Clock::now();
    const std::int64_t n = parameters_[k].numel();
    torch::Tensor slot = buffers_[bucket_of_[k]].narrow(0, offset_of_[k], n);
    torch::Tensor g = gradient.reshape({-1});
    if (earlier.defined())
        torch::add_out(slot, earlier.reshape({-1}).to(slot.device()), g.to(slot.device()));
    else
        slot.copy_(g);
    if (leftovers_[k].defined()) {
        slot.add_(leftovers_[k]);
        leftovers_[k] = torch::Tensor();
    }
    ready_[k] = true;
    --pending_[bucket_of_[k]];
    stats_.copy_seconds += since(t0);
}

void BucketReducer::launch_ready() {
    while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) {
        launch(next_launch_);
        if (armed_) stats_.early_launches += 1;
        ++next_launch_;
    }
}

void BucketReducer::launch(size_t b) {
    if (bucket_routes_[b] == Route::compressed) {
        torch::NoGradGuard no_grad;  // inside autograd's hook: nothing here is differentiated
        std::vector<torch::Tensor> views;
        for (auto it = buckets_[b].rbegin(); it != buckets_[b].rend(); ++it)
            views.push_back(buffers_[b].narrow(0, offset_of_[*it], parameters_[*it].numel()).view(parameters_[*it].sizes()));
        exchange_->start(b, views);
        return;
    }
    const auto t0 = Clock::now();
    works_[b] = comm_.allreduce_async(buffers_[b], comm::ReduceOp::sum);
    stats_.communication_seconds += since(t0);
    stats_.bytes += static_cast<std::int64_t>(buffers_[b].nbytes());
    stats_.collectives += 1;
}

void BucketReducer::launch_rest(const std::vector<torch::Tensor>& gradients) {
    const bool was_armed = armed_;
    armed_ = false;
    if (error_) {
        auto error = error_;
        error_ = nullptr;
        std::rethrow_exception(error);
    }
    if (!was_armed) {
        for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].size();
        std::fill(ready_.begin(), ready_.end(), false);
        next_launch_ = 0;
    }
    for (size_t k = 0; k < parameters_.size(); ++k)
        if (routes_[k] != Route::outside && !ready_[k]) fill(k, gradients.at(k), torch::Tensor());
    launch_ready();
}

void BucketReducer::finish(std::vector<torch::Tensor>& gradients) {
    if (next_launch_ != buckets_.size()) throw Error("internal error: gradient buckets finished before launch_rest");
    torch::NoGradGuard no_grad;
    for (size_t b = 0; b < buckets_.size(); ++b) {
        if (bucket_routes_[b] == Route::compressed) {
            exchange_->finish(b);
        } else {
            const auto t0 = Clock::now();
            works_[b]->wait();
            works_[b].reset();
            stats_.communication_seconds += since(t0);
        }
        const auto t1 = Clock::now();
        if (bucket_routes_[b] == Route::allreduce) comm::divide_by_world(buffers_[b], comm_.world_size());
        for (size_t k : buckets_[b]) {
            torch::Tensor average =
                buffers_[b].narrow(0, offset_of_[k], parameters_[k].numel()).view(parameters_[k].sizes());
            gradients.at(k) = average.device() == parameters_[k].device() ? average : average.to(parameters_[k].device());
        }
        stats_.copy_seconds += since(t1);
    }
    std::fill(ready_.begin(), ready_.end(), false);
    next_launch_ = 0;
}

}  // namespace acc::exchange
