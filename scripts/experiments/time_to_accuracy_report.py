"""The tables of the time-to-accuracy study (scripts/experiments/time-to-accuracy.sh),
per link and model, every comparison paired by seed: a variant's seed s against
dense's seed s.

Two targets. The final one is dense's final test accuracy (mean over seeds) minus a
gap: with the fixed learning-rate schedule most runs cross it only in the epochs
after the drop, so the time to reach it is mostly time per epoch plus whether the
final accuracy clears it (its margin per seed says by how much). The mid-run one is
dense's accuracy after half its epochs (mean over seeds), reached before the drop:
the time to it measures how fast a run converges, not only how fast it steps.

Per variant: the final test accuracy and training time (mean over seeds, with half
the spread between the highest and the lowest seed), floats sent per worker, and per
seed, the ratio of dense's time to the variant's (per epoch: whole training; to a
target: where both runs reach it, '-' otherwise), the epoch that reaches each target,
the best accuracy's margin over the final target, and the mean of the paired ratios.

--save-runs FILE writes every run the tables use, epoch by epoch, as CSV; --runs FILE
reads such a file back for the runs whose metrics files are not there, so the tables
can be made again, and seeds measured elsewhere added, without the runs' files
(scripts/results-tables.py makes docs/results.md's tables from such a file). Each of its
rows names the commit of the programs that made it (--commit for the runs read from their
metrics files; 'unknown' for a file written before the column existed)."""
import argparse
import csv
import itertools
import os
import statistics



def run(path, commit="unknown"):
    import h5py  # only for reading metrics files; the tables from a --runs file need none

    with h5py.File(path, "r") as f:
        e = f["epochs"]
        accuracy = [float(a) * 100 for a in e["test_accuracy"][()]]
        seconds = [float(s) for s in e["seconds"][()]]
        communication_seconds = [float(c) for c in e["communication_seconds"][()]]
        floats_sent_total = [float(n) for n in e["floats_sent_total"][()]]
    return make_run(accuracy, seconds, communication_seconds, floats_sent_total, commit=commit)


def make_run(accuracy, seconds, communication_seconds, floats_sent_total, commit="unknown"):
    """One run's epochs (accuracy in percent), with the totals the tables use and the
    commit of the programs that made it."""
    return {"accuracy": accuracy, "elapsed": list(itertools.accumulate(seconds)), "seconds": seconds,
            "communication_seconds": communication_seconds, "floats_sent_total": floats_sent_total,
            "floats": floats_sent_total[-1], "communication": sum(communication_seconds), "commit": commit}


COLUMNS = ["link", "model", "variant", "seed", "epoch", "test_accuracy_percent", "seconds", "communication_seconds",
           "floats_sent_total", "commit"]
VALUES = COLUMNS[5:-1]


def read_runs(path):
    """{(link, model, variant, seed): run} from a --save-runs file."""
    rows = {}
    if not os.path.isfile(path):
        raise SystemExit(f"time_to_accuracy_report.py: error: {path}: no such file (a --save-runs file)")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        # Files written before the commit column hold the others alone.
        if reader.fieldnames not in (COLUMNS, COLUMNS[:-1]):
            raise SystemExit(f"time_to_accuracy_report.py: error: {path}: not a --save-runs file (columns {COLUMNS})")
        for row in reader:
            rows.setdefault((row["link"], row["model"], row["variant"], row["seed"]), []).append(row)
    runs = {}
    for key, epochs in rows.items():
        epochs.sort(key=lambda row: int(row["epoch"]))
        commits = {row.get("commit") or "unknown" for row in epochs}
        if len(commits) > 1:
            raise SystemExit(f"time_to_accuracy_report.py: error: {path}: {' '.join(key)}: epochs of several "
                             f"commits ({', '.join(sorted(commits))})")
        runs[key] = make_run(*([float(row[c]) for row in epochs] for c in VALUES), commit=commits.pop())
    return runs


def write_runs(path, runs):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for (link, model, variant, seed), r in sorted(runs.items()):
            for epoch, values in enumerate(zip(r["accuracy"], r["seconds"], r["communication_seconds"],
                                               r["floats_sent_total"])):
                writer.writerow([link, model, variant, seed, epoch] + [repr(v) for v in values] + [r["commit"]])


def mean_spread(values, digits, unit=""):
    """'mean (±half the spread)', the form of every per-seed value in the tables."""
    return f"{statistics.mean(values):.{digits}f}{unit} (±{(max(values) - min(values)) / 2:.{digits}f})"


def time_to(r, target):
    """Training time at the end of the first epoch whose test accuracy reaches target, or None."""
    for accuracy, elapsed in zip(r["accuracy"], r["elapsed"]):
        if accuracy >= target:
            return elapsed
    return None


# The variants in time-to-accuracy.sh's order, with their names in the tables.
LABELS = {
    "dense": "dense", "topk10x": "Top-k 10x", "topk100x": "Top-k 100x", "powersgd-r4": "PowerSGD rank 4",
    "powersgd-r2": "PowerSGD rank 2", "powersgd-r1": "PowerSGD rank 1", "accordion-topk": "Accordion, Top-k 10x / 100x",
    "accordion-powersgd": "Accordion, PowerSGD rank 2 / 1",
    "accordion-powersgd-r4": "Accordion, PowerSGD rank 4 / 2", "gravac-topk-exp": "GraVAC Top-k, exponential",
    "gravac-topk-geo": "GraVAC Top-k, geometric", "gravac-dgc-exp": "GraVAC DGC, exponential",
    "gravac-dgc-geo": "GraVAC DGC, geometric", "gravac-powersgd-exp": "GraVAC PowerSGD, exponential",
    "gravac-powersgd-geo": "GraVAC PowerSGD, geometric", "auto": "automatic (--auto), PowerSGD 2 / 1 budget",
    "auto-r4": "automatic (--auto), PowerSGD 4 / 2 budget",
}


def epoch_reaching(r, target):
    """The first epoch (from 0) whose test accuracy reaches target, or None."""
    return next((e for e, accuracy in enumerate(r["accuracy"]) if accuracy >= target), None)


def per_seed(values, text):
    """'a / b / c', one value per seed, '-' where there is none."""
    return " / ".join("-" if v is None else text(v) for v in values)


def paired(dense, runs, time):
    """Per seed, dense's time over the run's (time(r) None where it has none), and their mean."""
    ratios = []
    for d, r in zip(dense, runs):
        a, b = time(d), time(r)
        ratios.append(a / b if a is not None and b else None)
    present = [x for x in ratios if x is not None]
    if not present:
        mean = "-"
    else:
        seeds = "" if len(present) == len(ratios) else f" ({len(present)} seed{'' if len(present) == 1 else 's'})"
        mean = f"{statistics.mean(present):.2f}x{seeds}"
    return ratios, mean


def targets(dense, gap):
    """The final target (dense's final accuracy, mean over seeds, minus gap) and the mid-run
    one (dense's accuracy after half its epochs, mean over seeds), with that epoch."""
    final = statistics.mean(r["accuracy"][-1] for r in dense) - gap
    half = len(dense[0]["accuracy"]) // 2 - 1
    return final, statistics.mean(r["accuracy"][half] for r in dense), half


def tables(runs, seeds, gap):
    """The two markdown tables of one link and model: runs[variant] holds a run per seed
    (in `seeds`' order), dense among them. Returns (final target, mid target, text)."""
    dense = runs["dense"]
    final, mid, half = targets(dense, gap)
    ratio = lambda x: f"{x:.2f}"
    out = [f"Final target {final:.2f}% (dense's final accuracy less {gap:g} points); seeds {', '.join(seeds)}:", "",
           "| run | final test accuracy | floats sent (M) | training time (s) | faster per epoch than dense, per seed "
           "| best accuracy less the target, per seed (points) | epoch reaching the target, per seed "
           "| faster to the target than dense, per seed | mean of the paired ratios |",
           "|---|---|---|---|---|---|---|---|---|"]
    for v, rs in runs.items():
        speed, _ = paired(dense, rs, lambda r: r["elapsed"][-1])
        to_target, mean = paired(dense, rs, lambda r: time_to(r, final))
        margins = [max(r["accuracy"]) - final for r in rs]
        out.append(f"| {LABELS.get(v, v)} | {mean_spread([r['accuracy'][-1] for r in rs], 2, '%')} "
                   f"| {statistics.mean(r['floats'] for r in rs) / 1e6:.2f} "
                   f"| {mean_spread([r['elapsed'][-1] for r in rs], 1)} | {per_seed(speed, ratio)} "
                   f"| {per_seed(margins, lambda m: f'{m:+.2f}')} "
                   f"| {per_seed([epoch_reaching(r, final) for r in rs], str)} | {per_seed(to_target, ratio)} "
                   f"| {mean} |")
    out += ["", f"Mid-run target {mid:.2f}% (dense's accuracy after epoch {half}, of {len(dense[0]['accuracy'])}; "
                f"the learning rate drops later):", "",
            "| run | epoch reaching it, per seed | faster to it than dense, per seed | mean of the paired ratios |",
            "|---|---|---|---|"]
    for v, rs in runs.items():
        to_mid, mean = paired(dense, rs, lambda r: time_to(r, mid))
        out.append(f"| {LABELS.get(v, v)} | {per_seed([epoch_reaching(r, mid) for r in rs], str)} "
                   f"| {per_seed(to_mid, ratio)} | {mean} |")
    return final, mid, "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("out", "seeds", "models", "links", "variants"):
        parser.add_argument("--" + name, required=True)
    parser.add_argument("--target-gap", type=float, default=0.5)
    parser.add_argument("--runs", action="append", default=[], help="a --save-runs file to read runs from")
    parser.add_argument("--save-runs", help="write the runs the tables use to this CSV file")
    parser.add_argument("--commit", default="unknown",
                        help="the commit of the programs that made the runs read from metrics files (for --save-runs)")
    args = parser.parse_args()
    seeds = args.seeds.split()
    saved = {}
    for path in args.runs:
        saved.update(read_runs(path))
    used = {}
    print(f"Generated by scripts/experiments/time-to-accuracy.sh; time is training time without evaluation, at the "
          "end of the first epoch that reaches a target; every ratio pairs a seed with dense's same seed.")
    for link in args.links.split():
        for model in args.models.split():
            runs = {}
            for v in args.variants.split():
                found = {}
                for seed in seeds:
                    path = f"{args.out}/{link}/{model}/{v}/seed{seed}.h5"
                    key = (link, model, v, seed)
                    r = run(path, args.commit) if os.path.exists(path) else saved.get(key)
                    if r:
                        found[seed] = r
                        used[key] = r
                if found:
                    runs[v] = found
            if "dense" not in runs:
                continue
            # Pairs need every variant on dense's seeds: the seeds all variants have.
            common = [s for s in seeds if all(s in found for found in runs.values())]
            if not common:
                continue
            _, _, text = tables({v: [found[s] for s in common] for v, found in runs.items()}, common,
                                args.target_gap)
            print(f"\n### {model}, {link}\n")
            print(text, end="")
    if args.save_runs:
        write_runs(args.save_runs, used)


if __name__ == "__main__":
    main()
