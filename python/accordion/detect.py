"""accordion.detect: Accordion's regime rule run in-process, by the same library
and with the same checks and words as regime-detect."""

import os

import torch

from . import _library
from ._errors import UsageError
from .schedule import Schedule


def command(grads, eta=None, interval=None, low=None, high=None, mode=None, granularity=None, monotone=False):
    """regime-detect's arguments (without the program's name and -o) for these keywords."""
    return list(_library.call(torch.ops.accordion.detect_arguments, os.fspath(grads),
                              *_settings(eta, interval, low, high, mode, granularity, monotone)))


def _settings(eta, interval, low, high, mode, granularity, monotone):
    # None leaves the program's default; a batch size (a whole number) is given as the program reads it.
    def text(value):
        return None if value is None else str(value)
    if eta is not None and (isinstance(eta, bool) or not isinstance(eta, (int, float))):
        raise UsageError(f"eta: must be a number, not {eta!r}")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)):
        raise UsageError(f"interval: must be a whole number, not {interval!r}")
    return (None if eta is None else float(eta), interval, text(mode), text(low), text(high), text(granularity),
            bool(monotone))


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
    settings = _settings(eta, interval, low, high, mode, granularity, monotone)
    if isinstance(grads, dict):
        names, ndim, dims, norms, rates = _norms_table(grads, parameters, lr)
        made = _library.call(torch.ops.accordion.detect_norms, "accordion.detect(norms)", names, ndim, dims, norms,
                             rates, *settings)
        return Schedule("accordion.detect(norms)", _made=made)
    if parameters is not None or lr is not None:
        raise UsageError("parameters, lr: only for norms given as a dict; a grads file holds its own")
    try:
        source = os.fspath(grads)
    except TypeError:
        raise UsageError(f"grads: a grads.h5 path or a dict of norms, not {type(grads).__name__}") from None
    made = _library.call(torch.ops.accordion.detect_file, source, *settings)
    return Schedule(f"accordion.detect({source})", _made=made)


def _norms_table(norms, parameters, lr):
    """The dict's norms as the library takes them: the parameters' lists, the norms
    epoch-major, one learning rate per epoch."""
    if parameters is None or lr is None:
        raise UsageError("grads: norms given as a dict need parameters=[(name, shape)] "
                         "(accordion.trainable_parameters(model)) and lr= (one number or one per epoch)")
    names, ndim, dims = _library.parameter_lists(parameters)
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
    try:
        table = [float(r[e]) for e in range(epochs) for r in rows]
        rates = [float(x) for x in rates]
    except (TypeError, ValueError):
        raise UsageError("grads, lr: norms and learning rates must be numbers") from None
    return names, ndim, dims, table, rates
