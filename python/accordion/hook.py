"""The compressing communication hook: DistributedDataParallel's gradients
exchanged by the toolkit's compressors (train-dist's exchange: error feedback,
PowerSGD's warm start, the same wire formats and the same count of floats sent),
at a fixed level or following a schedule that regime-detect wrote."""

import os

import torch
import torch.distributed as dist

from . import _library
from ._errors import UsageError
from .schedule import Schedule, _is_ddp


class CompressionState:
    """The state of compression_hook, DDP's communication hook that averages each
    bucket's gradients with the toolkit's compressors (as PowerSGDState is
    powerSGD_hook's). Register the two with DDP, or give them to a GradientRecorder:

        state = accordion.CompressionState(ddp_model, "powersgd:2")
        ddp_model.register_comm_hook(state, accordion.compression_hook)

    `compress` is a compressor spec (as train-dist's --compress: 'powersgd:2',
    'topk:0.01', 'none', ...) used for every parameter of two or more dimensions;
    vectors and scalars are sent uncompressed. Or `schedule` (a Schedule or the path
    of a compression schedule from regime-detect, checked against the model) gives
    each parameter its level per epoch: call set_epoch(epoch) at the start of every
    epoch; `extend_last` repeats the schedule's last epoch beyond its end.

    `seed` seeds PowerSGD's first Q and the other random streams (the same on every
    rank); `error_feedback` keeps, per parameter, what compression left out and adds
    it to the next step's gradient (the compressors that have it). Steps before
    `start_step` (counted from 0) are sent uncompressed, as powerSGD_hook's
    start_powerSGD_iter does.

    The averaged gradient of 'dgc' levels carries DGC's momentum: use the optimizer
    without momentum for them. Every rank makes the hook with the same arguments.
    Needs PyTorch 2.x.
    """

    def __init__(self, model, compress=None, *, schedule=None, extend_last=False, seed=0, error_feedback=True,
                 start_step=0):
        if not _is_ddp(model):
            raise UsageError("model: CompressionState compresses DistributedDataParallel's buckets; give it the "
                             f"model wrapped in torch.nn.parallel.DistributedDataParallel, not a "
                             f"{type(model).__name__}")
        if (compress is None) == (schedule is None):
            raise UsageError("CompressionState: give either compress (a compressor spec such as 'powersgd:2') or "
                             "schedule (a compression schedule from regime-detect), not "
                             f"{'both' if compress is not None else 'neither'}")
        if not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
            raise UsageError(f"seed: must be a whole number in [0, 2^32), not {seed!r}")
        if not isinstance(start_step, int) or start_step < 0:
            raise UsageError(f"start_step: must be a whole number >= 0, not {start_step!r}")
        self.start_step = start_step
        group = model.process_group
        if not hasattr(group, "boxed"):
            raise UsageError(f"CompressionState: needs PyTorch 2.x, whose process groups can be handed to C++ "
                             f"(ProcessGroup.boxed()); this is torch {torch.__version__}")
        module = model.module
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        self.names = [name for name, _ in named]
        self._name_of = {(p.data_ptr(), tuple(p.shape), p.dtype): name for name, p in named}
        self._matrix = {name: p.dim() >= 2 for name, p in named}
        self._extend_last = bool(extend_last)
        self._schedule = None
        if schedule is not None:
            if isinstance(schedule, (str, os.PathLike)):
                schedule = Schedule(schedule)
            if not isinstance(schedule, Schedule):
                raise UsageError(f"schedule: must be a Schedule or the path of a schedule file, not "
                                 f"{type(schedule).__name__}")
            if schedule.mode != "compression":
                raise UsageError(f"{schedule.path}: is a {schedule.mode} schedule; CompressionState replays "
                                 "compression schedules (a batch schedule sets the batch size: Schedule.batch())")
            schedule.check_model(model)
            self._schedule = schedule
        else:
            if not isinstance(compress, str):
                raise UsageError(f"compress: must be a compressor spec such as 'powersgd:2', not {compress!r}")
            compress = compress.strip()
        self._exchange = _library.call(_library.classes.HookExchange, group.boxed(), seed, bool(error_feedback))
        self.epoch = 0
        self.steps = 0
        self._levels = None
        if self._schedule is not None:
            self.set_epoch(0)
        else:
            self._levels = {name: compress if self._matrix[name] else "none" for name in self.names}
            self._check_levels()

    def _check_levels(self):
        # A bad spec is refused here, on every rank, before any step.
        for level in sorted(set(self._levels.values())):
            try:
                _library.call(self._exchange.canonical, level)
            except UsageError as e:
                raise UsageError(f"compress: {e}") from None

    @property
    def levels(self):
        """{parameter name: level} in force now."""
        return dict(self._levels)

    def set_epoch(self, epoch):
        """The epoch about to start: with a schedule, its levels from the next step on."""
        if not isinstance(epoch, int) or epoch < 0:
            raise UsageError(f"epoch: must be a whole number >= 0, not {epoch!r}")
        self.epoch = epoch
        if self._schedule is not None:
            self._levels = self._schedule.levels(epoch, extend_last=self._extend_last)

    @property
    def floats_sent(self):
        """Floats this rank handed to collectives so far (bytes / 4, as train-dist counts)."""
        return _library.call(self._exchange.floats_sent)

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
        levels = [self._levels[n] if self.steps >= self.start_step else "none" for n in names]
        _library.call(self._exchange.exchange, names, gradients, levels)
        buffer = bucket.buffer()
        # The exchange wrote into the gradients; where they are not views of the
        # bucket's buffer, the buffer takes them.
        offset = 0
        for g in gradients:
            part = buffer[offset:offset + g.numel()]
            if part.data_ptr() != g.data_ptr():
                part.copy_(g.reshape(-1))
            offset += g.numel()
        if bucket.is_last():
            self.steps += 1
        done = torch.futures.Future()
        done.set_result(buffer)
        return done

    def state_dict(self):
        """Error memories and compressor state per parameter ("<name>/error",
        "<name>/powersgd_q", "<name>/dgc_momentum"), the epoch and the floats sent:
        save it with the model's checkpoint, on every rank (each rank's memories
        are its own)."""
        names = _library.call(self._exchange.state_names)
        tensors = _library.call(self._exchange.state_tensors)
        return {"state": dict(zip(names, tensors)), "epoch": self.epoch, "steps": self.steps}

    def load_state_dict(self, state_dict):
        """Restores state_dict() (on the rank that saved it)."""
        try:
            entries, epoch, steps = state_dict["state"], state_dict["epoch"], state_dict["steps"]
        except (KeyError, TypeError):
            raise UsageError("state_dict: not a CompressionState.state_dict() (needs 'state', 'epoch' and "
                             "'steps')") from None
        names = list(entries)
        unknown = sorted({n.rsplit("/", 1)[0] for n in names} - set(self.names))
        if unknown:
            raise UsageError(f"state_dict: holds state of parameters this model does not have: "
                             f"{', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}")
        _library.call(self._exchange.load_state, names, [entries[n] for n in names])
        self.steps = int(steps)
        self.set_epoch(int(epoch))



def compression_hook(state, bucket):
    """DDP's communication hook: `bucket`'s gradients averaged over the ranks, each
    parameter's at its level in `state` (a CompressionState). The exchange runs when
    DDP calls the hook; the returned future is complete."""
    return state._exchange_bucket(bucket)
