#!/usr/bin/python3
"""Tables and Figure 7b of the GraVAC study (scripts/experiments/gravac.sh).

  gravac_report.py [--dense DIR] [--plot OUT.png] [LABEL=DIR ...] [--table TITLE LABEL=DIR ... ...]

Each DIR holds seed<S>.h5 metrics files of train-dist runs. Prints one markdown
table per --table (the positional LABEL=DIR, if any, make a first table
without a title): final test accuracy (mean over seeds, +- half the spread),
floats sent per worker over the run (mean, millions), the factor relative to
dense (the runs of --dense, or of the label "dense"), time, and what the run
chose: for GraVAC runs the share of iterations at each compression factor
(summed over seeds) and theta_min's EWMA gain at the end of the first and the
last epoch (mean over seeds); for Accordion runs the critical epochs. A label
without a complete run is listed as not run. --plot draws iterations at each
factor sent, one panel per table with GraVAC runs (the paper's Figure 7b).
"""
import argparse
import glob
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from accordion_runs import Run, epoch_ranges  # noqa: E402


def load(directory):
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, "seed*.h5"))):
        with h5py.File(path, "r") as f:
            if not f.attrs["complete"]:
                continue
            e = f["epochs"]
            run = {
                "seed": os.path.basename(path),
                "accuracy": float(e["test_accuracy"][-1]),
                "floats": float(e["floats_sent_total"][-1]),
                "seconds": float(np.sum(e["seconds"][()])),
                "epochs": len(e["lr"][()]),
                "factors": None,
                "critical": None,
            }
            if "gravac" in f:
                run["factors"] = f["gravac/steps/factor"][()]
                run["gain_min"] = f["gravac/epochs/gain_min"][()]
            elif "critical" in e:
                run["critical"] = Run(path).critical
            runs.append(run)
    return runs


def factor_name(value):
    return "dense" if value == 1 else f"{value:g}x"


def chosen(runs):
    """The table's last column: what GraVAC or Accordion chose."""
    if runs[0]["factors"] is not None:
        allf = np.concatenate([r["factors"] for r in runs])
        values, counts = np.unique(allf, return_counts=True)
        shares = ", ".join(f"{factor_name(v)}: {100 * c / len(allf):.1f}%" for v, c in zip(values, counts))
        first = np.mean([r["gain_min"][0] for r in runs])
        last = np.mean([r["gain_min"][-1] for r in runs])
        return f"{shares} (gain {first:.2f} → {last:.2f})"
    if runs[0]["critical"] is not None:
        return "critical " + "; ".join(sorted({epoch_ranges(r["critical"]) for r in runs}))
    return "-"


def print_table(title, groups, dense):
    if title:
        print(f"\n### {title}\n")
    print("| run | seeds | epochs | test accuracy | floats sent (M) | less than dense (x) | time (s) | chosen |")
    print("|---|---|---|---|---|---|---|---|")
    for label, runs in groups:
        if not runs:
            print(f"| {label} | 0 | - | not run | - | - | - | - |")
            continue
        acc = [r["accuracy"] for r in runs]
        floats = np.mean([r["floats"] for r in runs])
        less = f"{dense / floats:.2f}x" if dense else "-"
        print(f"| {label} | {len(runs)} | {runs[0]['epochs']} | {100 * np.mean(acc):.2f}% "
              f"(±{50 * (max(acc) - min(acc)):.2f}) | {floats / 1e6:.2f} | {less} | "
              f"{np.mean([r['seconds'] for r in runs]):.1f} | {chosen(runs)} |")


def plot(path, tables):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [(title, [(label, runs) for label, runs in groups if runs and runs[0]["factors"] is not None])
              for title, groups in tables]
    panels = [(title, gravac) for title, gravac in panels if gravac]
    if not panels:
        return
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.6 * len(panels)), squeeze=False)
    for ax, (title, gravac) in zip(axes[:, 0], panels):
        factors = sorted(set(np.concatenate([np.concatenate([r["factors"] for r in runs]) for _, runs in gravac])))
        width = 0.8 / len(gravac)
        for i, (label, runs) in enumerate(gravac):
            allf = np.concatenate([r["factors"] for r in runs])
            counts = [np.sum(allf == f) / len(runs) for f in factors]
            ax.bar(np.arange(len(factors)) + i * width, counts, width, label=label)
        ax.set_xticks(np.arange(len(factors)) + 0.4 - width / 2)
        ax.set_xticklabels([factor_name(f) for f in factors])
        ax.set_xlabel("compression factor sent")
        ax.set_ylabel("iterations (mean over seeds)")
        name = title if "GraVAC" in title else f"GraVAC, {title}" if title else "GraVAC"
        ax.set_title(f"{name}: iterations at each compression factor (cf. paper Fig. 7b)")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", metavar="LABEL=DIR")
    parser.add_argument("--table", nargs="+", action="append", default=[], metavar="TITLE LABEL=DIR")
    parser.add_argument("--dense", metavar="DIR")
    parser.add_argument("--plot")
    args = parser.parse_args()
    specs = ([("", args.runs)] if args.runs else []) + [(t[0], t[1:]) for t in args.table]
    tables = []
    for title, items in specs:
        groups = []
        for item in items:
            label, sep, directory = item.partition("=")
            if not sep:
                parser.error(f"{item}: expected LABEL=DIR")
            groups.append((label, load(directory)))
        tables.append((title, groups))
    if not any(runs for _, groups in tables for _, runs in groups):
        sys.exit("gravac_report.py: no complete runs")
    dense_runs = load(args.dense) if args.dense else next(
        (runs for _, groups in tables for label, runs in groups if label == "dense"), [])
    dense = np.mean([r["floats"] for r in dense_runs]) if dense_runs else None
    for title, groups in tables:
        print_table(title, groups, dense)
    if args.plot:
        plot(args.plot, tables)


if __name__ == "__main__":
    main()
