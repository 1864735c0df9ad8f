"""Reading train-dist metrics files (accordion.metrics) for the comparison
table and the plots: one Run per file, grouped by label over seeds."""
import math
import os

import h5py
import numpy as np


class RunError(Exception):
    pass


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


class Run:
    """One train-dist run: per-epoch arrays and the epochs that were critical."""

    def __init__(self, path):
        self.path = path
        try:
            with h5py.File(path, "r") as f:
                if text(f.attrs.get("format", "")) != "accordion.metrics":
                    raise RunError(f"{path}: not an accordion.metrics file (train-dist --metrics writes one)")
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
            raise RunError(f"{path}: {err}") from err
        except KeyError as err:
            raise RunError(f"{path}: missing {err}") from err
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
        return float(evaluated[-1]) if len(evaluated) else math.nan


def epoch_ranges(critical):
    """Epochs in which any matrix parameter was critical, and the share of
    matrix-parameter epochs that were: "0-1, 3 (40%)"."""
    if critical is None:
        return "-"
    if critical.size == 0:
        return "none"
    flags = critical.any(axis=1)
    ranges, start = [], None
    for e, flag in enumerate(list(flags) + [False]):
        if flag and start is None:
            start = e
        elif not flag and start is not None:
            ranges.append(f"{start}" if start == e - 1 else f"{start}-{e - 1}")
            start = None
    return f"{', '.join(ranges)} ({100 * critical.mean():.0f}%)" if ranges else "none"


def parse_groups(arguments):
    """LABEL=FILE[,FILE...] arguments -> [(label, [Run, ...])] in the given order."""
    groups = []
    for argument in arguments:
        label, sep, files = argument.partition("=")
        if not sep or not label or not files:
            raise RunError(f"{argument}: expected LABEL=FILE[,FILE...]")
        groups.append((label, [Run(path) for path in files.split(",")]))
    return groups
