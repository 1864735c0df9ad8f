"""Reading train-dist metrics files (accordion.metrics) for the comparison
table and the plots: one Run per file, grouped by label over seeds.

The reader is the package's plotting module, python/accordion/plot.py, which
load_plot() loads from this tree by its path: the scripts need neither the
package installed nor its compiled part, only h5py and numpy (and matplotlib
for the plots)."""
import importlib.util
import os
import sys


def load_plot():
    """python/accordion/plot.py of this tree, as the module accordion_plot."""
    if "accordion_plot" not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "accordion", "plot.py")
        spec = importlib.util.spec_from_file_location("accordion_plot", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["accordion_plot"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["accordion_plot"]
            raise
    return sys.modules["accordion_plot"]


_plot = load_plot()
# Every error of the reader: a file that is missing or not a metrics file, an argument not LABEL=FILE.
RunError = _plot.Error
Run, parse_groups, text = _plot.Run, _plot.parse_groups, _plot.text


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
