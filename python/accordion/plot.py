"""Plots of the toolkit's HDF5 files as PNG: a schedule's critical regimes, and
train-dist runs compared.

    python -m accordion.plot regimes GRADS.h5 SCHED.h5 -o regimes.png [--parameters 6]
    python -m accordion.plot runs LABEL=FILE[,FILE...] ... -o runs.png [--title TITLE]

`python -m accordion.plot COMMAND --help` says more about each. From Python:
accordion.plot.regimes(grads, schedule, output) and accordion.plot.runs({label:
path}, output). This module needs h5py, numpy and matplotlib (imported when a
plot is drawn, without pyplot) and nothing of the package's compiled part:
scripts/plot_regimes.py and scripts/plot_runs.py load it by its path from the
source tree.
"""
import argparse
import inspect
import os
import sys
from collections.abc import Mapping

import h5py
import numpy as np

try:
    from ._errors import Error, FileError, UsageError
except ImportError:  # loaded by its path, outside the package (scripts/plot_regimes.py, plot_runs.py)
    class Error(RuntimeError):
        """A problem the user can act on; the message starts with the file or setting at fault."""

    class FileError(Error):
        """A file that cannot be read or written, or that breaks its format."""

    class UsageError(Error, ValueError):
        """Arguments the plots cannot take."""

__all__ = ["regimes", "runs", "Run", "parse_groups", "Error", "FileError", "UsageError", "main"]

LR_DECAY = 4  # the schedule file's reason code for a learning-rate decay


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _open(path):
    """An HDF5 file opened for reading; FileError naming it where it cannot be."""
    try:
        return h5py.File(path, "r")
    except FileNotFoundError:
        raise FileError(f"{os.fspath(path)}: no such file") from None
    except OSError as err:
        raise FileError(f"{os.fspath(path)}: {err}") from None


def _save(fig, output):
    try:
        fig.savefig(output, dpi=110)
    except OSError as err:
        raise FileError(f"{os.fspath(output)}: {err.strerror or err}") from None


# The critical regimes of one run: regime-detect's GRADS.h5 and SCHED.h5.

def flag_runs(flags):
    """(first, end) of each run of true flags, end exclusive."""
    start = None
    for e, c in enumerate(list(flags) + [False]):
        if c and start is None:
            start = e
        elif not c and start is not None:
            yield start, e
            start = None


def shade(ax, critical, decay, legend):
    """Shades runs of critical epochs, those critical for a learning-rate decay apart."""
    label = "critical: rate of change or first interval" if legend else None
    for first, end in flag_runs(critical & ~decay):
        ax.axvspan(first - 0.5, end - 0.5, color="tab:red", alpha=0.15, lw=0, label=label)
        label = None
    label = "critical: learning-rate decay" if legend else None
    for first, end in flag_runs(decay):
        ax.axvspan(first - 0.5, end - 0.5, facecolor="tab:blue", edgecolor="tab:blue", alpha=0.25, hatch="//",
                   lw=0, label=label)
        label = None


def decay_epochs(reason, counted, lr, interval):
    """Epochs critical because the learning rate decayed: from the schedule's
    reasons, else (files without them) derived from the learning rates by the rule."""
    if reason is not None:
        return (reason[:, counted] == LR_DECAY).any(axis=1)
    out = np.zeros(len(lr), dtype=bool)
    for e in range(len(lr) - 1):
        if lr[e + 1] < lr[e]:
            out[e + 1: -(-(e + 1) // interval) * interval + 1] = True
    out[: interval + 1] = False  # the first interval is critical anyway
    return out


def _read_grads(path):
    with _open(path) as g:
        if text(g.attrs.get("format", "")) != "accordion.grads":
            raise FileError(f"{os.fspath(path)}: not an accordion.grads file")
        try:
            return {"names": [text(n) for n in g["parameters/name"][()]], "ndim": g["parameters/ndim"][()],
                    "numel": g["parameters/numel"][()], "norm": g["epochs/norm"][()], "lr": g["epochs/lr"][()]}
        except KeyError as err:
            raise FileError(f"{os.fspath(path)}: missing {err}") from None
        except OSError as err:
            raise FileError(f"{os.fspath(path)}: {err}") from None


def _read_schedule(path):
    with _open(path) as s:
        if text(s.attrs.get("format", "")) != "accordion.schedule":
            raise FileError(f"{os.fspath(path)}: not an accordion.schedule file")
        try:
            return {"critical": s["epochs/critical"][()],
                    "reason": s["epochs/reason"][()] if "epochs/reason" in s else None,
                    "eta": float(s.attrs["eta"]), "interval": int(s.attrs["interval"]), "mode": text(s.attrs["mode"])}
        except KeyError as err:
            raise FileError(f"{os.fspath(path)}: missing {err}") from None
        except OSError as err:
            raise FileError(f"{os.fspath(path)}: {err}") from None


def regimes(grads, schedule, output="regimes.png", parameters=6):
    """Plot the critical regimes of a training run as PNG.

    Top: the gradient norm of each parameter over the epochs (normalized to its
    first epoch). Bottom: the rate of change Accordion compares with eta,
    |n(e - interval) - n(e)| / n(e - interval), for the same parameters, with eta
    drawn as a line. Critical epochs are shaded by why they are critical: red for
    the rate of change (and the first interval), blue hatched where only a
    learning-rate decay makes them critical, whatever the norms did. GRADS.h5 is
    the gradient statistics (grad-dump's, or the recorder's), SCHED.h5 the
    schedule regime-detect made from them; --parameters chooses how many of the
    largest matrices are drawn.
    """
    from matplotlib.figure import Figure

    if isinstance(parameters, bool) or not isinstance(parameters, (int, np.integer)) or parameters < 1:
        raise UsageError(f"parameters: must be a whole number of at least 1, not {parameters!r}")
    g, s = _read_grads(grads), _read_schedule(schedule)
    names, ndim, numel, norm = g["names"], g["ndim"], g["numel"], g["norm"]
    critical, interval, eta = s["critical"], s["interval"], s["eta"]
    if critical.shape[0] != norm.shape[0]:
        raise FileError(f"{os.fspath(schedule)} covers {critical.shape[0]} epochs, "
                        f"{os.fspath(grads)} holds {norm.shape[0]}")
    if critical.ndim != 2 or critical.shape[1] != len(names):
        raise FileError(f"{os.fspath(schedule)} lists {critical.shape[-1]} parameters, "
                        f"{os.fspath(grads)} {len(names)}")

    matrices = [p for p in range(len(names)) if ndim[p] >= 2] or list(range(len(names)))
    chosen = sorted(matrices, key=lambda p: -numel[p])[:parameters]
    counted = matrices if s["mode"] == "compression" else [0]
    any_critical = critical[:, counted].astype(bool).any(axis=1)
    decay = decay_epochs(s["reason"], counted, g["lr"], interval) & any_critical
    epochs = np.arange(norm.shape[0])

    fig = Figure(figsize=(10, 6.5))
    top, bottom = fig.subplots(2, 1, sharex=True)
    for p in chosen:
        first = norm[0, p] if norm[0, p] > 0 else 1.0
        top.plot(epochs, norm[:, p] / first, lw=1.2, label=names[p])
        change = np.full(len(epochs), np.nan)
        lagged = norm[: -interval, p] if interval < len(epochs) else np.array([])
        with np.errstate(divide="ignore", invalid="ignore"):
            change[interval:] = np.abs(lagged - norm[interval:, p]) / lagged
        bottom.plot(epochs, change, lw=1.0)
    shade(top, any_critical, decay, False)
    shade(bottom, any_critical, decay, True)
    top.set_yscale("log")
    top.set_ylabel("gradient norm\n(relative to epoch 0)")
    top.set_title(f"{os.fspath(grads)}: critical regimes (shaded by why), eta {eta:g}, interval {interval}")
    top.legend(fontsize=7, ncol=2, loc="upper right")
    bottom.axhline(eta, color="black", ls="--", lw=1, label=f"eta = {eta:g}")
    bottom.set_ylabel(f"rate of change\nover {interval} epochs")
    bottom.set_xlabel("epoch")
    bottom.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    _save(fig, output)
    return output


# train-dist runs: its --metrics files (accordion.metrics).

class Run:
    """One train-dist run: per-epoch arrays and the epochs that were critical."""

    def __init__(self, path):
        self.path = os.fspath(path)
        path = self.path
        with _open(path) as f:
            try:
                if text(f.attrs.get("format", "")) != "accordion.metrics":
                    raise FileError(f"{path}: not an accordion.metrics file (train-dist --metrics writes one)")
                e = f["epochs"]
                self.test_accuracy = e["test_accuracy"][()]
                self.accuracy = e["accuracy"][()]
                self.floats_total = e["floats_sent_total"][()]
                self.seconds = e["seconds"][()]
                self.batch_size = e["batch_size"][()]
                self.complete = int(f.attrs.get("complete", 0)) == 1
                self.mode = text(f.attrs.get("mode", ""))
                matrix = f["parameters/ndim"][()] >= 2
                critical = self._critical(f, os.path.dirname(path))
                # Vectors are sent uncompressed whatever the rule says.
                self.critical = None if critical is None else critical[:, matrix]
            except OSError as err:
                raise FileError(f"{path}: {err}") from err
            except KeyError as err:
                raise FileError(f"{path}: missing {err}") from err
        self.epochs = len(self.floats_total)

    def _critical(self, f, directory):
        """Per epoch and parameter, whether it was critical: from an online run's
        decisions, or from the schedule file a replay followed (if it is still there)."""
        if "critical" in f["epochs"]:
            return f["epochs/critical"][()].astype(bool)
        if self.mode != "schedule":
            return None
        schedule = text(f.attrs.get("schedule", ""))
        for candidate in (schedule, os.path.join(directory, os.path.basename(schedule))):
            if candidate and os.path.exists(candidate):
                with h5py.File(candidate, "r") as s:
                    critical = s["epochs/critical"][()]
                return critical[: len(f["epochs/epoch"])].astype(bool)
        return None

    def final_test_accuracy(self):
        evaluated = self.test_accuracy[~np.isnan(self.test_accuracy)]
        return float(evaluated[-1]) if len(evaluated) else float("nan")


def parse_groups(arguments):
    """LABEL=FILE[,FILE...] arguments -> [(label, [Run, ...])] in the given order."""
    groups = []
    for argument in arguments:
        label, sep, files = argument.partition("=")
        if not sep or not label or not files:
            raise UsageError(f"{argument}: expected LABEL=FILE[,FILE...]")
        groups.append((label, [Run(path) for path in files.split(",")]))
    return groups


def _mean_curve(runs, values):
    """Mean over runs of per-epoch values, over the epochs every run has."""
    epochs = min(r.epochs for r in runs)
    return np.mean([values(r)[:epochs] for r in runs], axis=0)


def _groups(groups):
    """{label: path or [paths]} (or (label, paths) pairs) -> [(label, [Run, ...])]."""
    pairs = list(groups.items() if isinstance(groups, Mapping) else groups)
    if not pairs:
        raise UsageError("runs: nothing to plot: give at least one label and its metrics files")
    out = []
    for label, files in pairs:
        if isinstance(files, (str, os.PathLike, Run)):
            files = [files]
        files = list(files)
        if not files:
            raise UsageError(f"{label}: no metrics files")
        out.append((str(label), [f if isinstance(f, Run) else Run(f) for f in files]))
    return out


def runs(groups, output="runs.png", title=None):
    """Plot train-dist runs as PNG, like Figure 1 of the Accordion paper.

    Test accuracy against epochs (left), against floats sent per worker (middle)
    and against training time (right), one line per label; several files for a
    label (seeds) are drawn as their mean. Critical epochs of the first run that
    has them are shaded on the left. Each run is a train-dist --metrics file;
    from Python give {label: path or [paths]}, in the order to draw them.
    """
    from matplotlib.figure import Figure

    groups = _groups(groups)
    fig = Figure(figsize=(15, 4.2))
    axes = fig.subplots(1, 3, sharey=True)
    shaded = False
    for label, group in groups:
        accuracy = 100 * _mean_curve(group, lambda r: r.test_accuracy)
        floats = _mean_curve(group, lambda r: r.floats_total)
        seconds = _mean_curve(group, lambda r: np.cumsum(r.seconds))
        epochs = np.arange(len(accuracy))
        evaluated = ~np.isnan(accuracy)
        axes[0].plot(epochs[evaluated], accuracy[evaluated], label=label)
        axes[1].plot(floats[evaluated], accuracy[evaluated], label=label)
        axes[2].plot(seconds[evaluated], accuracy[evaluated], label=label)
        critical = next((r.critical for r in group if r.critical is not None), None)
        if critical is not None and not shaded:
            for e, c in enumerate(critical.any(axis=1)):
                if c:
                    axes[0].axvspan(e - 0.5, e + 0.5, color="tab:red", alpha=0.12, lw=0)
            shaded = True
    axes[0].set_xlabel("epoch" + (" (critical epochs shaded)" if shaded else ""))
    axes[1].set_xlabel("floats sent per worker")
    axes[2].set_xlabel("training time (s)")
    axes[0].set_ylabel("test accuracy (%)")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    _save(fig, output)
    return output


# The command line.

def _count(value):
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, not '{value}'")
    return number


def _regimes_arguments(parser):
    parser.add_argument("grads", metavar="GRADS.h5")
    parser.add_argument("schedule", metavar="SCHED.h5")
    parser.add_argument("-o", "--output", default="regimes.png", help="the PNG to write (default: regimes.png)")
    parser.add_argument("--parameters", type=_count, default=6,
                        help="how many of the largest matrices to draw (default: 6)")


def _runs_arguments(parser):
    parser.add_argument("runs", nargs="+", metavar="LABEL=FILE[,FILE...]")
    parser.add_argument("-o", "--output", default="runs.png", help="the PNG to write (default: runs.png)")
    parser.add_argument("--title", default="", help="a title above the three panels")


_COMMANDS = {"regimes": (regimes, _regimes_arguments), "runs": (runs, _runs_arguments)}


def _parser(prog, command):
    raw = argparse.RawDescriptionHelpFormatter
    if command is not None:
        function, arguments = _COMMANDS[command]
        parser = argparse.ArgumentParser(prog=prog, description=inspect.cleandoc(function.__doc__),
                                         formatter_class=raw)
        arguments(parser)
        return parser
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=raw)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (function, arguments) in _COMMANDS.items():
        doc = inspect.cleandoc(function.__doc__)
        arguments(commands.add_parser(name, help=doc.splitlines()[0], description=doc, formatter_class=raw))
    return parser


def main(argv=None, prog="accordion.plot", command=None):
    """The command line; returns the exit status (0, or 1 after an error, which is
    printed as `PROG: error: ...`). With `command`, only that command's arguments
    (as scripts/plot_regimes.py and scripts/plot_runs.py take them)."""
    args = _parser(prog, command).parse_args(argv)
    command = command or args.command
    try:
        if command == "regimes":
            output = regimes(args.grads, args.schedule, args.output, args.parameters)
        else:
            output = runs(parse_groups(args.runs), args.output, args.title)
    except Error as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    print(f"{prog}: wrote {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
