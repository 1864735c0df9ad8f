"""GraVAC for compression_hook: the settings (Gravac), and the making of a
CompressionState's one gradient sync, GraVAC's or the buckets'."""

import collections
import math
import re

import torch.distributed as dist

from . import _library
from ._errors import UsageError

#: One step's decision (the library's regime::GravacStep, field by field): the epoch,
#: the factor sent (1.0: dense), which of GraVAC's choices it was ('candidate',
#: 'theta_min' or 'dense'), the two factors evaluated, and their smoothed gains after
#: the step.
GravacStep = collections.namedtuple("GravacStep", _library.GRAVAC_STEP_FIELDS)

# The programs' defaults (train-dist's --gravac-* options), from the library.
_DEFAULTS = _library.GRAVAC_DEFAULTS


class Gravac:
    """GraVAC's settings (Tyagi & Swany, "GraVAC: Adaptive Compression for
    Communication-Efficient Distributed DL Training"), as train-dist's --gravac
    options take them:

    - `family`: the compressor whose factor GraVAC scales: 'topk', 'dgc',
      'randomk' or 'powersgd' (factor f is rank max(1, floor(rows cols / (f (rows + cols))))).
    - `theta_min` (10), `theta_max` (1000): the least and the largest factor;
      `theta_s` (2): the first candidate is theta_s x theta_min.
    - `epsilon` (0.7): the least gain at which a factor is sent; `gain`: 'squared'
      (||C(g)||^2 / ||g||^2, Algorithm 1's) or 'norm' (||C(g)|| / ||g||, as the
      authors' released code measures it).
    - `window` (500): steps between the checks that scale the candidate;
      `omega` (0.01): the tolerance of the saturation and theta_min rules.
    - `smoothing`: the EWMA weight of a step's gain; None: min(1, N/100) for N ranks.
    - `policy`: 'exponential' or 'geometric' growth of the candidate; `throughput`:
      'median' or 'mean' of a window's steps; `reset_gains`: restart the candidate's
      average when its factor changes.
    - `batch_size` (1): this rank's samples per step. GraVAC's throughput is the
      samples of all ranks per second of a step; with a constant batch size its
      value changes no decision.
    """

    def __init__(self, family, *, theta_min=_DEFAULTS["theta_min"], theta_max=_DEFAULTS["theta_max"],
                 epsilon=_DEFAULTS["epsilon"], window=_DEFAULTS["window"], omega=_DEFAULTS["omega"],
                 theta_s=_DEFAULTS["theta_s"], smoothing=None, policy=_DEFAULTS["policy"],
                 throughput=_DEFAULTS["throughput"], reset_gains=False, gain=_DEFAULTS["gain"], batch_size=1):
        if not isinstance(family, str):
            raise UsageError(f"gravac: must be a compressor family such as 'topk', not {family!r}")
        for name, value in (("theta_min", theta_min), ("theta_max", theta_max), ("epsilon", epsilon),
                            ("omega", omega), ("theta_s", theta_s)):
            _real(name, value)
        if smoothing is not None:
            _real("smoothing", smoothing)
        for name, value in (("window", window), ("batch_size", batch_size)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"{name}: must be a whole number, not {value!r}")
        for name, value in (("policy", policy), ("throughput", throughput), ("gain", gain)):
            if not isinstance(value, str):
                raise UsageError(f"{name}: must be text, not {value!r}")
        self.family, self.theta_min, self.theta_max, self.epsilon = family, float(theta_min), float(theta_max), \
            float(epsilon)
        self.window, self.omega, self.theta_s = window, float(omega), float(theta_s)
        self.smoothing = None if smoothing is None else float(smoothing)
        self.policy, self.throughput, self.reset_gains, self.batch_size = policy, throughput, bool(reset_gains), \
            batch_size
        self.gain = gain

    def _key(self):
        return (self.family, self.theta_min, self.theta_max, self.epsilon, self.window, self.omega, self.theta_s,
                self.smoothing, self.policy, self.throughput, self.reset_gains, self.gain, self.batch_size)

    def __repr__(self):
        return (f"Gravac({self.family!r}, theta_min={self.theta_min:g}, theta_max={self.theta_max:g}, "
                f"epsilon={self.epsilon:g}, window={self.window}, policy={self.policy!r})")


def _real(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{name}: must be a finite number, not {value!r}")


def keyword_names(message):
    """A library message about train-dist's --gravac options in the package's argument names
    (--gravac-theta-min: theta_min)."""
    message = re.sub(r"--gravac-([a-z-]+)", lambda m: m.group(1).replace("-", "_"), message)
    return message.replace("--gravac", "gravac")


def gravac_settings(gravac):
    """`gravac` (a family's name or a Gravac) as a Gravac; UsageError for anything else."""
    if isinstance(gravac, str):
        gravac = Gravac(gravac)
    if not isinstance(gravac, Gravac):
        raise UsageError(f"gravac: must be a family such as 'topk' or an accordion.Gravac, not "
                         f"{type(gravac).__name__}")
    return gravac


def check_same_settings(gravac, group):
    """Every rank must decide alike: UsageError unless every rank of `group` has `gravac`'s settings."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, gravac._key(), group=group)
    for rank, key in enumerate(everyone):
        if key != gravac._key():
            raise UsageError(f"gravac: ranks disagree on GraVAC's settings (rank {rank}: {key}; this rank: "
                             f"{gravac._key()}); every rank must make the hook with the same ones")


def library_settings(gravac):
    """`gravac`'s settings as the library's sync takes them: the family, the numbers
    (theta_min, theta_max, epsilon, window, omega, theta_s, smoothing; 0: the paper's
    rule), the texts (policy, throughput, gain), reset_gains and batch_size."""
    numbers = [gravac.theta_min, gravac.theta_max, gravac.epsilon, float(gravac.window), gravac.omega,
               gravac.theta_s, gravac.smoothing or 0.0]
    return gravac.family, numbers, [gravac.policy, gravac.throughput, gravac.gain], gravac.reset_gains, \
        gravac.batch_size


def gravac_steps(flat):
    """The library's step records (each regime::GravacStep's values in field order) as GravacSteps."""
    count = len(GravacStep._fields)
    steps = []
    for at in range(0, len(flat), count):
        step = dict(zip(GravacStep._fields, flat[at:at + count]))
        step["epoch"] = int(step["epoch"])
        step["choice"] = _library.GRAVAC_CHOICES[int(step["choice"])]
        steps.append(GravacStep(**step))
    return steps
