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
    """The automatic mode of one CompressionState. `named`: [(name, parameter)] in the
    model's order; `level_names`: the run plan's levels, which plans index."""

    def __init__(self, group, named, level_names, low, high, margin, drift, seed, error_feedback):
        margin = MARGIN if margin is None else _number("margin", margin)
        drift = DRIFT if drift is None else _number("drift", drift)
        self._group = group
        self._names = [name for name, _ in named]
        self._shapes = {name: tuple(p.shape) for name, p in named}
        self._device = str(named[0][1].device) if named else "cpu"
        self.leader = dist.get_rank(group) == 0
        self.tuner = _library.call(_library.classes.AutoTuner,
                                   *_library.parameter_lists([(name, p.shape) for name, p in named]),
                                   list(level_names), low, high, margin, drift, seed, bool(error_feedback))
        self.running = None  # the epoch in progress (set_epoch called, not ended)
        #: Rank 0: one dict per epoch planned (auto_records).
        self.records = []

    def end_epoch(self, sync, sums):
        """Rank 0, when the epoch in progress ends: its steps' times from `sync` (the
        hook's) and `sums` (the online rank sums, before they are reset) for the profile."""
        epoch, self.running = self.running, None
        if epoch is None or not self.leader:
            return
        seconds, steps, exchange = _library.call(sync.epoch_times)
        gradients = []
        for name in self._names:
            try:
                gradients.append(_library.call(sums.sum, name))
            except UsageError:  # no gradient of it this epoch
                gradients.append(torch.zeros(self._shapes[name]))
        steps = int(steps)
        _library.call(self.tuner.after_epoch, gradients, float(seconds), float(seconds - exchange), steps)
        record = self.records[-1] if self.records and self.records[-1]["epoch"] == epoch else None
        if record is not None:
            record.update(self._record(), steps=steps, seconds=float(seconds))

    def begin_epoch(self, epoch, critical):
        """Every rank, at set_epoch: measures when rank 0 says so, and returns the
        epoch's level per parameter (indices into the plan's levels), rank 0's."""
        source = _global_rank(self._group, 0)
        due = [bool(_library.call(self.tuner.due, epoch)) if self.leader else None]
        dist.broadcast_object_list(due, src=source, group=self._group)
        if due[0]:
            _library.call(self.tuner.measure, self._group.boxed(), self._device, self.leader)
        elif self.leader:
            self.tuner.skip_measure()
        levels = [None]
        if self.leader:
            levels[0] = list(_library.call(self.tuner.plan, [int(c) for c in critical]))
            self.records.append({"epoch": epoch, "summary": _library.call(self.tuner.summary), **self._record()})
        dist.broadcast_object_list(levels, src=source, group=self._group)
        self.running = epoch
        return levels[0]

    def records_now(self, sync):
        """Rank 0's records, the epoch in progress with its steps so far: "steps",
        "seconds" and "measured_seconds" (the time per step, as its end will record it)."""
        out = [dict(r) for r in self.records]
        if out and self.running is not None and out[-1]["epoch"] == self.running:
            seconds, steps, _ = _library.call(sync.epoch_times)
            out[-1].update(steps=int(steps), seconds=float(seconds),
                           measured_seconds=float(seconds) / steps if steps else None)
        return out

    def _record(self):
        numbers = list(_library.call(self.tuner.record))
        count = len(RECORD_FIELDS)
        out = {field: (bool(v) if field in ("pays", "measured") else float(v))
               for field, v in zip(RECORD_FIELDS, numbers[:count])}
        out["reasons"] = {name: REASONS[int(code)] for name, code in zip(self._names, numbers[count:])}
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
