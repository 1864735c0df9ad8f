#!/usr/bin/env python3
"""The table of scripts/experiments/auto-overhead.sh: train-dist --auto's throughput
against dense's on loopback, where compression does not pay, paired in blocks of
dense, auto, auto, dense runs of one seed.

  auto_overhead_report.py --out OUT --repeats R --seeds "1 2 3" --models "mlp cnn" [--save-runs CSV]
      reads block R's runs from OUT/rR-a/loopback/MODEL/{dense,auto}/seedS.h5 (dense, then auto)
      and OUT/rR-b/... (auto, then dense)
  auto_overhead_report.py --runs CSV
      the same table from a --save-runs file (scripts/results-tables.py's "auto-overhead")

Per model and seed: each variant's training time, run by run in the block's order;
the automatic mode's time counts its measuring (`/auto/measure_seconds`, the link,
compute and codecs before the first epoch and whenever it measured again), which
the epochs' own seconds leave out. The throughput ratio is dense's summed time over
the automatic mode's, so 0.97 is 3 % slower; it is given with and without the
measuring, with the epochs in which a compressed plan was in force and both
variants' final test accuracy."""
import argparse
import csv
import os
import sys

COLUMNS = ["model", "seed", "block", "position", "variant", "epoch", "seconds", "measure_seconds", "pays",
           "test_accuracy_percent", "floats_sent_total", "commit"]
# A block's four runs: (its directory's suffix, the variant) in the order they ran.
ORDER = (("a", "dense"), ("a", "auto"), ("b", "auto"), ("b", "dense"))


def fail(message):
    sys.exit(f"auto_overhead_report.py: error: {message}")


def read_metrics(out, repeats, seeds, models, commit):
    """The runs' rows (COLUMNS) from their metrics files."""
    import h5py

    rows = []
    for model in models:
        for seed in seeds:
            for block in range(1, repeats + 1):
                for position, (half, variant) in enumerate(ORDER, 1):
                    path = os.path.join(out, f"r{block}-{half}", "loopback", model, variant, f"seed{seed}.h5")
                    if not os.path.isfile(path):
                        fail(f"{path}: no such file (run scripts/experiments/auto-overhead.sh first)")
                    with h5py.File(path, "r") as f:
                        if not f.attrs.get("complete", 0):
                            fail(f"{path}: an unfinished run")
                        e = f["epochs"]
                        count = len(e["seconds"])
                        if variant == "auto" and "auto" not in f:
                            fail(f"{path}: no /auto group: not a train-dist --auto run")
                        measure = f["auto/measure_seconds"][()] if variant == "auto" else [0.0] * count
                        pays = [int(p) for p in f["auto/pays"][()]] if variant == "auto" else [0] * count
                        for epoch in range(count):
                            rows.append({"model": model, "seed": str(seed), "block": str(block),
                                         "position": str(position), "variant": variant, "epoch": str(epoch),
                                         "seconds": repr(float(e["seconds"][epoch])),
                                         "measure_seconds": repr(float(measure[epoch])), "pays": str(pays[epoch]),
                                         "test_accuracy_percent": repr(float(e["test_accuracy"][epoch]) * 100),
                                         "floats_sent_total": repr(float(e["floats_sent_total"][epoch])),
                                         "commit": commit})
    return rows


def write_runs(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def read_runs(path):
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != COLUMNS:
                fail(f"{path}: columns {reader.fieldnames}, expected {COLUMNS}")
            return list(reader)
    except OSError as e:
        fail(f"{path}: {e.strerror}")


def runs_of(rows):
    """{model: {seed: [run in the order they ran]}}, a run being its variant, training
    seconds, measuring seconds, compressed epochs, final accuracy and commit."""
    grouped = {}
    for row in rows:
        key = (row["model"], row["seed"], int(row["block"]), int(row["position"]), row["variant"])
        grouped.setdefault(key, []).append(row)
    models = {}
    for (model, seed, block, position, variant), epochs in sorted(grouped.items(), key=lambda kv: (
            kv[0][0], int(kv[0][1]), kv[0][2], kv[0][3])):
        epochs.sort(key=lambda row: int(row["epoch"]))
        if [int(row["epoch"]) for row in epochs] != list(range(len(epochs))):
            fail(f"{model} seed {seed} block {block} run {position}: its epochs are not 0, 1, ...")
        models.setdefault(model, {}).setdefault(seed, []).append({
            "variant": variant, "block": block, "position": position,
            "seconds": sum(float(row["seconds"]) for row in epochs),
            "measure": sum(float(row["measure_seconds"]) for row in epochs),
            "pays": sum(int(row["pays"]) for row in epochs), "epochs": len(epochs),
            "accuracy": float(epochs[-1]["test_accuracy_percent"]), "commit": epochs[0]["commit"]})
    whole = [(position, variant) for position, (_, variant) in enumerate(ORDER, 1)]
    for model, seeds in models.items():
        for seed, runs in seeds.items():
            for block in {r["block"] for r in runs}:
                if [(r["position"], r["variant"]) for r in runs if r["block"] == block] != whole:
                    fail(f"{model} seed {seed}: not whole blocks of dense, auto, auto, dense runs (block {block})")
    return models


def times(runs, variant, measure=True):
    return [r["seconds"] + (r["measure"] if measure else 0) for r in runs if r["variant"] == variant]


def table(rows):
    out = ["| model | seed | runs (block of dense, auto, auto, dense) | dense, s | automatic, s (measuring included) "
           "| its measuring, s | throughput against dense | without the measuring | epochs compressed "
           "| final accuracy, dense / automatic | commit |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for model, seeds in runs_of(rows).items():
        ratios = []
        all_dense = all_auto = 0.0
        for seed, runs in sorted(seeds.items(), key=lambda kv: int(kv[0])):
            dense, auto = times(runs, "dense"), times(runs, "auto")
            ratio = sum(dense) / sum(auto)
            ratios.append(ratio)
            all_dense += sum(dense)
            all_auto += sum(auto)
            accuracy = {v: sorted({f"{r['accuracy']:.2f}" for r in runs if r["variant"] == v})
                        for v in ("dense", "auto")}
            measure = " / ".join(f"{r['measure']:.2f}" for r in runs if r["variant"] == "auto")
            out.append(f"| {model} | {seed} | {len(runs)} | {' / '.join(f'{t:.1f}' for t in dense)} "
                       f"| {' / '.join(f'{t:.1f}' for t in auto)} "
                       f"| {measure} "
                       f"| {ratio:.3f}x | {sum(dense) / sum(times(runs, 'auto', measure=False)):.3f}x "
                       f"| {sum(r['pays'] for r in runs if r['variant'] == 'auto')} of "
                       f"{sum(r['epochs'] for r in runs if r['variant'] == 'auto')} "
                       f"| {', '.join(accuracy['dense'])} / {', '.join(accuracy['auto'])} "
                       f"| {', '.join(sorted({r['commit'] for r in runs}))} |")
        out.append(f"| {model} | all | | {all_dense:.1f} | {all_auto:.1f} | | {all_dense / all_auto:.3f}x "
                   f"(lowest seed {min(ratios):.3f}x) | | | | |")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="auto-overhead.sh's output directory")
    parser.add_argument("--repeats", type=int, default=1, help="blocks per seed (default 1)")
    parser.add_argument("--seeds", default="1 2 3")
    parser.add_argument("--models", default="mlp cnn")
    parser.add_argument("--commit", default="unknown", help="the programs' commit, for the rows read from files")
    parser.add_argument("--save-runs", help="write the runs, epoch by epoch, to this CSV file")
    parser.add_argument("--runs", help="read the runs from such a CSV file instead of --out")
    args = parser.parse_args()
    if bool(args.out) == bool(args.runs):
        parser.error("give one of --out and --runs")
    if args.repeats < 1:
        parser.error("--repeats: 1 or more")
    rows = read_runs(args.runs) if args.runs else read_metrics(args.out, args.repeats, args.seeds.split(),
                                                                 args.models.split(), args.commit)
    if not rows:
        fail("no runs")
    if args.save_runs:
        write_runs(args.save_runs, rows)
    sys.stdout.write(table(rows))


if __name__ == "__main__":
    main()
