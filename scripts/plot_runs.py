#!/usr/bin/python3
"""Plot train-dist runs as PNG, like Figure 1 of the Accordion paper: test
accuracy against epochs (left), against floats sent per worker (middle) and
against training time (right), one line per label; several files for a label
(seeds) are drawn as their mean. Critical epochs of the first run that has
them are shaded on the left.

    scripts/plot_runs.py low=low.h5 high=high.h5 accordion=accordion.h5 -o runs.png
"""
import argparse
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accordion_runs import RunError, parse_groups  # noqa: E402


def mean_curve(runs, values):
    """Mean over runs of per-epoch values, over the epochs every run has."""
    epochs = min(r.epochs for r in runs)
    return np.mean([values(r)[:epochs] for r in runs], axis=0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE[,FILE...]")
    ap.add_argument("-o", "--output", default="runs.png")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    try:
        groups = parse_groups(args.runs)
    except RunError as err:
        sys.exit(f"plot_runs.py: error: {err}")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True)
    shaded = False
    for label, runs in groups:
        accuracy = 100 * mean_curve(runs, lambda r: r.test_accuracy)
        floats = mean_curve(runs, lambda r: r.floats_total)
        seconds = mean_curve(runs, lambda r: np.cumsum(r.seconds))
        epochs = np.arange(len(accuracy))
        evaluated = ~np.isnan(accuracy)
        axes[0].plot(epochs[evaluated], accuracy[evaluated], label=label)
        axes[1].plot(floats[evaluated], accuracy[evaluated], label=label)
        axes[2].plot(seconds[evaluated], accuracy[evaluated], label=label)
        critical = next((r.critical for r in runs if r.critical is not None), None)
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
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    try:
        fig.savefig(args.output, dpi=110)
    except OSError as err:
        sys.exit(f"plot_runs.py: error: {args.output}: {err}")
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
