#!/usr/bin/python3
"""Compare train-dist runs in a table like Table 1 of the Accordion paper.

Each argument is LABEL=METRICS.h5, or LABEL=A.h5,B.h5,C.h5 for several seeds
of the same setting (their mean is shown, and the spread over seeds). Per
label: final test accuracy, floats sent per worker in millions and how many
times less that is than the baseline's (the first label, or --baseline),
training time in seconds (evaluation excluded) and how many times faster than
the baseline's it is (above 1: less sent, faster), and the epochs that were critical.

    scripts/compare_runs.py low=low.h5 high=high.h5 accordion=accordion.h5
    scripts/compare_runs.py --markdown 'rank 2=s1/low.h5,s2/low.h5' ...
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from accordion_runs import RunError, epoch_ranges, parse_groups  # noqa: E402


def summarize(label, runs):
    accuracy = np.array([r.final_test_accuracy() for r in runs])
    floats = np.array([r.floats_total[-1] for r in runs])
    seconds = np.array([r.seconds.sum() for r in runs])
    critical = {epoch_ranges(r.critical) for r in runs}
    return {
        "label": label,
        "seeds": len(runs),
        "accuracy": float(accuracy.mean()),
        "accuracy_spread": float(accuracy.max() - accuracy.min()) if len(runs) > 1 else math.nan,
        "floats": float(floats.mean()),
        "seconds": float(seconds.mean()),
        "critical": "; ".join(sorted(critical)),
        "incomplete": sum(not r.complete for r in runs),
        "epochs": sorted({r.epochs for r in runs}),
    }


def rows(summaries, baseline):
    base = summaries[baseline]
    for s in summaries:
        accuracy = f"{100 * s['accuracy']:.2f}%"
        if not math.isnan(s["accuracy_spread"]):
            accuracy += f" (±{50 * s['accuracy_spread']:.2f})"
        yield [
            s["label"],
            accuracy,
            f"{s['floats'] / 1e6:.2f}",
            f"({base['floats'] / s['floats']:.2f}x)" if s["floats"] > 0 else "-",
            f"{s['seconds']:.1f}",
            f"({base['seconds'] / s['seconds']:.2f}x)" if s["seconds"] > 0 else "-",
            s["critical"],
        ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE[,FILE...]")
    ap.add_argument("--baseline", help="label the factors compare with (default: the first)")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table instead of aligned columns")
    args = ap.parse_args()
    try:
        groups = parse_groups(args.runs)
    except RunError as err:
        sys.exit(f"compare_runs.py: error: {err}")
    labels = [label for label, _ in groups]
    if args.baseline is not None and args.baseline not in labels:
        sys.exit(f"compare_runs.py: error: --baseline: no run is labelled '{args.baseline}' (labels: {', '.join(labels)})")
    baseline = labels.index(args.baseline) if args.baseline else 0
    summaries = [summarize(label, runs) for label, runs in groups]
    # The factors are the baseline's value over the run's: above 1 the run sends less, or is faster.
    base = labels[baseline]
    header = ["run", "test accuracy", "floats sent (M)", f"less sent than {base} (x)", "time (s)",
              f"faster than {base} (x)", "critical epochs"]
    table = list(rows(summaries, baseline))
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in table:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(str(r[i])) for r in table + [header]) for i in range(len(header))]
        for row in [header] + table:
            print("  ".join(str(c).ljust(w) if i in (0, 6) else str(c).rjust(w)
                            for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    seeds = {s["seeds"] for s in summaries}
    if seeds != {1}:
        print("accuracy: mean over seeds (± half the spread between the best and the worst seed)")
    for s in summaries:
        if s["incomplete"]:
            print(f"note: {s['label']}: {s['incomplete']} run(s) did not finish; their last completed epoch is shown")
        if len(s["epochs"]) > 1:
            print(f"note: {s['label']}: runs of different lengths ({s['epochs']} epochs)")


if __name__ == "__main__":
    main()
