// GraVAC behind the package's DDP communication hook: train-dist --gravac's
// exchange (exchange::GravacExchange: the compression factor chosen every step
// from the gains of the whole model, error feedback, the family's codecs) over the
// user's own process group.
//
// GraVAC decides once per step for every matrix of the model together, so the
// hook hands over all of a step's gradients at once (the package collects DDP's
// buckets until the last one), in the model's parameter order. A step's time, from
// which GraVAC's throughput comes, runs from the end of the previous step's exchange
// (or from restart_clock(), which the package calls when a new epoch starts, so that
// an evaluation between epochs is not counted) to the end of this one.
//
// The hook is built only against LibTorch 2.x, as hook.cpp; GraVAC's defaults and
// step record, which the package reads at import, with either.
#include "guarded.hpp"
#include "regime/gravac.hpp"

#include <torch/library.h>
#include <torch/version.h>

#include <string>
#include <vector>

#if TORCH_VERSION_MAJOR >= 2
#include "base/clock.hpp"
#include "comm/group.hpp"
#include "exchange/gravac.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace acc::python {
namespace {

class HookGravac : public torch::CustomClassHolder {
public:
    // smoothing 0: the paper's rule for the group's size. samples_per_step: this rank's
    // samples in one step (throughput is samples over all ranks per second).
    HookGravac(c10::intrusive_ptr<c10d::ProcessGroup> group, std::string family, double theta_min, double theta_max,
               double epsilon, std::int64_t window, double omega, double theta_s, double smoothing,
               std::string policy, std::string throughput, bool reset_gains, std::string gain,
               std::int64_t seed, std::int64_t samples_per_step)
        : comm_(guarded([&] { return std::make_unique<comm::GroupCollectives>(std::move(group)); })) {
        guarded([&] {
            options_.family = regime::parse_gravac_family(family);
            regime::GravacSettings& s = options_.settings;
            s = regime::gravac_defaults(comm_->world_size());
            s.theta_min = theta_min;
            s.theta_max = theta_max;
            s.epsilon = epsilon;
            s.window = window;
            s.omega = omega;
            s.theta_s = theta_s;
            if (smoothing != 0) s.smoothing = smoothing;
            s.policy = regime::parse_gravac_policy(policy);
            s.statistic = regime::parse_gravac_statistic(throughput);
            s.reset_gains = reset_gains;
            s.gain = regime::parse_gravac_gain(gain);
            regime::validate(s);
            if (samples_per_step < 1)
                throw UsageError("--gravac-batch-size: must be at least 1 sample, not " +
                                 std::to_string(samples_per_step));
            options_.seed = static_cast<std::uint32_t>(seed);
            options_.samples_per_step = samples_per_step * comm_->world_size();
            return 0;
        });
        restart_clock();
    }

    double smoothing() const { return options_.settings.smoothing; }

    // The next step's time starts now.
    void restart_clock() { started_ = SteadyClock::now(); }

    // Replaces every gradient of the model (in the same order every step) by its mean
    // over the ranks at the factor GraVAC chooses for this step. Collective.
    void exchange(std::vector<std::string> names, std::vector<at::Tensor> gradients, std::int64_t epoch) {
        guarded([&] {
            if (names.size() != gradients.size()) throw Error("internal error: names and gradients differ in number");
            if (!exchange_) {
                std::vector<compress::TensorInfo> tensors;
                for (size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], gradients[i].sizes().vec()});
                names_ = names;
                exchange_ = std::make_unique<exchange::GravacExchange>(std::move(tensors), *comm_,
                                                                       gradients.front().device(), options_);
                if (!saved_.empty()) exchange_->load_state(saved_);
                saved_.clear();
            } else if (names != names_) {
                throw UsageError("model: DDP synchronised other parameters than in the first step; GraVAC needs "
                                 "the same parameters every step");
            }
            exchange::GravacStepInfo step;
            step.epoch = epoch;
            step.started = started_;
            exchange_->exchange(gradients, step);
            started_ = SteadyClock::now();
            const exchange::ExchangeTotals totals = exchange_->take_totals();
            bytes_ += totals.bytes;
            return 0;
        });
    }

    double floats_sent() const { return static_cast<double>(bytes_) / 4.0; }

    // The steps' decisions since the last call, each regime::GravacStep's values in the
    // order of its fields (gravac_step_fields()), one step after the other.
    std::vector<double> take_steps() {
        std::vector<double> out;
        if (!exchange_) return out;
        for (const auto& step : exchange_->take_steps()) {
            const std::vector<double> values = acc::regime::gravac_step_values(step);
            out.insert(out.end(), values.begin(), values.end());
        }
        return out;
    }

    // Per parameter, once a step has run: 1 where the averaged gradient carries DGC's momentum.
    std::vector<std::int64_t> momentum_in_gradient() const {
        std::vector<std::int64_t> out;
        if (exchange_)
            for (bool carries : exchange_->momentum_in_gradient()) out.push_back(carries ? 1 : 0);
        return out;
    }

    std::vector<std::string> state_names() const {
        return guarded([&] {
            std::vector<std::string> out;
            for (const auto& e : state()) out.push_back(e.first);
            return out;
        });
    }
    std::vector<at::Tensor> state_tensors() const {
        return guarded([&] {
            std::vector<at::Tensor> out;
            for (const auto& e : state()) out.push_back(e.second);
            return out;
        });
    }

    // Restores state_names()/state_tensors(); taken by the exchange at its next step
    // (an entry that does not fit is refused there).
    void load_state(std::vector<std::string> names, std::vector<at::Tensor> tensors) {
        guarded([&] {
            if (names.size() != tensors.size()) throw Error("internal error: state names and tensors differ in number");
            exchange::TensorMap state;
            for (size_t i = 0; i < names.size(); ++i) state[names[i]] = tensors[i];
            if (exchange_) {
                exchange_->load_state(state);
            } else {
                saved_ = std::move(state);
            }
            return 0;
        });
    }

private:
    exchange::TensorMap state() const { return exchange_ ? exchange_->state() : saved_; }

    std::unique_ptr<comm::GroupCollectives> comm_;
    exchange::GravacExchangeOptions options_;
    std::unique_ptr<exchange::GravacExchange> exchange_;  // made at the first step, from its gradients
    std::vector<std::string> names_;
    exchange::TensorMap saved_;  // loaded before the first step
    SteadyClock::time_point started_{};
    std::int64_t bytes_ = 0;
};

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    using acc::python::HookGravac;
    m.class_<HookGravac>("HookGravac")
        .def(torch::init<c10::intrusive_ptr<c10d::ProcessGroup>, std::string, double, double, double, std::int64_t,
                         double, double, double, std::string, std::string, bool, std::string, std::int64_t,
                         std::int64_t>())
        .def("smoothing", &HookGravac::smoothing)
        .def("restart_clock", &HookGravac::restart_clock)
        .def("exchange", &HookGravac::exchange)
        .def("floats_sent", &HookGravac::floats_sent)
        .def("take_steps", &HookGravac::take_steps)
        .def("momentum_in_gradient", &HookGravac::momentum_in_gradient)
        .def("state_names", &HookGravac::state_names)
        .def("state_tensors", &HookGravac::state_tensors)
        .def("load_state", &HookGravac::load_state);
}
#endif

// What the package needs of GraVAC with any torch, the hook or not.
TORCH_LIBRARY_FRAGMENT(accordion, m) {
    // GraVAC's defaults, as train-dist's --gravac-* options have them: theta_min, theta_max,
    // epsilon, window, omega, theta_s; then the policy, the throughput statistic and the gain.
    m.def("gravac_defaults() -> float[]", [] {
        const acc::regime::GravacSettings d;
        return std::vector<double>{d.theta_min, d.theta_max, d.epsilon, static_cast<double>(d.window), d.omega,
                                   d.theta_s};
    });
    // regime::GravacStep, as the package's accordion.GravacStep takes it: its fields, and
    // the names of its choice codes.
    m.def("gravac_step_fields() -> str[]", [] { return acc::regime::gravac_step_fields(); });
    m.def("gravac_choice_names() -> str[]", [] {
        std::vector<std::string> out;
        for (auto choice : {acc::regime::GravacChoice::candidate, acc::regime::GravacChoice::theta_min,
                            acc::regime::GravacChoice::dense})
            out.push_back(acc::regime::gravac_choice_name(choice));
        return out;
    });
    m.def("gravac_default_names() -> str[]", [] {
        const acc::regime::GravacSettings d;
        return std::vector<std::string>{acc::regime::gravac_policy_name(d.policy),
                                        acc::regime::gravac_statistic_name(d.statistic),
                                        acc::regime::gravac_gain_name(d.gain)};
    });
}
