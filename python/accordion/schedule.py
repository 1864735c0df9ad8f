"""Schedules written by regime-detect (format accordion.schedule, docs/formats.md),
read with the toolkit's own reader and checks."""

import math
import os
import tempfile
from collections import namedtuple

import torch

from . import _library
from ._errors import FileError, UsageError

# How a caller repeats a schedule's last epoch beyond its end, for the library's message.
EXTEND_HINT = "extend_last=True"

#: One epoch of a batch-size schedule, as a data loader and optimizer need it.
BatchEpoch = namedtuple("BatchEpoch", ["batch_size", "global_batch_size", "lr"])
BatchEpoch.__doc__ = """One epoch of a batch schedule: the per-rank batch size (the global one
split over the ranks), the global batch size, and the learning rate to use."""


def trainable_parameters(model):
    """(name, shape) of each parameter that takes a gradient, as named_parameters()
    names them; a DistributedDataParallel model is looked through to its module."""
    module = getattr(model, "module", model) if _is_ddp(model) else model
    return [(name, tuple(p.shape)) for name, p in module.named_parameters() if p.requires_grad]


def _is_ddp(model):
    from torch.nn.parallel import DistributedDataParallel
    return isinstance(model, DistributedDataParallel)


class Schedule:
    """A schedule file: per epoch, a compression level per parameter
    (mode 'compression') or a global batch size and learning-rate factor (mode
    'batch'). Every check regime-detect's reader makes is made; a missing or
    damaged file raises FileError naming it."""

    def __init__(self, path, *, _made=None):
        if _made is None:
            path = os.fspath(path)
            if not os.path.exists(path):
                raise FileError(f"{path}: no such schedule file (regime-detect GRADS.h5 -o {path} writes one)")
            f = _library.call(_library.classes.ScheduleFile, path)
        else:
            f = _made  # made in-process (accordion.detect); `path` names it in messages
        self.path = path
        self._made = _made is not None
        self._file = f
        (self.mode, self.detector, self.granularity, self.low, self.high, self.source,
         self.producer) = f.text()
        self.eta = f.eta()
        self.interval = f.interval()
        self.monotone = f.monotone()
        self.epochs = f.epochs()
        names, ndim, dims = f.names(), f.ndim(), f.dims()
        shapes, at = [], 0
        for n in ndim:
            shapes.append(tuple(dims[at:at + n]))
            at += n
        #: (name, shape) per parameter, in the model's order.
        self.parameters = list(zip(names, shapes))
        count = len(names)
        rows = lambda flat: [flat[e * count:(e + 1) * count] for e in range(self.epochs)]  # noqa: E731
        self._critical = rows(f.critical())
        self._reason = rows(f.reason())
        self._ratio = rows(f.ratio())
        self._levels = f.levels()
        self._level = rows(f.level()) if self.mode == "compression" else []
        self._batch_size = f.batch_size()
        self._lr_scale = f.lr_scale()

    def save(self, path):
        """Writes the schedule file (the one it was read from, or the one
        accordion.detect made) to `path`, replacing any file there."""
        path = os.fspath(path)
        if self._made:
            _library.call(self._file.write, path)  # as regime-detect writes it
            return
        with open(self.path, "rb") as f:
            contents = f.read()
        folder = os.path.dirname(os.path.abspath(path))
        temp = None
        try:
            fd, temp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(contents)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)  # as a file the program writes
            os.replace(temp, path)
        except OSError as e:
            if temp is not None and os.path.exists(temp):
                os.unlink(temp)
            raise FileError(f"{path}: cannot write the schedule ({e.strerror or e})") from None

    def __repr__(self):
        return (f"Schedule({self.path!r}: mode {self.mode}, {self.epochs} epochs, "
                f"{len(self.parameters)} parameters, low {self.low}, high {self.high})")

    @property
    def names(self):
        return [name for name, _ in self.parameters]

    def _row(self, epoch, extend_last):
        if not isinstance(epoch, int) or epoch < 0:
            raise UsageError(f"epoch: must be a whole number >= 0, not {epoch!r}")
        return _library.call(self._file.row, self.path, epoch, bool(extend_last), EXTEND_HINT)

    def check_model(self, model):
        """Raises UsageError, naming the first differences, unless the schedule
        lists the model's trainable parameters with the same names, shapes and
        order (a model wrapped in DistributedDataParallel is looked through)."""
        _library.call(self._file.check_model, self.path, *_library.parameter_lists(trainable_parameters(model)))

    def levels(self, epoch, extend_last=False):
        """{name: level} for one epoch of a compression schedule: a compressor spec
        such as 'powersgd:2', or 'none'."""
        self._need("compression", "levels")
        row = self._level[self._row(epoch, extend_last)]
        return {name: self._levels[i] for (name, _), i in zip(self.parameters, row)}

    def critical(self, epoch, extend_last=False):
        """{name: True where the epoch is critical for the parameter}."""
        row = self._critical[self._row(epoch, extend_last)]
        return {name: bool(c) for (name, _), c in zip(self.parameters, row)}

    def reasons(self, epoch, extend_last=False):
        """{name: why the epoch is or is not critical, in words}."""
        row = self._reason[self._row(epoch, extend_last)]
        return {name: _library.REASONS[r] for (name, _), r in zip(self.parameters, row)}

    def critical_epochs(self):
        """The epochs critical for at least one parameter that compression applies to
        (two or more dimensions; vectors are always sent whole), or in a batch
        schedule for the model: the critical regimes regime-detect's summary gives."""
        return list(self._file.critical_epochs())

    def batch(self, epoch, lr, world_size=None, extend_last=False):
        """The batch size and learning rate of one epoch of a batch schedule, as
        train-dist replays it: the global batch size split evenly over
        `world_size` ranks (default: torch.distributed's world, else 1), and `lr`
        (the learning rate your schedule gives this epoch) times the schedule's
        factor, batch_size / low."""
        self._need("batch", "batch")
        if world_size is None:
            import torch.distributed as dist
            world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if not isinstance(world_size, int) or world_size < 1:
            raise UsageError(f"world_size: must be a whole number >= 1, not {world_size!r}")
        if not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
            raise UsageError(f"lr: must be a finite number >= 0, not {lr!r}")
        row = self._row(epoch, extend_last)
        global_batch = self._batch_size[row]
        if global_batch % world_size != 0:
            raise UsageError(f"{self.path}: the global batch size of epoch {epoch}, {global_batch}, does not split "
                             f"evenly over {world_size} ranks")
        return BatchEpoch(global_batch // world_size, global_batch, lr * self._lr_scale[row])

    def _need(self, mode, method):
        if self.mode != mode:
            other = "batch" if mode == "compression" else "levels"
            raise UsageError(f"{self.path}: is a {self.mode} schedule; {method}() reads {mode} schedules "
                             f"(use {other}() instead)")


def parameter_mismatches(model, schedule):
    """What differs between the model's (name, shape) list and the schedule's, in
    words; empty when they match."""
    return list(_library.call(torch.ops.accordion.parameter_mismatches, *_library.parameter_lists(model),
                              *_library.parameter_lists(schedule)))


def load_schedule(path, model=None):
    """Reads a schedule file; with `model`, also checks that it belongs to it."""
    schedule = Schedule(path)
    if model is not None:
        schedule.check_model(model)
    return schedule
