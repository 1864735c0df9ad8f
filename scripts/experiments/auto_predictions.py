#!/usr/bin/env python3
"""train-dist --auto's predicted against measured step times, epoch by epoch.

  auto_predictions.py --csv OUT.csv LINK MODEL METRICS.h5...   the runs' /auto rows as CSV
                                                                (seed from the file's root attribute)
  auto_predictions.py --table RUNS.csv                          the markdown table: per link and
                                                                model, the median absolute error of
                                                                the prediction, its largest, and the
                                                                measuring's share of the time

The error of an epoch is |predicted - measured| / measured, both per step
(`/auto/predicted_seconds`, `/auto/measured_seconds`); the measuring's share is
the sum of `/auto/measure_seconds` over the sum of `/epochs/seconds`, the first
measurement (before any training) counted and not."""
import argparse
import csv
import statistics
import subprocess
import sys

COLUMNS = ["link", "model", "seed", "epoch", "pays", "predicted_seconds", "measured_seconds", "measure_seconds",
           "seconds", "commit"]


def fail(message):
    sys.exit(f"auto_predictions.py: error: {message}")


def write_csv(out, link, model, paths):
    import h5py

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for path in paths:
            with h5py.File(path, "r") as h:
                if "auto" not in h:
                    fail(f"{path}: no /auto group: not a train-dist --auto run")
                a = h["auto"]
                for e in range(len(a["pays"])):
                    writer.writerow([link, model, int(h.attrs["seed"]), e, int(a["pays"][e]),
                                     repr(float(a["predicted_seconds"][e])), repr(float(a["measured_seconds"][e])),
                                     repr(float(a["measure_seconds"][e])), repr(float(h["epochs/seconds"][e])),
                                     commit or "unknown"])


def read_csv(path):
    """{(link, model): [row, ...]} in the file's order."""
    runs = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                fail(f"{path}: columns {reader.fieldnames}, expected {COLUMNS}")
            for row in reader:
                runs.setdefault((row["link"], row["model"]), []).append(row)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    return runs


def table(runs):
    out = ["| link | model | seeds | epochs | compressed epochs | median error of the prediction "
           "| largest | measuring's share of the time | without the first measurement | commit |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (link, model), rows in runs.items():
        errors = [abs(float(r["predicted_seconds"]) - float(r["measured_seconds"])) / float(r["measured_seconds"])
                  for r in rows]
        seconds = sum(float(r["seconds"]) for r in rows)
        measure = [float(r["measure_seconds"]) for r in rows]
        later = sum(m for r, m in zip(rows, measure) if int(r["epoch"]) > 0)
        seeds = sorted({r["seed"] for r in rows})
        commits = ", ".join(sorted({r["commit"] for r in rows}))
        out.append(f"| {link} | {model} | {', '.join(seeds)} | {len(rows)} "
                   f"| {sum(int(r['pays']) for r in rows)} | {100 * statistics.median(errors):.1f} % "
                   f"| {100 * max(errors):.1f} % | {100 * sum(measure) / seconds:.2f} % "
                   f"| {100 * later / seconds:.2f} % | {commits} |")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", help="write the runs' rows to this file")
    parser.add_argument("--table", help="print the table of this file's rows")
    parser.add_argument("rest", nargs="*", help="with --csv: LINK MODEL METRICS.h5...")
    args = parser.parse_args()
    if bool(args.csv) == bool(args.table):
        parser.error("give --csv or --table")
    if args.csv:
        if len(args.rest) < 3:
            parser.error("--csv needs LINK MODEL METRICS.h5...")
        write_csv(args.csv, args.rest[0], args.rest[1], args.rest[2:])
    else:
        sys.stdout.write(table(read_csv(args.table)))


if __name__ == "__main__":
    main()
