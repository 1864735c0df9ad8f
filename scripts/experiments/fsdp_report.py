#!/usr/bin/env python3
"""The FSDP2 study's runs (scripts/experiments/fsdp.sh): hybrid sharding with the
toolkit's replica exchange against FSDP's own.

  fsdp_report.py --collect RUNS.csv OUT   every finished run under OUT (OUT/LINK/MODEL/VARIANT/
                                          seedS.csv, train_fsdp.py --csv's rows) as one CSV
  fsdp_report.py --table RUNS.csv [LINK]  the markdown table, per link (or that link's alone)

A run's step is the median over its epochs after the first of each epoch's median
step (rank 0's time from the batch's forward pass to the optimizer's step, the
exchange included); the first epoch is left out because it includes the warm-up.
Each variant is paired with native-fp32's run of the same seed: its speedup is
native's step over its own (the median over the seeds, and their range), its
accuracy difference the two final test accuracies' (points; the mean, and the
range)."""
import argparse
import csv
import glob
import os
import statistics
import sys

COLUMNS = ["link", "model", "variant", "seed", "epoch", "loss", "test_accuracy", "seconds", "steps", "step_seconds",
           "floats_sent", "commit"]
RUN_COLUMNS = ["epoch", "loss", "test_accuracy", "seconds", "steps", "step_seconds", "floats_sent"]
BASELINE = "native-fp32"


def fail(message):
    sys.exit(f"fsdp_report.py: error: {message}")


def collect(out, top):
    rows = []
    for path in sorted(glob.glob(os.path.join(top, "*", "*", "*", "seed*.csv"))):
        variant_dir = os.path.dirname(path)
        model_dir = os.path.dirname(variant_dir)
        link = os.path.basename(os.path.dirname(model_dir))
        seed = os.path.basename(path)[len("seed"):-len(".csv")]
        try:
            with open(path[:-len(".csv")] + ".commit") as f:
                commit = f.read().strip()
        except OSError:
            continue  # a run that did not finish
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != RUN_COLUMNS:
                fail(f"{path}: columns {reader.fieldnames}, not train_fsdp.py --csv's {RUN_COLUMNS}")
            for row in reader:
                rows.append([link, os.path.basename(model_dir), os.path.basename(variant_dir), seed] + [row[c] for c in RUN_COLUMNS]
                            + [commit])
    if not rows:
        fail(f"{top}: no finished runs (LINK/MODEL/VARIANT/seedS.csv with its .commit)")
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    print(f"fsdp_report.py: {len(rows)} epochs of {len({tuple(r[:4]) for r in rows})} runs -> {out}",
          file=sys.stderr)


def read_runs(path):
    """{link: {model: {variant: {seed: [row by epoch]}}}} in the file's order."""
    runs = {}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                fail(f"{path}: columns {reader.fieldnames}, expected {COLUMNS}")
            for row in reader:
                (runs.setdefault(row["link"], {}).setdefault(row["model"], {}).setdefault(row["variant"], {})
                 .setdefault(row["seed"], []).append(row))
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    return runs


def step(rows):
    later = rows[1:] or rows
    return statistics.median(float(r["step_seconds"]) for r in later)


def final_accuracy(rows):
    return 100 * float(rows[-1]["test_accuracy"])


def spread(values, digits):
    mean = statistics.mean(values)
    if len(values) < 2:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({min(values):.{digits}f} to {max(values):.{digits}f})"


def speedup_text(speedups):
    if len(speedups) < 2 or max(speedups) == min(speedups):
        return f"{statistics.median(speedups):.2f}x"
    return f"{statistics.median(speedups):.2f}x ({min(speedups):.2f} to {max(speedups):.2f})"


def table(runs, only=None):
    out = ["| link | model | variant | seeds | step (s) | speedup over native fp32 (median, range) | final test accuracy (%) "
           "| against native fp32 (points) | floats sent per epoch (rank 0) | commit |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for link, models in runs.items():
        if only is not None and link != only:
            continue
        for model, variants in models.items():
            native = variants.get(BASELINE, {})
            # Native fp32 first, the others in the file's order.
            for variant, seeds in sorted(variants.items(), key=lambda item: item[0] != BASELINE):
                paired = [s for s in seeds if s in native]
                speedups = [step(native[s]) / step(seeds[s]) for s in paired]
                gaps = [final_accuracy(seeds[s]) - final_accuracy(native[s]) for s in paired]
                sent = [float(r["floats_sent"]) for rows in seeds.values() for r in rows if r["floats_sent"]]
                commits = ", ".join(sorted({r["commit"] for rows in seeds.values() for r in rows}))
                out.append(
                    f"| {link} | {model} | {variant} | {', '.join(seeds)} "
                    f"| {statistics.median(step(rows) for rows in seeds.values()):.4f} "
                    f"| {speedup_text(speedups) if speedups else '-'} "
                    f"| {spread([final_accuracy(rows) for rows in seeds.values()], 2)} "
                    f"| {spread(gaps, 2) if variant != BASELINE and gaps else '-'} "
                    f"| {f'{statistics.median(sent):.4g}' if sent else '-'} | {commits} |")
    if len(out) == 2:
        fail(f"no runs of the link '{only}'" if only else "no runs")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--collect", nargs=2, metavar=("RUNS.csv", "OUT"))
    group.add_argument("--table", nargs="+", metavar="RUNS.csv [LINK]")
    args = parser.parse_args()
    if args.collect:
        collect(*args.collect)
    else:
        if len(args.table) > 2:
            parser.error("--table takes RUNS.csv and at most one LINK")
        sys.stdout.write(table(read_runs(args.table[0]), *args.table[1:]))


if __name__ == "__main__":
    main()
