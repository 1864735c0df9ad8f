// GraVAC behind the package's DDP communication hook, one of its syncs
// (hook_sync.hpp): train-dist --gravac's exchange (exchange::GravacExchange: the compression factor chosen every step
// from the gains of the whole model, error feedback, the family's codecs) over the
// user's own process group.
//
// GraVAC decides once per step for every matrix of the model together, so the
// hook hands over all of a step's gradients at once (the package collects DDP's
// buckets until the last one), in the model's parameter order. A step's time, from
// which GraVAC's throughput comes, runs from the end of the previous step's exchange
// (or from begin_epoch(), which the package calls when a new epoch starts, so that
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
#include "hook_sync.hpp"

#include "base/clock.hpp"
#include "comm/group.hpp"
#include "exchange/gravac.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <map>
#include <memory>
#include <utility>

namespace acc::python {
namespace {

class GravacSync final : public Sync {
public:
    GravacSync(c10::intrusive_ptr<c10d::ProcessGroup> group, c10::intrusive_ptr<c10d::ProcessGroup> decisions,
               std::vector<std::string> model, const GravacHookSettings& given, std::uint32_t seed,
               std::unique_ptr<Sync> dense)
        : decisions_(decisions.get() == group.get() ? nullptr
                                                    : std::make_unique<comm::GroupCollectives>(std::move(decisions))),
          comm_(std::make_unique<comm::GroupCollectives>(std::move(group))), model_(std::move(model)),
          dense_(std::move(dense)) {
        options_.family = regime::parse_gravac_family(given.family);
        regime::GravacSettings& s = options_.settings;
        s = given.settings;
        options_.decisions = decisions_.get();
        const std::int64_t deciding = decisions_ ? decisions_->world_size() : comm_->world_size();
        // smoothing 0: the paper's rule for the number of ranks that decide.
        if (s.smoothing == 0) s.smoothing = regime::gravac_defaults(deciding).smoothing;
        regime::validate(s);
        if (given.batch_size < 1)
            throw UsageError("--gravac-batch-size: must be at least 1 sample, not " + std::to_string(given.batch_size));
        options_.seed = seed;
        options_.samples_per_step = given.batch_size * deciding;
        begin_epoch();
    }

    // GraVAC decides for the whole model at once: a step's buckets wait for the last.
    // Steps before start_step are sent whole, bucket by bucket.
    void add_bucket(const std::vector<std::string>& names, const std::vector<at::Tensor>& gradients,
                    const std::vector<std::string>& levels, bool dense_step) override {
        if (dense_step) {
            dense_->add_bucket(names, gradients, levels, true);
            return;
        }
        if (names.size() != gradients.size()) throw Error("internal error: names and gradients differ in number");
        for (size_t i = 0; i < names.size(); ++i) collected_[names[i]] = gradients[i];
    }

    // Replaces every gradient of the model by its mean over the ranks at the factor
    // GraVAC chooses for this step, in the model's order. Collective.
    void finish_step(std::int64_t epoch) override {
        if (collected_.empty()) {
            dense_->finish_step(epoch);
            return;
        }
        std::vector<std::string> names;
        std::vector<at::Tensor> gradients;
        for (const std::string& name : model_) {
            auto it = collected_.find(name);
            if (it == collected_.end()) continue;
            names.push_back(name);
            gradients.push_back(it->second);
        }
        collected_.clear();
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
        // A 16-bit model's gradients go through as float32 copies, as in the bucket sync.
        const at::ScalarType type = gradients.front().scalar_type();
        const bool narrow = type == at::kBFloat16 || type == at::kHalf;
        std::vector<at::Tensor> wide = gradients;
        if (narrow)
            for (auto& t : wide) t = t.to(at::kFloat);
        exchange_->exchange(wide, step);
        if (narrow)
            for (size_t i = 0; i < wide.size(); ++i) gradients[i].copy_(wide[i]);
        started_ = SteadyClock::now();
        bytes_ += exchange_->take_totals().bytes;
    }

    // The next step's time starts now.
    void begin_epoch() override { started_ = SteadyClock::now(); }

    double floats_sent() const override { return dense_->floats_sent() + static_cast<double>(bytes_) / 4.0; }

    std::vector<std::string> momentum_in_gradient() const override {
        std::vector<std::string> out;
        if (!exchange_) return out;
        const std::vector<bool> carries = exchange_->momentum_in_gradient();
        for (size_t i = 0; i < carries.size() && i < names_.size(); ++i)
            if (carries[i]) out.push_back(names_[i]);
        return out;
    }

    // GraVAC's own (the dense steps before start_step are at level none, which keeps
    // nothing).
    State state() const override {
        State out;
        for (const auto& e : exchange_ ? exchange_->state() : saved_) out.emplace_back(e.first, e.second);
        return out;
    }

    // Taken by the exchange at its next step (an entry that does not fit is refused there).
    void load_state(const State& state) override {
        exchange::TensorMap map;
        for (const auto& [name, tensor] : state) map[name] = tensor;
        if (exchange_) {
            exchange_->load_state(map);
        } else {
            saved_ = std::move(map);
        }
    }

    bool whole_step(bool dense_step) const override { return !dense_step; }

    std::vector<double> take_steps() override {
        std::vector<double> out;
        if (!exchange_) return out;
        for (const auto& step : exchange_->take_steps()) {
            const std::vector<double> values = acc::regime::gravac_step_values(step);
            out.insert(out.end(), values.begin(), values.end());
        }
        return out;
    }

private:
    std::unique_ptr<comm::GroupCollectives> decisions_;  // null: comm_ decides too
    std::unique_ptr<comm::GroupCollectives> comm_;
    std::vector<std::string> model_;
    std::unique_ptr<Sync> dense_;  // the steps before start_step, at level none
    exchange::GravacExchangeOptions options_;
    std::unique_ptr<exchange::GravacExchange> exchange_;  // made at the first step, from its gradients
    std::vector<std::string> names_;
    std::map<std::string, at::Tensor> collected_;  // this step's gradients, by parameter
    exchange::TensorMap saved_;                     // loaded before the first step
    SteadyClock::time_point started_{};
    std::int64_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<Sync> make_gravac_sync(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                       c10::intrusive_ptr<c10d::ProcessGroup> decisions, std::vector<std::string> model,
                                       const GravacHookSettings& settings, std::uint32_t seed,
                                       std::unique_ptr<Sync> dense) {
    return std::make_unique<GravacSync>(std::move(group), std::move(decisions), std::move(model), settings, seed,
                                        std::move(dense));
}

}  // namespace acc::python
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
