"""CompressionState(auto=True): the library's automatic mode (train-dist --auto's
measurements and per-epoch plans) driven from the package's hook. Rank 0 plans; every
rank measures the link together and takes rank 0's levels."""

import math

import torch
import torch.distributed as dist

from . import _library
from ._errors import UsageError
from .recorder import _global_rank

MARGIN, DRIFT = torch.ops.accordion.auto_defaults()
DEFAULT_LEVELS = tuple(torch.ops.accordion.auto_default_levels())
RECORD_FIELDS = tuple(torch.ops.accordion.auto_record_fields())
REASONS = tuple(torch.ops.accordion.auto_reason_names())


def candidate_levels(levels):
    """`levels` (a list of specs, or one comma-separated text; None: the defaults) as
    the library's canonical texts, checked (an empty or unplannable one is named)."""
    if levels is None:
        return list(DEFAULT_LEVELS)
    if isinstance(levels, str):
        text = levels
    elif isinstance(levels, (list, tuple)) and all(isinstance(level, str) for level in levels):
        if any("," in level for level in levels):
            raise UsageError(f"levels: give each level as one item of the list, not {levels!r}")
        text = ",".join(levels)
    else:
        raise UsageError(f"levels: must be a list of compressor specs such as ['powersgd:1', 'topk:0.01'], "
                         f"not {levels!r}")
    return list(_library.call(torch.ops.accordion.auto_levels, text))


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{name}: must be a number, not {value!r}")
    return float(value)


class Auto:
    """The automatic mode of one CompressionState. `group`: the ranks that exchange
    (whose link is measured); `decisions`: the ranks that take rank 0's levels (its
    rank 0 plans: the one that sums the gradients), `group` or a group holding it, as
    compress_fsdp's world holds each replica group. `planned`: [(name, shape)] of what
    the exchange sends, in the model's order (a parameter's, or its first shard's);
    `device`: the model's; `level_names`: the run plan's levels, which plans index.
    `overlapped`: uncompressed steps overlap their exchange with the backward pass
    (DDP's buckets), else the exchange follows it."""

    def __init__(self, group, planned, device, level_names, low, high, margin, drift, seed, error_feedback, *,
                 decisions=None, overlapped=True):
        margin = MARGIN if margin is None else _number("margin", margin)
        drift = DRIFT if drift is None else _number("drift", drift)
        self._group = group
        self._decisions = group if decisions is None else decisions
        self._names = [name for name, _ in planned]
        self._shapes = {name: tuple(shape) for name, shape in planned}
        self._device = str(device)
        self.leader = dist.get_rank(self._decisions) == 0
        self.tuner = _library.call(_library.classes.AutoTuner, *_library.parameter_lists(planned),
                                   list(level_names), low, high, margin, drift, seed, bool(error_feedback),
                                   bool(overlapped))
        self.running = None  # the epoch in progress (set_epoch called, not ended)
        self._first_step = 0  # the state's steps when it began
        #: Rank 0: one dict per epoch planned (auto_records).
        self.records = []

    def end_epoch(self, sync, sums, steps):
        """Rank 0, when the epoch in progress ends: its time from `sync` (the hook's),
        its steps from `steps` (the state's count so far) and `sums` (the online rank
        sums, before they are reset) for the profile."""
        epoch, self.running = self.running, None
        if epoch is None or not self.leader:
            return
        seconds, _, exchange = _library.call(sync.epoch_times)
        gradients = []
        for name in self._names:
            shape = self._shapes[name]
            try:
                gradient = _library.call(sums.sum, name)
            except UsageError:  # no gradient of it this epoch
                gradient = torch.zeros(shape)
            if tuple(gradient.shape) != shape:
                gradient = gradient[:shape[0]]  # the first shard's rows, which the plan prices
            gradients.append(gradient)
        steps = int(steps) - self._first_step
        _library.call(self.tuner.after_epoch, gradients, float(seconds), float(seconds - exchange), steps)
        record = self.records[-1] if self.records and self.records[-1]["epoch"] == epoch else None
        if record is not None:
            record.update(self._record(), steps=steps, seconds=float(seconds))

    def begin_epoch(self, epoch, critical, steps):
        """Every rank, at set_epoch (`steps`: the state's count so far): measures when
        rank 0 says so, every group of exchanging ranks on its own link at once, and
        returns the epoch's level per parameter (indices into the plan's levels), rank 0's."""
        source = _global_rank(self._decisions, 0)
        due = [bool(_library.call(self.tuner.due, epoch)) if self.leader else None]
        dist.broadcast_object_list(due, src=source, group=self._decisions)
        if due[0]:
            _library.call(self.tuner.measure, self._group.boxed(), self._device, self.leader)
        elif self.leader:
            self.tuner.skip_measure()
        levels = [None]
        if self.leader:
            levels[0] = list(_library.call(self.tuner.plan, [int(c) for c in critical]))
            self.records.append({"epoch": epoch, "summary": _library.call(self.tuner.summary), **self._record()})
        dist.broadcast_object_list(levels, src=source, group=self._decisions)
        self.running, self._first_step = epoch, int(steps)
        return levels[0]

    def records_now(self, sync, steps):
        """Rank 0's records, the epoch in progress with its steps so far: "steps",
        "seconds" and "measured_seconds" (the time per step, as its end will record it)."""
        out = [dict(r) for r in self.records]
        if out and self.running is not None and out[-1]["epoch"] == self.running:
            seconds, _, _ = _library.call(sync.epoch_times)
            steps = int(steps) - self._first_step
            out[-1].update(steps=steps, seconds=float(seconds),
                           measured_seconds=float(seconds) / steps if steps else None)
        return out

    def _record(self):
        numbers = list(_library.call(self.tuner.record))
        count = len(RECORD_FIELDS)
        out = {field: (bool(v) if field in ("pays", "measured") else float(v))
               for field, v in zip(RECORD_FIELDS, numbers[:count])}
        out["reasons"] = {name: REASONS[int(code)] for name, code in zip(self._names, numbers[count:])}
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
