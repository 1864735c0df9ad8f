#!/usr/bin/python3
"""Plot train-dist runs as PNG, like Figure 1 of the Accordion paper: `python -m
accordion.plot runs` (python/accordion/plot.py, which says what is drawn),
loaded from the source tree by its path, so that it runs without the package
installed.

    scripts/plot_runs.py low=low.h5 high=high.h5 accordion=accordion.h5 -o runs.png
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accordion_runs import load_plot  # noqa: E402

plot = load_plot()


def main(argv=None):
    return plot.main(argv, prog="plot_runs.py", command="runs")


if __name__ == "__main__":
    sys.exit(main())
