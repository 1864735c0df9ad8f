#!/usr/bin/env python3
"""The raw data of the reproduction study (scripts/reproduce-results.sh) as one CSV
file, one row per run and epoch, from which scripts/results-tables.py recomputes
docs/results.md's tables:

    study,run,seed,epoch,test_accuracy,floats_sent_total,seconds,critical_matrices,matrices

study: powersgd, topk or batch; run: low, high, accordion (schedule replayed) or
online; test_accuracy a fraction (empty where the epoch was not evaluated);
floats_sent_total per worker since the start; seconds the epoch's training time;
critical_matrices how many weight matrices were critical in the epoch, of
`matrices` (both empty for a run at a fixed level).

    accordion_csv.py OUT SEEDS -o CSV     (OUT and SEEDS as given to reproduce-results.sh)
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from accordion_runs import Run, RunError  # noqa: E402

STUDIES = ("powersgd", "topk", "batch")
RUNS = ("low", "high", "accordion", "online")
COLUMNS = ("study", "run", "seed", "epoch", "test_accuracy", "floats_sent_total", "seconds", "critical_matrices",
           "matrices")


def rows(out, seeds):
    for study in STUDIES:
        for run in RUNS:
            for seed in seeds:
                path = os.path.join(out, study, f"seed{seed}", f"{run}.h5")
                if not os.path.exists(path):
                    continue
                r = Run(path)
                if not r.complete:
                    sys.exit(f"accordion_csv.py: error: {path}: the run did not finish")
                for e in range(r.epochs):
                    accuracy = float(r.test_accuracy[e])
                    critical = None if r.critical is None else r.critical[e]
                    yield {
                        "study": study, "run": run, "seed": seed, "epoch": e,
                        "test_accuracy": "" if math.isnan(accuracy) else repr(accuracy),
                        "floats_sent_total": repr(float(r.floats_total[e])),
                        "seconds": repr(float(r.seconds[e])),
                        "critical_matrices": "" if critical is None else int(critical.sum()),
                        "matrices": "" if critical is None else int(critical.size),
                    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="reproduce-results.sh's OUT")
    ap.add_argument("seeds", help='the seeds, e.g. "1 2 3"')
    ap.add_argument("-o", "--output", required=True, help="CSV file to write")
    args = ap.parse_args()
    try:
        data = list(rows(args.out, args.seeds.split()))
    except RunError as err:
        sys.exit(f"accordion_csv.py: error: {err}")
    if not data:
        sys.exit(f"accordion_csv.py: error: {args.out}: no runs of the study there")
    with open(args.output, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
    print(f"accordion_csv.py: {len(data)} epochs of {len({(d['study'], d['run'], d['seed']) for d in data})} runs "
          f"written to {args.output}")


if __name__ == "__main__":
    main()
