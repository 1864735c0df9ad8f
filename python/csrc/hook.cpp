// The compressing exchange behind the package's DDP communication hook: the
// toolkit's exchange::GradientExchange (train-dist's compressors, error feedback,
// counting) run on DDP's buckets over the user's own process group.
//
// DDP calls the hook once per bucket, and rebuilds its buckets after the first
// step, so one GradientExchange serves each distinct bucket (its parameters, by
// name), and every piece of compressor state (error memory, PowerSGD's Q, DGC's
// momentum) is keyed by parameter name: when a parameter turns up in a new
// bucket, its state leaves the old bucket's exchange and goes with it
// (exchange::BucketExchanges, which train-dist's buckets share).
//
// Built only against LibTorch 2.x: Python hands the process group over with
// ProcessGroup.boxed(), which 1.13 lacks.
#include "guarded.hpp"

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include "comm/group.hpp"
#include "compress/spec.hpp"
#include "exchange/bucket_exchanges.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/staging.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace acc::python {
namespace {

using State = exchange::StateEntries;

class HookExchange : public torch::CustomClassHolder {
public:
    // seed: PowerSGD's random Q and every other random stream; the same on every rank.
    HookExchange(c10::intrusive_ptr<c10d::ProcessGroup> group, std::int64_t seed, bool error_feedback)
        : comm_(guarded([&] { return std::make_unique<comm::GroupCollectives>(std::move(group)); })) {
        options_.seed = static_cast<std::uint32_t>(seed);
        options_.error_feedback = error_feedback;
    }

    std::int64_t rank() const { return comm_->rank(); }
    std::int64_t world_size() const { return comm_->world_size(); }

    // Starts replacing each gradient of the bucket by its average over the ranks,
    // each compressed at its level: the first collectives are launched and run while
    // the caller goes on (DDP's backward pass). The gradients must stay untouched
    // until finish(). Collective: every rank passes the same names, shapes and
    // levels (checked), buckets in the same order.
    void start(std::vector<std::string> names, std::vector<at::Tensor> gradients, std::vector<std::string> levels) {
        guarded([&] {
            if (names.size() != gradients.size() || names.size() != levels.size())
                throw Error("internal error: a bucket of " + std::to_string(names.size()) + " names, " +
                            std::to_string(gradients.size()) + " gradients and " + std::to_string(levels.size()) +
                            " levels");
            std::vector<compress::Spec> specs;
            for (const auto& text : levels) specs.push_back(spec_of(text));
            exchange::GradientExchange& exchange = bucket(names, gradients, specs);
            if (exchange.in_flight())
                throw UsageError("bucket of " + names.front() + ": DDP handed it over twice in one step");
            if (!(exchange.levels() == specs)) exchange.set_levels(specs);
            exchange.start(gradients);
            pending_.push_back(&exchange);
            return 0;
        });
    }

    // Finishes every bucket started since the last finish(), in the order they
    // started (the same on every rank): their gradients hold the averages.
    void finish() {
        guarded([&] {
            std::vector<exchange::GradientExchange*> pending;
            pending.swap(pending_);
            for (auto* exchange : pending) exchange->finish();
            return 0;
        });
    }

    // Buckets started and not finished.
    std::int64_t pending() const { return static_cast<std::int64_t>(pending_.size()); }

    // The canonical text of a compressor spec; UsageError for one that is not.
    std::string canonical(std::string text) {
        return guarded([&] { return spec_of(text).text(); });
    }

    // Floats handed to collectives since the start (docs/metrics.md, "Data sent").
    double floats_sent() const { return static_cast<double>(buckets_.bytes_sent()) / 4.0; }

    // Every parameter's state, as "<parameter>/<what>" entries (what the package's
    // state_dict() holds). Entries of the exchanges themselves are left out.
    std::vector<std::string> state_names() const {
        return guarded([&] { return names_of(state()); });
    }
    std::vector<at::Tensor> state_tensors() const {
        return guarded([&] { return tensors_of(state()); });
    }

    // Restores state_names()/state_tensors(); each parameter takes its entries into
    // the next bucket it turns up in (where an entry that does not fit is refused).
    void load_state(std::vector<std::string> names, std::vector<at::Tensor> tensors) {
        guarded([&] {
            if (names.size() != tensors.size()) throw Error("internal error: state names and tensors differ in number");
            refuse_pending("load_state_dict()");
            buckets_.dissolve_all();
            buckets_.drop_carried();
            State state;
            for (size_t i = 0; i < names.size(); ++i) state.emplace_back(names[i], tensors[i]);
            buckets_.carry(state);
            return 0;
        });
    }

private:
    compress::Spec spec_of(const std::string& text) {
        auto it = specs_.find(text);
        if (it != specs_.end()) return it->second;
        return specs_.emplace(text, compress::parse_spec_line(text)).first->second;
    }

    // The exchange of this bucket, made on the bucket's first step with the state
    // its parameters carry from earlier buckets (whose exchanges are dissolved).
    exchange::GradientExchange& bucket(const std::vector<std::string>& names, const std::vector<at::Tensor>& gradients,
                                       const std::vector<compress::Spec>& levels) {
        if (auto* exchange = buckets_.find(names)) return *exchange;
        std::vector<compress::TensorInfo> tensors;
        for (size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], gradients[i].sizes().vec()});
        comm::Collectives& over = collectives_on(gradients.empty() ? at::Device(at::kCPU) : gradients[0].device());
        return buckets_.make(std::move(tensors), levels, over, options_);
    }

    // The group for an exchange of gradients on `device`. A group made for NCCL has no
    // CPU backend, while the exchange's own small collectives (the levels' agreement)
    // hold host tensors: on a GPU they go through the device (as train-dist's do).
    comm::Collectives& collectives_on(const at::Device& device) {
        if (device.is_cpu()) return *comm_;
        auto& staged = staged_[device.str()];
        if (!staged) staged = exchange::staged_collectives(*comm_, device);
        return *staged;
    }

    void refuse_pending(const char* what) const {
        if (!pending_.empty())
            throw UsageError(std::string(what) + ": during a step (buckets are in flight); call it between steps");
    }

    State state() const {
        refuse_pending("state_dict()");
        return buckets_.parameter_state();
    }

    static std::vector<std::string> names_of(const State& state) {
        std::vector<std::string> out;
        for (const auto& e : state) out.push_back(e.first);
        return out;
    }
    static std::vector<at::Tensor> tensors_of(const State& state) {
        std::vector<at::Tensor> out;
        for (const auto& e : state) out.push_back(e.second);
        return out;
    }

    std::unique_ptr<comm::GroupCollectives> comm_;
    // comm_ for each device's tensors; declared before buckets_, whose exchanges use them.
    std::map<std::string, std::unique_ptr<comm::Collectives>> staged_;
    exchange::ExchangeOptions options_;
    std::map<std::string, compress::Spec> specs_;
    exchange::BucketExchanges buckets_;
    std::vector<exchange::GradientExchange*> pending_;  // started, in order, not yet finished
};

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    using acc::python::HookExchange;
    m.class_<HookExchange>("HookExchange")
        .def(torch::init<c10::intrusive_ptr<c10d::ProcessGroup>, std::int64_t, bool>())
        .def("rank", &HookExchange::rank)
        .def("world_size", &HookExchange::world_size)
        .def("start", &HookExchange::start)
        .def("finish", &HookExchange::finish)
        .def("pending", &HookExchange::pending)
        .def("canonical", &HookExchange::canonical)
        .def("floats_sent", &HookExchange::floats_sent)
        .def("state_names", &HookExchange::state_names)
        .def("state_tensors", &HookExchange::state_tensors)
        .def("load_state", &HookExchange::load_state);
}
#endif
