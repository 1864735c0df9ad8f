// Each bucket's parameters at their levels, behind the package's DDP communication
// hook (hook_sync.hpp): the toolkit's exchange::GradientExchange (train-dist's
// compressors, error feedback, counting) run on DDP's buckets over the user's own
// process group; and the one sync a CompressionState holds, bound for Python.
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
#include "hook_sync.hpp"

#include "comm/group.hpp"
#include "compress/spec.hpp"
#include "exchange/bucket_exchanges.hpp"
#include "exchange/gradient_exchange.hpp"
#include "exchange/staging.hpp"
#include "regime/gravac.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace acc::python {
namespace {

class BucketSync final : public Sync {
public:
    BucketSync(c10::intrusive_ptr<c10d::ProcessGroup> group, std::uint32_t seed, bool error_feedback)
        : comm_(std::make_unique<comm::GroupCollectives>(std::move(group))) {
        options_.seed = seed;
        options_.error_feedback = error_feedback;
    }

    // Starts replacing each gradient of the bucket by its average over the ranks,
    // each compressed at its level: the first collectives are launched and run while
    // the caller goes on (DDP's backward pass). Buckets come in the same order on
    // every rank; the exchange checks names, shapes and levels.
    void add_bucket(const std::vector<std::string>& names, const std::vector<at::Tensor>& gradients,
                    const std::vector<std::string>& levels, bool) override {
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
        Pending started{&exchange, gradients, {}};
        if (!gradients.empty() && is_16_bit(gradients[0].scalar_type())) {
            // A bf16 or fp16 bucket (a model kept in 16 bits) is exchanged as float32
            // copies: every compressor computes and keeps its memories in fp32, and
            // the average is rounded back into the bucket once, at the end.
            started.narrow = gradients;
            for (auto& t : started.wide) {
                if (t.scalar_type() != gradients[0].scalar_type())
                    throw UsageError("bucket of " + names.front() + ": gradients of several dtypes");
                t = t.to(at::kFloat);
            }
        }
        exchange.start(started.wide);
        pending_.push_back(std::move(started));
        for (size_t i = 0; i < names.size(); ++i) last_level_[names[i]] = specs[i];
    }

    // Finishes every bucket started since the last call, in the order they started
    // (the same on every rank).
    void finish_step(std::int64_t) override {
        std::vector<Pending> pending;
        pending.swap(pending_);
        for (auto& p : pending) {
            p.exchange->finish();
            for (size_t i = 0; i < p.narrow.size(); ++i) p.narrow[i].copy_(p.wide[i]);
            const exchange::StepStats& s = p.exchange->last_step();
            exchange_seconds_ += s.encode_seconds + s.decode_seconds + s.communication_seconds;
        }
        ++steps_;
        last_end_ = Clock::now();
    }

    void begin_epoch() override {
        epoch_start_ = last_end_ = Clock::now();
        steps_ = 0;
        exchange_seconds_ = 0;
    }

    std::vector<double> epoch_times() const override {
        return {std::chrono::duration<double>(last_end_ - epoch_start_).count(), static_cast<double>(steps_),
                exchange_seconds_};
    }

    // docs/metrics.md, "Data sent".
    double floats_sent() const override { return static_cast<double>(buckets_.bytes_sent()) / 4.0; }

    std::vector<std::string> momentum_in_gradient() const override {
        std::vector<std::string> out;
        for (const auto& [name, level] : last_level_)
            if (level.info().momentum_in_gradient) out.push_back(name);
        return out;
    }

    // Entries of the exchanges themselves are left out.
    State state() const override {
        refuse_pending("state_dict()");
        return buckets_.parameter_state();
    }

    // Each parameter takes its entries into the next bucket it turns up in.
    void load_state(const State& state) override {
        refuse_pending("load_state_dict()");
        buckets_.dissolve_all();
        buckets_.drop_carried();
        buckets_.carry(state);
    }

    std::vector<double> take_steps() override { return {}; }

    bool whole_step(bool) const override { return false; }

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

    using Clock = std::chrono::steady_clock;
    Clock::time_point epoch_start_ = Clock::now(), last_end_ = epoch_start_;
    std::int64_t steps_ = 0;
    double exchange_seconds_ = 0;

    std::unique_ptr<comm::GroupCollectives> comm_;
    // comm_ for each device's tensors; declared before buckets_, whose exchanges use them.
    std::map<std::string, std::unique_ptr<comm::Collectives>> staged_;
    exchange::ExchangeOptions options_;
    std::map<std::string, compress::Spec> specs_;
    exchange::BucketExchanges buckets_;
    // A bucket started and not yet finished: the gradients its exchange averages
    // (float32 copies of a 16-bit bucket's, in `wide`) and the bucket's own (`narrow`,
    // 16-bit buckets only), which take the average when it is finished.
    struct Pending {
        exchange::GradientExchange* exchange = nullptr;
        std::vector<at::Tensor> wide;
        std::vector<at::Tensor> narrow;
    };
    static bool is_16_bit(at::ScalarType type) { return type == at::kBFloat16 || type == at::kHalf; }
    std::vector<Pending> pending_;  // started, in order, not yet finished
    std::map<std::string, compress::Spec> last_level_;  // each parameter's level when last sent
};

// The one sync of a CompressionState, as Python sees it: made from its settings by
// one constructor (GraVAC when `gravac` names a family), whichever sync it is.
class HookSync : public torch::CustomClassHolder {
public:
    // gravac_numbers: theta_min, theta_max, epsilon, window, omega, theta_s, smoothing
    // (0: the paper's rule); gravac_texts: policy, throughput statistic, gain. `model`:
    // the parameters' names in the model's order. `decisions`: GraVAC's deciding ranks
    // (make_gravac_sync), `group` itself under DDP.
    HookSync(c10::intrusive_ptr<c10d::ProcessGroup> group, c10::intrusive_ptr<c10d::ProcessGroup> decisions,
             std::vector<std::string> model, std::int64_t seed,
             bool error_feedback, std::string gravac, std::vector<double> gravac_numbers,
             std::vector<std::string> gravac_texts, bool reset_gains, std::int64_t batch_size) {
        guarded([&] {
            rank_ = group->getRank();
            world_ = group->getSize();
            const auto seed32 = static_cast<std::uint32_t>(seed);
            sync_ = make_bucket_sync(group, seed32, error_feedback);
            if (gravac.empty()) return 0;
            if (gravac_numbers.size() != 7 || gravac_texts.size() != 3)
                throw Error("internal error: GraVAC's settings are 7 numbers and 3 texts");
            GravacHookSettings g;
            g.family = gravac;
            g.settings.theta_min = gravac_numbers[0];
            g.settings.theta_max = gravac_numbers[1];
            g.settings.epsilon = gravac_numbers[2];
            g.settings.window = static_cast<std::int64_t>(gravac_numbers[3]);
            g.settings.omega = gravac_numbers[4];
            g.settings.theta_s = gravac_numbers[5];
            g.settings.smoothing = gravac_numbers[6];
            g.settings.policy = regime::parse_gravac_policy(gravac_texts[0]);
            g.settings.statistic = regime::parse_gravac_statistic(gravac_texts[1]);
            g.settings.gain = regime::parse_gravac_gain(gravac_texts[2]);
            g.settings.reset_gains = reset_gains;
            g.batch_size = batch_size;
            sync_ = make_gravac_sync(std::move(group), std::move(decisions), std::move(model), g, seed32,
                                     std::move(sync_));
            gravac_ = true;
            return 0;
        });
    }

    void add_bucket(std::vector<std::string> names, std::vector<at::Tensor> gradients, std::vector<std::string> levels,
                    bool dense_step) {
        guarded([&] {
            sync_->add_bucket(names, gradients, levels, dense_step);
            return 0;
        });
    }
    void finish_step(std::int64_t epoch) {
        guarded([&] {
            sync_->finish_step(epoch);
            return 0;
        });
    }
    void begin_epoch() { sync_->begin_epoch(); }
    double floats_sent() const { return sync_->floats_sent(); }
    std::vector<std::string> momentum_in_gradient() const {
        return guarded([&] { return sync_->momentum_in_gradient(); });
    }
    bool gravac() const { return gravac_; }
    bool whole_step(bool dense_step) const { return sync_->whole_step(dense_step); }
    std::vector<double> take_steps() {
        return guarded([&] { return sync_->take_steps(); });
    }
    std::vector<double> epoch_times() const { return sync_->epoch_times(); }

    std::vector<std::string> state_names() const {
        return guarded([&] {
            std::vector<std::string> out;
            for (const auto& e : sync_->state()) out.push_back(e.first);
            return out;
        });
    }
    std::vector<at::Tensor> state_tensors() const {
        return guarded([&] {
            std::vector<at::Tensor> out;
            for (const auto& e : sync_->state()) out.push_back(e.second);
            return out;
        });
    }
    void load_state(std::vector<std::string> names, std::vector<at::Tensor> tensors) {
        guarded([&] {
            if (names.size() != tensors.size()) throw Error("internal error: state names and tensors differ in number");
            State state;
            for (size_t i = 0; i < names.size(); ++i) state.emplace_back(names[i], tensors[i]);
            sync_->load_state(state);
            return 0;
        });
    }

    // The rank and world size that state() belongs to: [rank, world size].
    std::vector<std::int64_t> owner() const { return {rank_, world_}; }
    // Within a world of the size that saved it, a state moves only to the rank that
    // saved it: error memories and PowerSGD's Q are each rank's own. (After a change
    // of world size the package drops them, with a warning, and loads the rest.)
    void check_owner(std::int64_t saved_rank, std::int64_t saved_world) const {
        guarded([&] {
            if (saved_rank == rank_ && saved_world == world_) return 0;
            throw UsageError("state_dict: saved by rank " + std::to_string(saved_rank) + " of " +
                             std::to_string(saved_world) + ", loaded on rank " + std::to_string(rank_) + " of " +
                             std::to_string(world_) +
                             "; each rank's error memories are its own, so a state loads only on the rank that "
                             "saved it (give each rank its own state_dict)");
        });
    }

private:
    std::unique_ptr<Sync> sync_;
    bool gravac_ = false;
    std::int64_t rank_ = 0;
    std::int64_t world_ = 1;
};

}  // namespace

std::unique_ptr<Sync> make_bucket_sync(c10::intrusive_ptr<c10d::ProcessGroup> group, std::uint32_t seed,
                                       bool error_feedback) {
    return std::make_unique<BucketSync>(std::move(group), seed, error_feedback);
}

}  // namespace acc::python

TORCH_LIBRARY_FRAGMENT(accordion, m) {
    using acc::python::HookSync;
    m.class_<HookSync>("HookSync")
        .def(torch::init<c10::intrusive_ptr<c10d::ProcessGroup>, c10::intrusive_ptr<c10d::ProcessGroup>,
                         std::vector<std::string>, std::int64_t, bool,
                         std::string, std::vector<double>, std::vector<std::string>, bool, std::int64_t>())
        .def("add_bucket", &HookSync::add_bucket)
        .def("finish_step", &HookSync::finish_step)
        .def("begin_epoch", &HookSync::begin_epoch)
        .def("floats_sent", &HookSync::floats_sent)
        .def("momentum_in_gradient", &HookSync::momentum_in_gradient)
        .def("gravac", &HookSync::gravac)
        .def("whole_step", &HookSync::whole_step)
        .def("take_steps", &HookSync::take_steps)
        .def("epoch_times", &HookSync::epoch_times)
        .def("state_names", &HookSync::state_names)
        .def("state_tensors", &HookSync::state_tensors)
        .def("load_state", &HookSync::load_state)
        .def("owner", &HookSync::owner)
        .def("check_owner", &HookSync::check_owner);
}
#endif
