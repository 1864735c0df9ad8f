#!/usr/bin/python3
"""Table and Figure 7b of the GraVAC study (scripts/experiments/gravac.sh).

  gravac_report.py [--plot OUT.png] LABEL=DIR ...

Each DIR holds seed<S>.h5 metrics files of train-dist runs. Prints a markdown
table: final test accuracy (mean over seeds, +- half the spread), floats sent
per worker over the run (mean, millions), the factor relative to dense, time,
and for GraVAC runs the share of iterations at each compression factor (summed
over seeds). --plot draws iterations at each factor per GraVAC run (the
paper's Figure 7b).
"""
import argparse
import glob
import os
import sys

import h5py
import numpy as np


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
            }
            if "gravac" in f:
                run["factors"] = f["gravac/steps/factor"][()]
            runs.append(run)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", metavar="LABEL=DIR")
    parser.add_argument("--plot")
    args = parser.parse_args()
    groups = []
    for item in args.runs:
        label, _, directory = item.partition("=")
        runs = load(directory)
        if runs:
            groups.append((label, runs))
        else:
            print(f"{label}: no complete run in {directory} (not run)", file=sys.stderr)
    if not groups:
        sys.exit("gravac_report.py: no complete runs")
    dense = next((np.mean([r["floats"] for r in runs]) for label, runs in groups if label == "dense"), None)
    print("| run | seeds | epochs | test accuracy | floats sent (M) | less than dense (x) | time (s) | iterations at each factor |")
    print("|---|---|---|---|---|---|---|---|")
    for label, runs in groups:
        acc = [r["accuracy"] for r in runs]
        floats = np.mean([r["floats"] for r in runs])
        less = f"{dense / floats:.2f}x" if dense else "-"
        factors = "-"
        if runs[0]["factors"] is not None:
            allf = np.concatenate([r["factors"] for r in runs])
            values, counts = np.unique(allf, return_counts=True)
            factors = ", ".join(
                f"{'dense' if v == 1 else f'{v:g}x'}: {100 * c / len(allf):.1f}%" for v, c in zip(values, counts))
        print(f"| {label} | {len(runs)} | {runs[0]['epochs']} | {100 * np.mean(acc):.2f}% "
              f"(±{50 * (max(acc) - min(acc)):.2f}) | {floats / 1e6:.2f} | {less} | "
              f"{np.mean([r['seconds'] for r in runs]):.1f} | {factors} |")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        gravac = [(label, runs) for label, runs in groups if runs[0]["factors"] is not None]
        if not gravac:
            return
        factors = sorted(set(np.concatenate([np.concatenate([r["factors"] for r in runs]) for _, runs in gravac])))
        width = 0.8 / len(gravac)
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for i, (label, runs) in enumerate(gravac):
            allf = np.concatenate([r["factors"] for r in runs])
            counts = [np.sum(allf == f) / len(runs) for f in factors]
            ax.bar(np.arange(len(factors)) + i * width, counts, width, label=label)
        ax.set_xticks(np.arange(len(factors)) + 0.4 - width / 2)
        ax.set_xticklabels(["dense" if f == 1 else f"{f:g}x" for f in factors])
        ax.set_xlabel("compression factor sent")
        ax.set_ylabel("iterations (mean over seeds)")
        ax.set_title("GraVAC: iterations at each compression factor (cf. paper Fig. 7b)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
