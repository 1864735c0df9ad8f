#!/usr/bin/python3
"""Plot the critical regimes of a training run as PNG: `python -m accordion.plot
regimes` (python/accordion/plot.py, which says what is drawn), loaded from the
source tree by its path, so that it runs without the package installed.

    scripts/plot_regimes.py GRADS.h5 SCHED.h5 -o regimes.png [--parameters 6]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accordion_runs import load_plot  # noqa: E402

plot = load_plot()
LR_DECAY, decay_epochs, shade, text = plot.LR_DECAY, plot.decay_epochs, plot.shade, plot.text


def main(argv=None):
    return plot.main(argv, prog="plot_regimes.py", command="regimes")


if __name__ == "__main__":
    sys.exit(main())
