"""accordion.detect: Accordion's regime rule run in-process, by the same library
and with the same checks as regime-detect, whose command line it builds."""

import math
import os
import shutil
import tempfile

import torch

from . import _library
from ._errors import UsageError
from .schedule import Schedule


def command(grads, eta=None, interval=None, low=None, high=None, mode=None, granularity=None, monotone=False):
    """regime-detect's arguments (without the program's name and -o) for these keywords."""
    args = [os.fspath(grads)]
    # None leaves the program's default, and the option off its command line.
    for option, value in (("--eta", eta), ("--interval", interval), ("--mode", mode), ("--low", low),
                          ("--high", high), ("--granularity", granularity)):
        if value is not None:
            args += [option, str(value)]
    if monotone:
        args.append("--monotone")
    return args


def detect(grads, eta=None, interval=None, low=None, high=None, mode=None, granularity=None, monotone=False,
           parameters=None, lr=None):
    """Finds the critical regimes in gradient statistics and returns the schedule
    regime-detect writes for the same input and options (Schedule.save writes
    it, byte for byte the program's file where SOURCE_DATE_EPOCH fixes the time).

    grads: a grads.h5 path, or {parameter name: [gradient norm per epoch]} with
    `parameters` ([(name, shape)], e.g. accordion.trainable_parameters(model))
    and `lr` (the learning rate, one number or one per epoch). The options are
    regime-detect's, with its defaults where None: eta 0.5, interval 10, mode
    'compression' ('batch'), low 'powersgd:2' (batch: 512), high 'powersgd:1'
    (batch: 4096), granularity 'layer' ('model'), monotone (batch mode only).
    Raises UsageError or FileError with regime-detect's words."""
    options = dict(eta=eta, interval=interval, low=low, high=high, mode=mode, granularity=granularity,
                   monotone=monotone)
    work = tempfile.mkdtemp(prefix="accordion-detect-")
    try:
        if isinstance(grads, dict):
            source = os.path.join(work, "grads.h5")
            _write_norms(source, grads, parameters, lr)
        else:
            if parameters is not None or lr is not None:
                raise UsageError("parameters, lr: only for norms given as a dict; a grads file holds its own")
            try:
                source = os.fspath(grads)
            except TypeError:
                raise UsageError(f"grads: a grads.h5 path or a dict of norms, not {type(grads).__name__}") from None
        output = os.path.join(work, "sched.h5")
        _library.call(torch.ops.accordion.detect, command(source, **options), output)
        schedule = Schedule(output)
        with open(output, "rb") as f:
            schedule._contents = f.read()
        schedule.path = f"accordion.detect({source})" if not isinstance(grads, dict) else "accordion.detect(norms)"
        return schedule
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_norms(path, norms, parameters, lr):
    if parameters is None or lr is None:
        raise UsageError("grads: norms given as a dict need parameters=[(name, shape)] "
                         "(accordion.trainable_parameters(model)) and lr= (one number or one per epoch)")
    parameters = [(str(name), tuple(int(d) for d in shape)) for name, shape in parameters]
    names = [name for name, _ in parameters]
    if sorted(names) != sorted(str(n) for n in norms):
        missing = sorted(set(names) - set(norms)) + sorted(set(norms) - set(names))
        raise UsageError(f"grads: the norms' names and parameters' names differ (first: {missing[0]})")
    rows = [list(norms[name]) for name in names]
    epochs = len(rows[0]) if rows else 0
    if any(len(r) != epochs for r in rows):
        raise UsageError("grads: every parameter needs one norm per epoch, the same number of epochs")
    rates = list(lr) if isinstance(lr, (list, tuple)) else [lr] * epochs
    if len(rates) != epochs:
        raise UsageError(f"lr: {len(rates)} learning rates for {epochs} epochs")
    from ._build_info import VERSION
    dims = [d for _, shape in parameters for d in shape]
    f = _library.call(_library.classes.GradsFile, path, names, [len(s) for _, s in parameters], dims,
                      f"accordion.detect {VERSION}", "", "", "", 0, 1, 0, -1, False)
    nan = math.nan
    for e in range(epochs):
        _library.call(f.append_epoch, float(rates[e]), nan, nan, nan, nan, 0, 0, nan, [float(r[e]) for r in rows])
    _library.call(f.finish)
