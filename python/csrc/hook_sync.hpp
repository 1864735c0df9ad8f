// The package's one gradient sync per CompressionState, behind DDP's communication
// hook: what train-dist's exchange::RunSync is to its trainer. Either each bucket's
// parameters at their levels (hook.cpp: the run plan's levels, from a fixed level, a
// schedule or Accordion online), or GraVAC's factor chosen every step for the whole
// model (gravac.cpp). CompressionState holds one, made by make_sync from its settings,
// and asks it the same things whichever it is.
//
// Built only against LibTorch 2.x: Python hands the process group over with
// ProcessGroup.boxed(), which 1.13 lacks.
#pragma once

#include "comm/group.hpp"
#include "exchange/bucket_exchanges.hpp"
#include "regime/gravac.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace acc::python {

using State = exchange::StateEntries;

class Sync {
public:
    virtual ~Sync() = default;
    /// One of DDP's buckets of this step: its parameters' names, their gradients and
    /// levels (compressor specs). `dense_step`: a step before the state's start_step,
    /// whose levels are all none. The gradients must stay untouched until
    /// finish_step(). Collective: every rank passes the same names, shapes and levels.
    virtual void add_bucket(const std::vector<std::string>& names, const std::vector<at::Tensor>& gradients,
                            const std::vector<std::string>& levels, bool dense_step) = 0;
    /// After the step's last bucket: every gradient added since the last call holds
    /// its average over the ranks. `epoch` tags GraVAC's step records.
    virtual void finish_step(std::int64_t epoch) = 0;
    /// An epoch starts; what ran since the last step (an evaluation) is no step's time.
    virtual void begin_epoch() = 0;
    /// Floats handed to collectives since the start (bytes / 4).
    virtual double floats_sent() const = 0;
    /// The names of the parameters whose averaged gradient carries momentum (DGC), as
    /// last sent: SGD should apply momentum to their weight decay only.
    virtual std::vector<std::string> momentum_in_gradient() const = 0;
    /// Every parameter's state as "<parameter>/<what>" entries (and GraVAC's
    /// "gravac/inputs"), and its restoring; an entry that does not fit is refused
    /// when the exchange that takes it next runs.
    virtual State state() const = 0;
    virtual void load_state(const State& state) = 0;
    /// GraVAC's step records since the last call, each regime::GravacStep's values in
    /// the order of its fields, one step after the other; empty for the buckets' sync.
    virtual std::vector<double> take_steps() = 0;
    /// Whether a step's gradients are averaged only at finish_step() after its last
    /// bucket, all together (GraVAC's compressed steps: one decision from every
    /// bucket's gains), rather than bucket by bucket, each finished as soon as
    /// finish_step() follows it. A caller that must hand each bucket back at once
    /// (FSDP2's all-reduce hook, one per module) then hands over copies and applies
    /// their averages when the step ends. `dense_step`: a step before start_step.
    virtual bool whole_step(bool dense_step) const = 0;
    /// The steps since begin_epoch() (or since the sync was made), for the automatic
    /// mode: [seconds from then to the last step's end, steps, seconds of them inside
    /// the exchange (encoding, decoding, issuing and waiting for collectives)]. Only
    /// the buckets' sync times them; GraVAC's returns {}.
    virtual std::vector<double> epoch_times() const { return {}; }
};

/// Each bucket's parameters at their levels: `seed` seeds PowerSGD's Q and every other
/// random stream (the same on every rank).
std::unique_ptr<Sync> make_bucket_sync(c10::intrusive_ptr<c10d::ProcessGroup> group, std::uint32_t seed,
                                       bool error_feedback);

/// GraVAC's settings as the package gives them (the library's checks apply).
struct GravacHookSettings {
    std::string family;
    regime::GravacSettings settings;  ///< smoothing 0: the paper's rule for the group's size
    std::int64_t batch_size = 1;      ///< this rank's samples per step
};

/// GraVAC over the whole model, the parameters `model` (names, in the model's order:
/// every step's gradients go to the exchange in it), averaged over `group`, while the
/// ranks of `decisions` (a group containing `group`'s: the same group under DDP, the
/// world under FSDP2, whose replica groups each average one shard) decide together;
/// steps before start_step go through `dense` at level none. Throws acc::UsageError
/// for settings out of range.
std::unique_ptr<Sync> make_gravac_sync(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                       c10::intrusive_ptr<c10d::ProcessGroup> decisions, std::vector<std::string> model,
                                       const GravacHookSettings& settings, std::uint32_t seed,
                                       std::unique_ptr<Sync> dense);

}  // namespace acc::python
