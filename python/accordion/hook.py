"""The compressing communication hook: DistributedDataParallel's gradients
exchanged by the toolkit's compressors (train-dist's exchange: error feedback,
PowerSGD's warm start, the same wire formats and the same count of floats sent),
at a fixed level or following a schedule that regime-detect wrote."""

import math
import os
import warnings

import torch
import torch.distributed as dist

from . import _auto, _library
from ._errors import UsageError
from .gravac import check_same_settings, gravac_settings, gravac_steps, keyword_names, library_settings
from .recorder import _global_rank
from .schedule import EXTEND_HINT, Schedule, _is_ddp


class CompressionState:
    """The state of compression_hook, DDP's communication hook that averages each
    bucket's gradients with the toolkit's compressors (as PowerSGDState is
    powerSGD_hook's). Register the two with DDP, or give them to a GradientRecorder:

        state = accordion.CompressionState(ddp_model, "powersgd:2")
        ddp_model.register_comm_hook(state, accordion.compression_hook)

    The levels come from one of:
    - `compress`, a compressor spec (as train-dist's --compress: 'powersgd:2',
      'topk:0.01', 'none', ...) used for every parameter of two or more dimensions;
      vectors and scalars are sent uncompressed;
    - `schedule`, a compression schedule from regime-detect (a Schedule or its path,
      checked against the model): each parameter's level per epoch; `extend_last`
      repeats its last epoch beyond its end;
    - `accordion=True`: Accordion decided online, as train-dist --accordion: `low`
      where a parameter's regime is critical, `high` elsewhere, from the norms of
      rank 0's summed local gradients with `eta` and a decision every `interval`
      epochs;
    - `gravac`, a compressor family ('topk', 'dgc', 'randomk', 'powersgd') or an
      accordion.Gravac with its settings: GraVAC, as train-dist --gravac, chooses
      every step the compression factor for all the model's matrices together
      (vectors are sent uncompressed); take_gravac_steps() says what it chose;
    - `auto=True`: the automatic mode, as train-dist --auto: Accordion's regimes
      decided online as with accordion=True, and each epoch every parameter's level
      among none, `low`, `high` and `levels` (default powersgd:1, powersgd:2,
      powersgd:4, topk:0.01) chosen by the step time predicted on the link measured
      on this group, within Accordion's error budget, or none for every parameter
      where no compressed plan is predicted faster than uncompressed by `margin`
      (of the plans within `margin` of the fastest, the one of least error); the
      link and the codecs are measured again when a step's time drifts from its
      prediction by more than `drift`. The first epoch's steps go uncompressed: they
      time the step's compute. auto_records says, on rank 0, what was planned and why.
    Call set_epoch(epoch) at the start of every epoch (online and auto, with its
    learning rate, on every rank together).

    `seed` seeds PowerSGD's first Q and the other random streams (the same on every
    rank); `error_feedback` keeps, per parameter, what compression left out and adds
    it to the next step's gradient (the compressors that have it). Steps before
    `start_step` (counted from 0) are sent uncompressed, as powerSGD_hook's
    start_powerSGD_iter does.

    The averaged gradient of 'dgc' levels carries DGC's momentum: use the optimizer
    without momentum for them. Every rank makes the hook with the same arguments.
    Needs PyTorch 2.x.
    """

    def __init__(self, model, compress=None, *, schedule=None, extend_last=False, accordion=False, gravac=None,
                 auto=False, low=_library.DEFAULT_LOW, high=_library.DEFAULT_HIGH, eta=_library.DEFAULT_ETA,
                 interval=_library.DEFAULT_INTERVAL, levels=None, margin=None, drift=None, seed=0,
                 error_feedback=True, start_step=0):
        if not _is_ddp(model):
            raise UsageError("model: CompressionState compresses DistributedDataParallel's buckets; give it the "
                             f"model wrapped in torch.nn.parallel.DistributedDataParallel, not a "
                             f"{type(model).__name__}")
        named = [(name, p) for name, p in model.module.named_parameters() if p.requires_grad]
        self._configure("CompressionState", model.process_group, named, compress, schedule=schedule,
                        extend_last=extend_last, accordion=accordion, gravac=gravac, low=low, high=high, eta=eta,
                        interval=interval, seed=seed, error_feedback=error_feedback, start_step=start_step,
                        auto=auto, levels=levels, margin=margin, drift=drift)

    def _configure(self, what, group, named, compress, *, schedule, extend_last, accordion, gravac, low, high, eta,
                   interval, seed, error_feedback, start_step, decisions=None, auto=None, levels=None, margin=None,
                   drift=None):
        """What every state shares: the levels' source, the library's sync over `group`
        and the parameters `named` ([(name, parameter)], in the model's order); `what`
        names the call in messages. `decisions`: the group whose ranks take GraVAC's
        decisions together (default `group`). `auto`: None where the caller has no
        automatic mode."""
        given = [key for key, value in (("compress", compress), ("schedule", schedule), ("accordion", accordion),
                                        ("gravac", gravac), ("auto", auto))
                 if value is not None and value is not False]
        if len(given) != 1:
            sources = ["compress (a compressor spec such as 'powersgd:2')",
                       "schedule (a compression schedule from regime-detect)", "accordion=True (decided online)",
                       "gravac (a compressor family such as 'topk', decided every step)"]
            if auto is not None:
                sources.append("auto=True (levels chosen by predicted step time)")
            raise UsageError(f"{what}: give one of {', '.join(sources[:-1])} or {sources[-1]}, not "
                             f"{' and '.join(given) if given else 'none of them'}")
        for key, value in (("levels", levels), ("margin", margin), ("drift", drift)):
            if value is not None and not auto:
                raise UsageError(f"{key}: belongs to the automatic mode; give it with auto=True")
        if gravac is not None and not error_feedback:
            raise UsageError("error_feedback: GraVAC always keeps what compression left out (its error feedback "
                             "is part of the algorithm); leave error_feedback on")
        if not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            raise UsageError(f"seed: must be a whole number in [0, 2^32), not {seed!r}")
        if not isinstance(start_step, int) or start_step < 0:
            raise UsageError(f"start_step: must be a whole number >= 0, not {start_step!r}")
        self.start_step = start_step
        if not hasattr(group, "boxed"):
            raise UsageError(f"{what}: needs PyTorch 2.x, whose process groups can be handed to C++ "
                             f"(ProcessGroup.boxed()); this is torch {torch.__version__}")
        self._group = group
        self.names = [name for name, _ in named]
        self._name_of = {(p.data_ptr(), tuple(p.shape), p.dtype): name for name, p in named}
        # The run plan decides each epoch's levels, as train-dist's does.
        self._plan = _library.call(_library.classes.Plan,
                                   *_library.parameter_lists([(name, p.shape) for name, p in named]))
        self._level_names = None
        self._schedule = None
        self._online = None
        self._auto = None
        self._gravac = gravac_settings(gravac) if gravac is not None else None
        # The state's one gradient sync, whichever way it combines gradients.
        self._sync = _make_sync(group, self.names, seed, error_feedback, self._gravac,
                                decisions if decisions is not None else group)
        note = _library.missing_kernels_note({p.device for _, p in named})
        if note:
            warnings.warn(note, stacklevel=3)  # the line that made the state
        self.epoch = 0
        self.steps = 0
        self._levels = None
        self._pending = []  # (buffer, gradients, future) of the buckets started this step
        #: Online: {name: critical} and {name: why} of the epoch in force (None otherwise).
        self.critical, self.reasons = None, None
        if schedule is not None:
            if isinstance(schedule, (str, os.PathLike)):
                schedule = Schedule(schedule)
            if not isinstance(schedule, Schedule):
                raise UsageError(f"schedule: must be a Schedule or the path of a schedule file, not "
                                 f"{type(schedule).__name__}")
            if schedule.mode != "compression":
                raise UsageError(f"{schedule.path}: is a {schedule.mode} schedule; {what} replays "
                                 "compression schedules (a batch schedule sets the batch size: Schedule.batch())")
            _library.call(self._plan.schedule, schedule._file, schedule.path, bool(extend_last), EXTEND_HINT)
            self._schedule = schedule
            self.set_epoch(0)
        elif gravac is not None:
            self._levels = {name: _library.NO_COMPRESSION for name in self.names}  # before start_step
        elif compress is not None:
            _library.call(self._plan.fixed, "compress", _spec_text("compress", compress))
            self._levels = self._levels_of(0)
        else:
            if not isinstance(interval, int) or isinstance(interval, bool):
                raise UsageError(f"interval: must be a whole number, not {interval!r}")
            if isinstance(eta, bool) or not isinstance(eta, (int, float)):
                raise UsageError(f"eta: must be a number, not {eta!r}")
            candidates = _auto.candidate_levels(levels) if auto else None
            self._online = _Online(self._plan, _spec_text("low", low), _spec_text("high", high), float(eta),
                                   interval, self._recording_rank_sums(), candidates)
            if auto:
                self._auto = _auto.Auto(group, self._planned_shapes(named), named[0][1].device if named else "cpu",
                                        _library.call(self._plan.level_names), self._online.low, self._online.high,
                                        margin, drift, seed, error_feedback, decisions=self._deciding_group(),
                                        overlapped=self._overlapped)

    def _levels_of(self, epoch):
        # A bad spec or schedule was refused when the plan was made, on every rank, before any step.
        if self._level_names is None:
            self._level_names = _library.call(self._plan.level_names)
        indices = _library.call(self._plan.levels, epoch)
        return {name: self._level_names[i] for name, i in zip(self.names, indices)}

    def _recording_rank_sums(self):
        # Rank 0 of the model's group sums its raw local gradients, as train-dist's rank 0 does.
        return _library.classes.GradientSums() if dist.get_rank(self._group) == 0 else None

    def _deciding_group(self):
        # Online, the recording rank shares its norms with every rank of this group.
        return self._group

    # The automatic mode prices what the exchange sends: each parameter whole, in DDP's
    # buckets, whose uncompressed exchange overlaps the backward pass.
    _overlapped = True

    def _planned_shapes(self, named):
        return [(name, tuple(p.shape)) for name, p in named]

    @property
    def auto_records(self):
        """auto=True, on rank 0: one dict per epoch planned so far: "epoch"; "summary"
        (why it is compressed or not, in train-dist's words); "pays", "measured",
        "predicted_seconds", "measured_seconds" (per step), the link's fit and the other
        fields of the metrics file's /auto (docs/metrics.md); "reasons" ({name: why its
        level}: pays, budget, regime, does not pay, vector, measuring, accuracy); its "steps"
        and "seconds" (so far, for the epoch in progress). Empty on the other ranks."""
        if self._auto is None:
            raise UsageError("auto_records: this state was not made with auto=True")
        return self._auto.records_now(self._sync, self.steps)

    @property
    def levels(self):
        """{parameter name: level} in force now."""
        if self._gravac is not None:
            raise UsageError("levels: GraVAC chooses a compression factor every step; take_gravac_steps() says "
                             "which")
        if self._levels is None:
            raise UsageError("levels: decided online at set_epoch(epoch, lr); call it first")
        return dict(self._levels)

    def set_epoch(self, epoch, lr=None):
        """The epoch about to start: its levels from the next step on. With a
        schedule, the schedule's; online (accordion=True), Accordion's decision from
        the epochs so far, for which `lr` (this epoch's learning rate) is required and
        epochs must follow one another from 0 (or from a loaded state_dict()'s).
        Online, every rank must call it together (rank 0 shares its norms)."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise UsageError(f"epoch: must be a whole number >= 0, not {epoch!r}")
        if self._online is not None:
            if lr is None or isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
                raise UsageError(f"lr: online Accordion needs each epoch's learning rate, a finite number >= 0, "
                                 f"not {lr!r}")
            if self._auto is not None:
                self._auto.end_epoch(self._sync, self._online.sums, self.steps)  # before its sums are reset
            self._online.enter(epoch, float(lr), self.names, self._deciding_group())
            self._levels = self._levels_of(epoch)
            critical = _library.call(self._plan.critical)
            self.critical = {name: bool(c) for name, c in zip(self.names, critical)}
            self.reasons = dict(zip(self.names, _library.call(self._plan.reasons)))
            if self._auto is not None:
                chosen = self._auto.begin_epoch(epoch, critical, self.steps)
                self._levels = {name: self._level_names[i] for name, i in zip(self.names, chosen)}
        elif self._schedule is not None:
            self._levels = self._levels_of(epoch)
        _library.call(self._sync.begin_epoch)  # what ran between the epochs is no step's time
        self.epoch = epoch

    @property
    def floats_sent(self):
        """Floats this rank handed to collectives so far (bytes / 4, as train-dist counts)."""
        return _library.call(self._sync.floats_sent)

    def take_gravac_steps(self):
        """GraVAC: the steps since the last call, one accordion.GravacStep each (the
        factor sent, 1.0 for dense; the choice, 'candidate', 'theta_min' or 'dense';
        the factors evaluated and their smoothed gains)."""
        if self._gravac is None:
            raise UsageError("take_gravac_steps: this state was not made with gravac=")
        return gravac_steps(_library.call(self._sync.take_steps))

    @property
    def momentum_in_gradient(self):
        """The names of the parameters whose averaged gradient carries momentum (DGC,
        as last sent): give their weight decay momentum, not their gradient again."""
        return list(_library.call(self._sync.momentum_in_gradient))

    def _exchange_bucket(self, bucket):
        names = []
        for p in bucket.parameters():
            name = self._name_of.get((p.data_ptr(), tuple(p.shape), p.dtype))
            if name is None:
                raise UsageError("model: DDP synchronises a parameter that was not among the module's "
                                 "named_parameters() when the state was made; make it once the model is "
                                 "complete")
            names.append(name)
        gradients = bucket.gradients()
        if self._levels is None:
            raise UsageError("CompressionState: online Accordion decides each epoch's levels at "
                             "set_epoch(epoch, lr); call it before the epoch's first step")
        if self._online is not None and self._online.sums is not None:
            _library.call(self._online.sums.add, names, gradients)  # before anything changes them
        # A future holding a CUDA tensor names its device: DDP's stream then waits for
        # the stream that completed it instead of reading the buffer unsynchronised.
        device = bucket.buffer().device
        future = torch.futures.Future(devices=[device] if device.type == "cuda" else None)
        dense = self.steps < self.start_step
        levels = [_library.NO_COMPRESSION if dense else self._levels[n] for n in names]
        self._pending.append((bucket.buffer(), gradients, future))
        try:
            _library.call(self._sync.add_bucket, names, gradients, levels, dense)
        except BaseException:
            self._pending.pop()
            raise
        # DDP hands the buckets over in order and waits for their futures only after
        # the last: the earlier buckets' collectives run during the rest of the
        # backward pass (GraVAC's wait for the last), and all finish together here.
        if bucket.is_last():
            self._complete(lambda: _library.call(self._sync.finish_step, self.epoch))
        return future

    def _complete(self, exchange):
        """Runs `exchange` over the buckets pending this step and completes their futures."""
        pending, self._pending = self._pending, []
        try:
            exchange()
        except BaseException as e:
            for _, _, future in pending:
                future.set_exception(e)
            raise
        for buffer, gradients, future in pending:
            # The exchange wrote into the gradients; where they are not views of the
            # bucket's buffer, the buffer takes them.
            offset = 0
            for g in gradients:
                part = buffer[offset:offset + g.numel()]
                if part.data_ptr() != g.data_ptr():
                    part.copy_(g.reshape(-1))
                offset += g.numel()
            future.set_result(buffer)
        self.steps += 1

    def state_dict(self):
        """The state to checkpoint, on every rank, with torch.save or as a Stateful of
        torch.distributed.checkpoint (DCP):

        - "ranks": {"<global rank>": (owner, entries, sums)}, this rank's own: who saved
          it ({"rank", "world_size"} in the exchange's group; under compress_fsdp also
          "shard_rank", "shard_world_size"), each parameter's error memory and
          compressor state ("<name>/error", "<name>/powersgd_q", "<name>/dgc_momentum",
          and the exchange's "exchange/..."), and online, on rank 0, the epoch's gradient
          sums (else None). A tuple, which DCP writes whole under this rank's key: its
          copy is never taken for another rank's, and a fresh state loads it.
        - what every rank holds alike: "epoch", "steps", the layout ("world_size";
          under compress_fsdp also "shard_world_size"), online Accordion's norms and
          learning rates ("accordion"), and GraVAC's "gravac": True and its controller's
          inputs ("shared": ({"gravac/inputs": ...},))."""
        names = _library.call(self._sync.state_names)
        tensors = _library.call(self._sync.state_tensors)
        own, shared = {}, {}
        for name, tensor in zip(names, tensors):
            (shared if name.split("/", 1)[0] in _SHARED else own)[name] = tensor
        sums = self._online.sums_state(self.names) if self._online is not None else None
        out = {"epoch": self.epoch, "steps": self.steps, **self._layout(),
               "ranks": {str(dist.get_rank()): (self._owner(), own, sums)}, "shared": (shared,)}
        if self._online is not None:
            out["accordion"] = self._online.state_dict(self.names)
        if self._gravac is not None:
            out["gravac"] = True
        if self._auto is not None:
            out["auto"] = True
        return out

    def _owner(self):
        """Whose state this rank's entries are: its rank and world size in the exchange's group."""
        rank, world = _library.call(self._sync.owner)
        return {"rank": int(rank), "world_size": int(world)}

    def _layout(self):
        """The layout of the ranks, the same on each: the exchange group's size."""
        return {"world_size": self._owner()["world_size"]}

    def _describe(self, layout):
        return f"{layout['world_size']} rank{'s' if layout['world_size'] != 1 else ''}"

    def _check_owner(self, owner):
        """UsageError unless `owner` (a state's, saved in this layout) is this rank."""
        _library.call(self._sync.check_owner, int(owner.get("rank", -1)), int(owner.get("world_size", -1)))

    def load_state_dict(self, state_dict):
        """Restores state_dict() (or a DCP checkpoint's) on the rank that saved it;
        another rank of the same layout is refused. A state saved by another number of
        ranks (or under compress_fsdp another layout of replicas and shards) goes on
        with what every rank held alike (the epoch, the steps, online Accordion's norms
        and learning rates and rank 0's sums of the epoch, GraVAC's controller) and
        drops, with a warning, what was each rank's own (error memories, PowerSGD's Q,
        DGC's momentum): no rule splits or merges them without changing the training."""
        saved = _saved_state(state_dict)
        names = list(saved.own) + list(saved.shared)
        # GraVAC's exchange keeps entries of its own beside the parameters' ("gravac/inputs", "exchange/...").
        own = {"gravac", "exchange"} if self._gravac is not None else set()
        unknown = sorted({n.rsplit("/", 1)[0] for n in names} - set(self.names) - own)
        if unknown:
            raise UsageError(f"state_dict: holds state of parameters this model does not have: "
                             f"{', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}")
        if self._online is not None and saved.accordion is None:
            raise UsageError("state_dict: holds no online Accordion state (it was saved by a CompressionState "
                             "without accordion=True)")
        if (self._auto is not None) != saved.auto:
            raise UsageError("state_dict: saved with auto=True, which this state does not run" if self._auto is None
                             else "state_dict: holds no automatic mode's state (it was saved by a CompressionState "
                                  "without auto=True)")
        if (self._gravac is not None) != saved.gravac:
            raise UsageError("state_dict: saved with GraVAC, which this state does not run" if self._gravac is None
                             else "state_dict: holds no GraVAC state (it was saved by a CompressionState without "
                                  "gravac=)")
        layout = self._layout()
        entries = dict(saved.own)
        if saved.layout is not None and saved.layout != layout:
            warnings.warn(f"state_dict: saved by {self._describe(saved.layout)}, loaded by "
                          f"{self._describe(layout)}; each rank's error memories, PowerSGD's Q and DGC's momentum "
                          "are dropped (they belong to the ranks that saved them), while the epoch, the steps, "
                          "online Accordion's norms and GraVAC's gains go on", UserWarning, stacklevel=2)
            entries = {}
        elif saved.owner is not None:  # None: saved before the owner was recorded, taken as this rank's
            self._check_owner(saved.owner)
        if self._online is not None:
            self._online.load_state_dict(saved.accordion, len(self.names), saved.sums)
        entries.update(saved.shared)
        _library.call(self._sync.load_state, list(entries), list(entries.values()))
        self.steps = int(saved.steps)
        if self._auto is not None:
            self._auto.running = None  # its next epoch measures again, its steps uncompressed
        if self._online is not None:
            # The saved epoch had ended: the next set_epoch() decides the one after it.
            self.epoch = int(saved.epoch)
        else:
            self.set_epoch(int(saved.epoch))


# Sync entries every rank holds alike (GraVAC's controller inputs, from sums over every
# rank): kept across a change of layout. The others are each rank's own.
_SHARED = ("gravac",)


class _Saved:
    """A state_dict() as load_state_dict() reads it, whichever version wrote it."""

    def __init__(self, *, epoch, steps, layout, owner, own, shared, sums, accordion, gravac, auto):
        self.epoch, self.steps, self.layout, self.owner = epoch, steps, layout, owner
        self.own, self.shared, self.sums, self.accordion, self.gravac = own, shared, sums, accordion, gravac
        self.auto = auto


_LAYOUT_KEYS = ("world_size", "shard_world_size")


def _saved_state(state_dict):
    """`state_dict` (this version's, or an earlier one's: entries under "state", the
    owner beside them) as a _Saved; UsageError for anything else."""
    try:
        epoch, steps = state_dict["epoch"], state_dict["steps"]
    except (KeyError, TypeError):
        raise UsageError("state_dict: not a CompressionState.state_dict() (needs 'ranks' or 'state', 'epoch' and "
                         "'steps')") from None
    accordion = state_dict.get("accordion")
    if "ranks" in state_dict:
        ranks = state_dict["ranks"]
        if not isinstance(ranks, dict) or len(ranks) != 1:
            raise UsageError("state_dict: its 'ranks' must hold the state of the one rank that saved it")
        owner, own, sums = next(iter(ranks.values()))
        shared = state_dict.get("shared", ({},))[0]
        layout = {key: int(state_dict[key]) for key in _LAYOUT_KEYS if key in state_dict}
        return _Saved(epoch=epoch, steps=steps, layout=layout, owner=dict(owner), own=dict(own),
                      shared=dict(shared), sums=sums, accordion=accordion, gravac="gravac" in state_dict,
                      auto="auto" in state_dict)
    if "state" not in state_dict:
        raise UsageError("state_dict: not a CompressionState.state_dict() (needs 'ranks' or 'state', 'epoch' and "
                         "'steps')")
    entries = dict(state_dict["state"])
    if isinstance(state_dict.get("gravac"), dict):
        entries.update(state_dict["gravac"])  # as saved before GraVAC's entries joined "state"
    own = {n: t for n, t in entries.items() if n.split("/", 1)[0] not in _SHARED}
    shared = {n: t for n, t in entries.items() if n.split("/", 1)[0] in _SHARED}
    owner, layout = None, None
    if "world_size" in state_dict:  # without: saved before the owner was recorded, taken as this rank's
        owner = {key: int(state_dict[key]) for key in ("rank", "world_size", "shard_rank", "shard_world_size")
                 if key in state_dict and state_dict[key] is not None}
        layout = {key: owner[key] for key in _LAYOUT_KEYS if key in owner}
    sums = accordion.get("sums") if isinstance(accordion, dict) else None
    return _Saved(epoch=epoch, steps=steps, layout=layout, owner=owner, own=own, shared=shared, sums=sums,
                  accordion=accordion, gravac="gravac" in state_dict, auto="auto" in state_dict)


def _make_sync(group, names, seed, error_feedback, gravac, decisions):
    """The state's one gradient sync (the library's, python/csrc/hook_sync.hpp): each
    bucket at its levels, or GraVAC's factor every step when `gravac` (a Gravac) is given,
    decided together by the ranks of `decisions` (a group holding `group`'s ranks)."""
    family, numbers, texts, reset_gains, batch_size = "", [], [], False, 1
    if gravac is not None:
        family, numbers, texts, reset_gains, batch_size = library_settings(gravac)
    try:
        sync = _library.call(_library.classes.HookSync, group.boxed(), decisions.boxed(), list(names), seed,
                             bool(error_feedback), family, numbers, texts, reset_gains, batch_size)
    except UsageError as e:
        raise UsageError(keyword_names(str(e))) from None
    if gravac is not None:
        check_same_settings(gravac, decisions)
    return sync


def compression_hook(state, bucket):
    """DDP's communication hook: `bucket`'s gradients averaged over the ranks, each
    parameter's at its level in `state` (a CompressionState). The bucket's first
    collectives start when DDP calls the hook and run during the rest of the backward
    pass; every bucket's future completes when DDP hands over the step's last bucket."""
    return state._exchange_bucket(bucket)


def _spec_text(argument, text):
    if not isinstance(text, str):
        raise UsageError(f"{argument}: must be a compressor spec such as 'powersgd:2', not {text!r}")
    return text.strip()


class _Online:
    """Accordion decided online: rank 0's per-epoch norms, shared with every rank,
    and the learning rates so far, kept in the run plan, whose rule decides each epoch."""

    def __init__(self, plan, low, high, eta, interval, sums, automatic=None):
        self.plan, self.eta, self.interval, self.automatic = plan, eta, interval, automatic
        self._start(low, high)
        self.low, self.high = _library.call(plan.accordion_levels)  # canonical specs
        self.sums = sums  # rank 0 only

    def _start(self, low, high):
        try:
            if self.automatic is None:
                _library.call(self.plan.accordion, low, high, self.eta, self.interval)
            else:  # the automatic mode's candidates join the plan's levels
                _library.call(self.plan.automatic, low, high, self.eta, self.interval, self.automatic)
        except UsageError as e:  # named as the programs' options; here they are arguments
            raise UsageError(str(e).lstrip("-")) from None

    def enter(self, epoch, lr, names, group):
        recorded = _library.call(self.plan.recorded_epochs)
        decided = len(_library.call(self.plan.learning_rates))
        if epoch == recorded + 1 and decided == epoch:
            self._end_epoch(recorded, names, group)  # the epoch before has ended
            recorded += 1
        if epoch != recorded or decided not in (epoch, epoch + 1):
            raise UsageError(f"epoch: online Accordion decides epochs in order; epoch {epoch} cannot follow "
                             f"{decided - 1 if decided else 'none'} (call set_epoch once per epoch: 0, 1, 2, ...)")
        _library.call(self.plan.set_learning_rate, epoch, lr)

    def _end_epoch(self, epoch, names, group):
        shared = [None]
        if self.sums is not None:
            shared[0] = _library.call(self.sums.norms, names)
            self.sums.reset()
        dist.broadcast_object_list(shared, src=_global_rank(group, 0), group=group)
        _library.call(self.plan.record_norms, epoch, [float(n) for n in shared[0]])

    def sums_state(self, names):
        """Rank 0: the epoch's sums so far, by name; None on the other ranks."""
        if self.sums is None:
            return None
        sums = {}
        for name in names:
            try:
                sums[name] = _library.call(self.sums.sum, name).clone()
            except UsageError:  # no gradient of it yet
                pass
        return sums

    def state_dict(self, names):
        """What every rank holds alike (rank 0's sums go with its own entries)."""
        flat, count = _library.call(self.plan.norms), len(names)
        norms = [list(flat[at:at + count]) for at in range(0, len(flat), count)]
        return {"norms": norms, "lr": list(_library.call(self.plan.learning_rates)), "low": self.low,
                "high": self.high, "eta": self.eta, "interval": self.interval}

    def load_state_dict(self, saved, parameters, saved_sums):
        try:
            norms, lr = [list(map(float, row)) for row in saved["norms"]], list(map(float, saved["lr"]))
            settings = (saved["low"], saved["high"], float(saved["eta"]), int(saved["interval"]))
        except (KeyError, TypeError, ValueError):
            raise UsageError("state_dict: its online Accordion state is damaged") from None
        if settings != (self.low, self.high, self.eta, self.interval):
            raise UsageError(f"state_dict: saved with low {settings[0]}, high {settings[1]}, eta {settings[2]:g}, "
                             f"interval {settings[3]}; this state has low {self.low}, high {self.high}, "
                             f"eta {self.eta:g}, interval {self.interval}")
        if any(len(row) != parameters for row in norms):
            raise UsageError("state_dict: its online Accordion state has norms of another number of parameters than this model")
        if len(lr) not in (len(norms), len(norms) + 1):
            raise UsageError("state_dict: its online Accordion state is damaged")
        self._start(self.low, self.high)  # a fresh plan, given the saved epochs in order
        for epoch, row in enumerate(norms):
            _library.call(self.plan.record_norms, epoch, row)
        for epoch, rate in enumerate(lr):
            _library.call(self.plan.set_learning_rate, epoch, rate)
        if self.sums is not None:
            self.sums.reset()
            saved_sums = saved_sums or {}
            if saved_sums:
                names = list(saved_sums)
                _library.call(self.sums.add, names, [saved_sums[n] for n in names])
