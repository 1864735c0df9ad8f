"""The gradient recorder: what grad-dump records, from your own DDP or FSDP2 training.

Inside DistributedDataParallel's communication hook (or at the input of FSDP2's
reduce-scatter), before the gradients are averaged, one rank adds its local
gradient to a per-parameter sum; at the end of
each epoch the L2 norm of each sum goes to a gradient-statistics file
(accordion.grads, docs/formats.md) that regime-detect reads, one crash-safe
append per epoch.
"""

import math
import os
import shlex
import sys
import time

import torch
import torch.distributed as dist

from . import _library
from ._errors import Error, FileError, UsageError
from .schedule import _is_ddp

_KINDS = {"usage": UsageError, "file": FileError, "error": Error}


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    get = getattr(dist, "get_global_rank", None) or dist.distributed_c10d._get_global_rank
    return get(group, group_rank)


def _number(name, value, low=None, high=None, hint=""):
    """A statistic given to end_epoch(): None becomes NaN (not measured)."""
    if value is None:
        return math.nan
    if isinstance(value, torch.Tensor):
        value = value.item()
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{name}: must be a number, not {value!r}") from None
    if not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high):
        bounds = f" in [{low:g}, {high:g}]" if high is not None else f" >= {low:g}" if low is not None else ""
        raise UsageError(f"{name}: must be a finite number{bounds}, not {value!r}{hint}")
    return value


class GradientRecorder:
    """Records, per epoch and parameter, the L2 norm of one rank's raw local
    gradient summed over the epoch's steps, as grad-dump does, into `path`.

    `model` is your DistributedDataParallel model; the recorder registers itself
    as its communication hook and wraps `hook` (with `hook_state`), by default
    PyTorch's allreduce_hook on the model's process group, which averages the
    gradients as DDP does without a hook. Parameters are named as the wrapped
    module's named_parameters() names them (those that take a gradient).

    Or `model` is sharded with FSDP2's fully_shard (over all ranks, or within each
    replica as compress_fsdp takes it): the recorder then reads each FSDP module's
    reduce-scatter input, the rank's raw local gradients, joins each parameter's
    chunks back into its whole gradient, and leaves the exchange to FSDP (no `hook`);
    `record_rank` is then a rank of the world, every rank of which makes it.

    Every rank makes the recorder and calls end_epoch() and finish() together:
    rank `record_rank` of the model's process group records and writes, and
    tells the others whether that worked, so that a failure stops every rank
    with the same error instead of leaving them waiting.

    `start_epoch` > 0 continues the file of a stopped run: its epochs 0 ..
    start_epoch - 1 are kept (later ones dropped), after checking that it
    belongs to this model. `model_name`, `dataset`, `batch_size` (per rank) and
    `seed` are stored in the file as the run's description. `force` replaces a
    file at `path` that is not an HDF5 file or is read-only.
    """

    def __init__(self, model, path, *, hook=None, hook_state=None, start_epoch=0, record_rank=0,
                 model_name=None, dataset="", batch_size=0, seed=0, force=False):
        from .fsdp import _is_fsdp
        fsdp = _is_fsdp(model)
        if not _is_ddp(model) and not fsdp:
            raise UsageError("model: GradientRecorder records inside DistributedDataParallel's communication hook "
                             "or at FSDP2's reduce-scatter; give it the model wrapped in "
                             "torch.nn.parallel.DistributedDataParallel (one process works too) or sharded with "
                             f"fully_shard, not a {type(model).__name__}")
        if not isinstance(start_epoch, int) or start_epoch < 0:
            raise UsageError(f"start_epoch: must be a whole number >= 0, not {start_epoch!r}")
        self.path = os.fspath(path)
        if fsdp:
            for option, value in (("hook", hook), ("hook_state", hook_state)):
                if value is not None:
                    raise UsageError(f"{option}: DDP's communication hook, which FSDP2 has none of; under fully_shard "
                                     "the recorder reads the reduce-scatter's input and leaves the exchange to FSDP "
                                     "(or compress_fsdp, made beside it): leave hook and hook_state out")
            from .fsdp import _fsdp_modules
            modules, shard_group = _fsdp_modules(model, "GradientRecorder")
            self._group = None  # every rank of the world trains the model and hears the recorder
            module = model
        else:
            self._group = model.process_group
            module = model.module
        world = dist.get_world_size(self._group)
        if not isinstance(record_rank, int) or not 0 <= record_rank < world:
            whose = "the world (every rank trains the sharded model)" if fsdp else "the model's process group"
            raise UsageError(f"record_rank: must be a rank of {whose}, 0 to {world - 1}, not {record_rank!r}")
        self._source = _global_rank(self._group, record_rank)
        self._recording = dist.get_rank(self._group) == record_rank
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise UsageError("model: has no parameter that takes a gradient; there is nothing to record")
        #: The recorded parameters' names, in the model's order (the file's order).
        self.names = [name for name, _ in named]
        # Under fully_shard, a parameter is a DTensor whose shape is the whole parameter's.
        self._shapes = [tuple(p.shape) for _, p in named]
        if fsdp:
            self._layouts = self._fsdp_layouts(modules, shard_group, named)
            if model_name is None:
                from torch.distributed.fsdp import FSDPModule  # fully_shard made the class FSDP<the model's class>
                model_name = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule)).__name__
        else:
            # Buckets hold the parameters themselves; DDP regroups them after the first step,
            # so every lookup goes by the tensor, never by position.
            self._name_of = {self._key(p): name for name, p in named}
            if hook is None:
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
                hook, hook_state = default_hooks.allreduce_hook, (hook_state if hook_state is not None else self._group)
            self._hook, self._hook_state = hook, hook_state
        self.epoch = start_epoch
        self._steps = 0
        self._finished = False
        self._sums = _library.classes.GradientSums() if self._recording else None
        self._file = None

        def open_file():
            if not self._recording:
                return
            dims = [d for shape in self._shapes for d in shape]
            from ._build_info import VERSION
            self._file = _library.call(
                _library.classes.GradsFile, self.path, self.names, [len(s) for s in self._shapes], dims,
                f"accordion.GradientRecorder {VERSION}", shlex.join(sys.argv),
                model_name if model_name is not None else type(module).__name__, dataset, int(batch_size), world,
                int(seed), start_epoch if start_epoch > 0 else -1, bool(force))

        self._together(open_file)
        if fsdp:
            from .fsdp import _listen
            for index, (_, fsdp_module, group) in enumerate(modules):
                _listen(fsdp_module, group, lambda flat, index=index: self._record_shards(index, flat))
        else:
            try:
                model.register_comm_hook(self._hook_state, self._record)
            except RuntimeError as e:
                if self._file is not None:
                    self._file.close()
                if "once" not in str(e):
                    raise
                raise UsageError("model: already has a communication hook, and DDP takes one; give yours to the "
                                 "recorder instead: GradientRecorder(model, path, hook=your_hook, "
                                 "hook_state=its_state)") from None
        self._started = time.perf_counter()

    @staticmethod
    def _fsdp_layouts(modules, shard_group, named):
        """Each FSDP module's layout (fsdp._Module); UsageError where the recorder
        would miss a parameter's gradient."""
        from .fsdp import _layouts
        layouts, managed = _layouts(modules, named)
        for name, _ in named:
            if name not in managed:
                raise UsageError(f"model: parameter '{name}' is not sharded by fully_shard (no FSDP module manages "
                                 "it), so no reduce-scatter hands the recorder its gradient; apply fully_shard to "
                                 "the model's root module too")
        shards = dist.get_world_size(shard_group)
        if shards == 1:
            raise UsageError("model: sharded over one rank (its shard group), where FSDP has no reduce-scatter whose "
                             "input the recorder reads; shard it over two or more ranks, or record under "
                             "DistributedDataParallel")
        return [(layout, shards) for layout in layouts]

    def _record_shards(self, index, flat):
        """FSDP module `index`'s reduce-scatter input, `flat`: its parameters' raw local
        gradients, added to the sums on the recording rank. Every rank checks it, so
        that a failure stops them all alike."""
        from .fsdp import _whole_gradients
        layout, shards = self._layouts[index]
        whole = _whole_gradients(layout, flat, shards)
        if whole is None:
            raise UsageError(f"model: {layout.label} reduce-scattered {flat.numel()} gradient values, not the "
                             f"{shards * layout.numel} of its parameters: a parameter got no gradient this step; "
                             "GradientRecorder needs one for every trainable parameter of a module in every step")
        if self._sums is not None:
            _library.call(self._sums.add, *whole)
        if index == 0:  # every module is reduced once per (synchronised) step
            self._steps += 1

    @staticmethod
    def _key(tensor):
        return (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype)

    def _record(self, state, bucket):
        """The communication hook: add this rank's local gradients to the sums
        (before any averaging), then run the wrapped hook."""
        # Every rank names the bucket's tensors, so that a failure stops them all alike.
        names = []
        for p in bucket.parameters():
            name = self._name_of.get(self._key(p))
            if name is None:
                raise UsageError("model: DDP synchronises a parameter that was not among the module's "
                                 "named_parameters() when the recorder was made; make the recorder once the "
                                 "model is complete")
            names.append(name)
        if self._sums is not None:
            _library.call(self._sums.add, names, bucket.gradients())
        if bucket.index() == 0:
            self._steps += 1
        return self._hook(state, bucket)

    def _together(self, action):
        """Runs `action` on the recording rank and raises its error on every rank."""
        failure, error = [None], None
        if self._recording:
            try:
                action()
            except Exception as e:  # noqa: BLE001 - whatever it is, the other ranks must hear of it
                failure[0], error = (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else ""), e
        dist.broadcast_object_list(failure, src=self._source, group=self._group)
        if error is not None:
            raise error
        if failure[0] is not None:
            kind, message = failure[0]
            if kind not in ("UsageError", "FileError", "Error"):
                message = f"{self.path}: the recording rank failed: {kind}: {message}"
            raise {"UsageError": UsageError, "FileError": FileError}.get(kind, Error)(message)

    def end_epoch(self, lr, loss=None, accuracy=None, *, test_loss=None, test_accuracy=None, samples=0,
                  seconds=None, steps=None):
        """Ends the epoch on every rank: the recording rank appends it to the file.

        `lr` is the learning rate the epoch used (at its last step). `loss` and
        `accuracy` (a fraction in [0, 1]) are the recording rank's training
        numbers, `test_loss` and `test_accuracy` those of an evaluation; leave
        out what you did not measure. `samples` counts the recording rank's
        training samples; `seconds` is the epoch's training time (default: the
        time since the previous end_epoch() or the recorder's start, which
        includes any evaluation in between); `steps` is counted by the hook
        unless given.
        """
        if self._finished:
            raise UsageError(f"{self.path}: end_epoch() after finish(); the recording has ended")
        values = dict(lr=_number("lr", lr, 0),
                      loss=_number("loss", loss),
                      accuracy=_number("accuracy", accuracy, 0, 1, " (a fraction: divide a percentage by 100)"),
                      test_loss=_number("test_loss", test_loss),
                      test_accuracy=_number("test_accuracy", test_accuracy, 0, 1,
                                            " (a fraction: divide a percentage by 100)"),
                      seconds=_number("seconds", seconds, 0) if seconds is not None
                      else time.perf_counter() - self._started)
        if math.isnan(values["lr"]):
            raise UsageError("lr: the epoch's learning rate is required")
        steps = self._steps if steps is None else int(steps)
        epoch = self.epoch

        def append():
            norms = _library.call(self._sums.norms, self.names)
            for name, norm in zip(self.names, norms):
                if not math.isfinite(norm):
                    raise Error(f"training diverged: the summed gradient of '{name}' has norm "
                                f"{'NaN' if math.isnan(norm) else 'infinity'} at epoch {epoch}; "
                                f"{self.path} keeps the epochs before it")
            _library.call(self._file.append_epoch, values["lr"], values["loss"], values["accuracy"],
                          values["test_loss"], values["test_accuracy"], steps, int(samples), values["seconds"],
                          norms)

        self._together(append)
        if self._sums is not None:
            self._sums.reset()
        self._steps = 0
        self.epoch += 1
        self._started = time.perf_counter()

    def summed_gradient(self, name):
        """The recording rank's gradient of `name` summed over the epoch so far."""
        if self._sums is None:
            raise UsageError(f"{name}: this rank does not record; the sums live on the recording rank")
        return _library.call(self._sums.sum, name)

    def finish(self):
        """Marks the file complete (every rank calls it) and ends the recording.
        A run that stops without it leaves a valid file marked incomplete."""
        if self._finished:
            return

        def complete():
            _library.call(self._file.finish)
            self._file.close()

        self._together(complete)
        self._finished = True

    @property
    def epochs_written(self):
        """Epochs in the file (on the recording rank; None elsewhere)."""
        return _library.call(self._file.epochs_written) if self._file is not None else None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.finish()
        elif self._file is not None:
            self._file.close()
        return False
