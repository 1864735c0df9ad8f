#!/usr/bin/python3
"""Tables and Figure 7b of the GraVAC study (scripts/experiments/gravac.sh).

  gravac_report.py [--dense DIR] [--plot OUT.png] [--csv OUT.csv [--commit COMMIT]] [LABEL=DIR ...]
                   [--table TITLE LABEL=DIR ... ...]

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
--csv writes every run's epochs (the raw data the tables are made from; read_csv()
reads it back, as scripts/results-tables.py does):

    variant,seed,epoch,test_accuracy,floats_sent_total,seconds,gain_min,factor_steps,critical_matrices,matrices,commit

factor_steps: the epoch's steps at each factor sent ("1:3 10:76"; 1 is dense) and
gain_min theta_min's EWMA gain at the epoch's end, for GraVAC runs;
critical_matrices of matrices: the weight matrices critical in the epoch, for
Accordion runs; empty otherwise. commit: the commit of the programs that made the runs
(--commit; "unknown" without it).
"""
import argparse
import csv
import glob
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from accordion_runs import Run, epoch_ranges  # noqa: E402


CSV_COLUMNS = ("variant", "seed", "epoch", "test_accuracy", "floats_sent_total", "seconds", "gain_min",
               "factor_steps", "critical_matrices", "matrices", "commit")


def epochs_of(directory):
    """Per complete run of DIR, per epoch: what write_csv() keeps of it."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "seed*.h5"))):
        with h5py.File(path, "r") as f:
            if not f.attrs["complete"]:
                continue
            e = f["epochs"]
            seed = os.path.basename(path)[len("seed"):-len(".h5")]
            gravac = "gravac" in f
            critical = Run(path).critical if not gravac and "critical" in e else None
            for i in range(len(e["lr"][()])):
                row = {"seed": seed, "epoch": str(i), "test_accuracy": repr(float(e["test_accuracy"][i])),
                       "floats_sent_total": repr(float(e["floats_sent_total"][i])),
                       "seconds": repr(float(e["seconds"][i])), "gain_min": "", "factor_steps": "",
                       "critical_matrices": "", "matrices": ""}
                if gravac:
                    factors = f["gravac/steps/factor"][()][f["gravac/steps/epoch"][()] == i]
                    values, counts = np.unique(factors, return_counts=True)
                    row["gain_min"] = repr(float(f["gravac/epochs/gain_min"][i]))
                    row["factor_steps"] = " ".join(f"{v:g}:{c}" for v, c in zip(values, counts))
                if critical is not None:
                    row["critical_matrices"], row["matrices"] = str(int(critical[i].sum())), str(int(critical[i].size))
                out.append(row)
    return out


def write_csv(path, directories, commit="unknown"):
    """directories: {variant: DIR}; commit: that of the programs that made their runs."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for variant, directory in directories.items():
            for row in epochs_of(directory):
                writer.writerow({"variant": variant, **row, "commit": commit})


def run_of(rows):
    """One run (a dict the tables read) from its epochs' rows."""
    rows = sorted(rows, key=lambda r: int(r["epoch"]))
    run = {"seed": f"seed{rows[0]['seed']}", "accuracy": float(rows[-1]["test_accuracy"]),
           "floats": float(rows[-1]["floats_sent_total"]), "seconds": sum(float(r["seconds"]) for r in rows),
           "epochs": len(rows), "factors": None, "critical": None}
    if rows[0]["factor_steps"]:
        run["factors"] = np.array([float(part.split(":")[0]) for r in rows for part in r["factor_steps"].split()
                                   for _ in range(int(part.split(":")[1]))])
        run["gain_min"] = np.array([float(r["gain_min"]) for r in rows])
    elif rows[0]["critical_matrices"] != "":
        # Only which epochs had a critical matrix, and the share of them, matter here.
        matrices = int(rows[0]["matrices"])
        run["critical"] = np.array([[m < int(r["critical_matrices"]) for m in range(matrices)] for r in rows])
    return run


def runs_of(rows):
    """[run, ...] by seed from the epochs' rows of one variant."""
    by_seed = {}
    for row in rows:
        by_seed.setdefault(str(row["seed"]), []).append(row)
    return [run_of(by_seed[seed]) for seed in sorted(by_seed, key=int)]


def load(directory):
    """The complete runs of DIR's seed<S>.h5 files."""
    return runs_of(epochs_of(directory))


def read_csv(path):
    """{variant: [run, ...]} from write_csv()'s file."""
    rows = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["variant"], []).append(row)
    return {variant: runs_of(r) for variant, r in rows.items()}


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


def table(groups, dense):
    """The markdown table of [(label, runs)] against `dense` floats (None: no factor)."""
    lines = ["| run | seeds | epochs | test accuracy | floats sent (M) | less than dense (x) | time (s) | chosen |",
             "|---|---|---|---|---|---|---|---|"]
    for label, runs in groups:
        if not runs:
            lines.append(f"| {label} | 0 | - | not run | - | - | - | - |")
            continue
        acc = [r["accuracy"] for r in runs]
        floats = np.mean([r["floats"] for r in runs])
        less = f"{dense / floats:.2f}x" if dense else "-"
        lines.append(f"| {label} | {len(runs)} | {runs[0]['epochs']} | {100 * np.mean(acc):.2f}% "
                     f"(±{50 * (max(acc) - min(acc)):.2f}) | {floats / 1e6:.2f} | {less} | "
                     f"{np.mean([r['seconds'] for r in runs]):.1f} | {chosen(runs)} |")
    return "\n".join(lines) + "\n"


def print_table(title, groups, dense):
    if title:
        print(f"\n### {title}\n")
    print(table(groups, dense), end="")


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
    parser.add_argument("--csv", metavar="OUT.csv", help="also write every run's epochs")
    parser.add_argument("--commit", default="unknown",
                        help="the commit of the programs that made the runs (the CSV's commit column)")
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
    if args.csv:
        directories = {}
        for _, items in specs:
            for item in items:
                label, _, directory = item.partition("=")
                directories.setdefault(label, directory)
        write_csv(args.csv, directories, args.commit)


if __name__ == "__main__":
    main()
