"""The tables of the planner study (scripts/experiments/planner.sh).

  planner_report.py --out DIR --seeds "1 2 3" --models "mlp cnn" --comm FILE --link TEXT [--csv OUT.csv]
  planner_report.py --from-csv FILE [--models "mlp cnn"]

Per model, each run's final test accuracy (mean over seeds, with half the spread
between the best and the worst seed), its difference from Accordion's paired by
seed, floats sent per worker, the modelled exchange time of its levels on the
measured network (the planner's own cost, from regime-detect --json), and, for the
first seed where it was trained on the shaped link too, that run's measured
communication time beside the model's.

--csv writes every run's epochs, the raw data the tables are made from (read_csv()
reads them back, as scripts/results-tables.py does; the tables printed are made
from that file):

    model,seed,run,link,level,epoch,test_accuracy,floats_sent_total,seconds,communication_seconds,
    least_communication_seconds,modelled_exchange_seconds,kept_uniform_epochs,plan_epochs

link: loopback (every seed) or shaped (the first seed's runs on the shaped link);
level: the uniform level the run sent, or "schedule"; communication_seconds: rank 0's,
least_communication_seconds: the smallest of the ranks' (the rank that waited least for
the other; empty where the metrics file does not hold them); modelled_exchange_seconds: the
run's modelled exchange time in all (the planner's cost of its levels, the same on
every row of the run); kept_uniform_epochs of plan_epochs: the epochs a plan kept
Accordion's levels (empty for the other runs).
"""
import argparse
import csv
import json
import os
import statistics
import sys

RUNS = {
    "low": "uniform low (PowerSGD rank 2)",
    "high": "uniform high (PowerSGD rank 1)",
    "accordion": "Accordion (rank 2 critical, rank 1 elsewhere)",
    "planned-powersgd": "planned, PowerSGD ranks 1-8",
    "planned-topk": "planned, Top-k fractions 0.001-1",
    "uniform-topk": "uniform Top-k at the Top-k plan's floats",
}
CSV_COLUMNS = ("model", "seed", "run", "link", "level", "epoch", "test_accuracy", "floats_sent_total", "seconds",
               "communication_seconds", "least_communication_seconds", "modelled_exchange_seconds",
               "kept_uniform_epochs", "plan_epochs")


def fail(message):
    sys.exit(f"planner_report.py: error: {message}")


def plan_of(directory, run):
    """The run's levels and the planner's totals for them, from regime-detect --json."""
    # Accordion's schedule is costed as the plans' "uniform" levels.
    source = "planned-powersgd" if run == "accordion" else run
    with open(os.path.join(directory, source + ".json"), encoding="utf-8") as f:
        summary = json.load(f)
    if run == "uniform-topk":  # planner.sh's own figures for a fraction off the profile's grid
        return {"level": summary["level"], "modelled_exchange_seconds": repr(float(summary["modelled_exchange_seconds"])),
                "kept_uniform_epochs": "", "plan_epochs": ""}
    plan = summary["plan"]
    total = plan["total"]
    planned = run.startswith("planned")
    level = "schedule" if run == "accordion" or planned else plan["candidates"][0]
    return {"level": level, "modelled_exchange_seconds": repr(float(total["cost" if planned else "uniform_cost"])),
            "kept_uniform_epochs": str(total["kept_uniform_epochs"]) if planned else "",
            "plan_epochs": str(len(plan["epochs"])) if planned else ""}


def epochs_of(out, models, seeds):
    """Every complete run's epochs under OUT (planner.sh's layout), as CSV rows."""
    import h5py

    rows = []
    for model in models:
        for seed in seeds:
            directory = os.path.join(out, model, f"seed{seed}")
            for run in RUNS:
                for link, name in (("loopback", run + ".h5"), ("shaped", run + ".shaped.h5")):
                    path = os.path.join(directory, name)
                    if not os.path.exists(path):
                        continue
                    with h5py.File(path, "r") as f:
                        if not f.attrs.get("complete", 0):
                            continue
                        e = f["epochs"]
                        common = {"model": model, "seed": seed, "run": run, "link": link, **plan_of(directory, run)}
                        ranks = e["rank_communication_seconds"][()] if "rank_communication_seconds" in e else None
                        for i in range(len(e["test_accuracy"][()])):
                            least = repr(float(ranks[i].min())) if ranks is not None else ""
                            rows.append({**common, "epoch": str(i), "least_communication_seconds": least,
                                         "test_accuracy": repr(float(e["test_accuracy"][i])),
                                         "floats_sent_total": repr(float(e["floats_sent_total"][i])),
                                         "seconds": repr(float(e["seconds"][i])),
                                         "communication_seconds": repr(float(e["communication_seconds"][i]))})
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def runs_of(rows):
    """{(model, run, link): {seed: run}} from the epochs' rows; a run holds its final
    accuracy (%), floats, seconds and communication seconds in all, its modelled
    exchange seconds, level and kept epochs."""
    grouped = {}
    for r in rows:
        grouped.setdefault((r["model"], r["run"], r["link"], r["seed"]), []).append(r)
    runs = {}
    for (model, run, link, seed), epochs in grouped.items():
        if run not in RUNS:
            raise ValueError(f"an unknown run '{run}'")
        if link not in ("loopback", "shaped"):
            raise ValueError(f"an unknown link '{link}'")
        epochs.sort(key=lambda r: int(r["epoch"]))
        last = epochs[-1]
        kept = last["kept_uniform_epochs"]
        runs.setdefault((model, run, link), {})[seed] = {
            "accuracy": 100 * float(last["test_accuracy"]),
            "floats": float(last["floats_sent_total"]),
            "seconds": sum(float(r["seconds"]) for r in epochs),
            "communication": sum(float(r["communication_seconds"]) for r in epochs),
            "least": sum(float(r["least_communication_seconds"]) for r in epochs)
            if all(r["least_communication_seconds"] != "" for r in epochs) else None,
            "modelled": float(last["modelled_exchange_seconds"]),
            "level": last["level"],
            "kept": f"{kept} of {last['plan_epochs']}" if kept != "" else None,
        }
    return runs


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return runs_of(list(csv.DictReader(f)))


def spread(values):
    return (max(values) - min(values)) / 2


def table(runs, model):
    """The markdown table of one model (loopback runs over the seeds every run has,
    the shaped link's where they were trained)."""
    loop = {run: runs[(model, run, "loopback")] for run in RUNS if (model, run, "loopback") in runs}
    if "accordion" not in loop:
        raise ValueError(f"no Accordion runs of {model}, which every comparison needs")
    seeds = sorted(set.intersection(*(set(s) for s in loop.values())), key=int)
    ref = loop["accordion"]
    ref_floats = statistics.mean(ref[s]["floats"] for s in seeds)
    ref_modelled = statistics.mean(ref[s]["modelled"] for s in seeds)
    shaped_seed = next((s for s in seeds if any((model, r, "shaped") in runs and s in runs[(model, r, "shaped")]
                                                for r in RUNS)), None)
    out = ["| run | test accuracy | against Accordion, paired by seed (points) | floats sent (M) | "
           "less sent than Accordion (x) | modelled exchange (s) | faster than Accordion, modelled (x) | "
           "epochs kept at Accordion's levels"
           + (f" | shaped link, seed {shaped_seed}: communication measured (the rank that waited least), "
              "modelled (s) | training time on the link (s)"
              if shaped_seed else "") + " |",
           "|---|---|---|---|---|---|---|---" + ("|---|---" if shaped_seed else "") + "|"]
    for run, by_seed in loop.items():
        accuracy = [by_seed[s]["accuracy"] for s in seeds]
        paired = [by_seed[s]["accuracy"] - ref[s]["accuracy"] for s in seeds]
        floats = statistics.mean(by_seed[s]["floats"] for s in seeds)
        modelled = statistics.mean(by_seed[s]["modelled"] for s in seeds)
        label = RUNS[run]
        if run == "uniform-topk":
            label += " (" + ", ".join(sorted({by_seed[s]["level"] for s in seeds})) + ")"
        kept = ", ".join(by_seed[s]["kept"] for s in seeds) if by_seed[seeds[0]]["kept"] else "-"
        against = "-" if run == "accordion" else \
            f"{statistics.mean(paired):+.2f} ({min(paired):+.2f} to {max(paired):+.2f})"
        row = (f"| {label} | {statistics.mean(accuracy):.2f}% (±{spread(accuracy):.2f}) | {against} | "
               f"{floats / 1e6:.2f} | {ref_floats / floats:.2f}x | {modelled:.3f} | {ref_modelled / modelled:.2f}x | "
               f"{kept}")
        if shaped_seed:
            shaped = runs.get((model, run, "shaped"), {}).get(shaped_seed)
            measured = shaped and (shaped["least"] if shaped["least"] is not None else shaped["communication"])
            row += (f" | {measured:.1f}, {shaped['modelled']:.1f} | {shaped['seconds']:.1f}" if shaped else " | - | -")
        out.append(row + " |")
    return "\n".join(out) + "\n", seeds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="planner.sh's output directory")
    parser.add_argument("--seeds", default="1 2 3")
    parser.add_argument("--models", default="mlp cnn")
    parser.add_argument("--comm", help="the network profile the plans were costed with")
    parser.add_argument("--link", help="what that profile measured")
    parser.add_argument("--csv", help="write every run's epochs here, and make the tables from it")
    parser.add_argument("--from-csv", help="make the tables from this file alone")
    args = parser.parse_args()
    if bool(args.out) == bool(args.from_csv):
        parser.error("give --out (a study's directory) or --from-csv (its raw data), one of them")
    path = args.from_csv
    if args.out:
        rows = epochs_of(args.out, args.models.split(), args.seeds.split())
        path = args.csv or os.path.join(args.out, "planner-runs.csv")
        write_csv(path, rows)
        print(f"Generated by scripts/experiments/planner.sh, seeds: {args.seeds}; modelled exchange time on the "
              f"{args.link} ({os.path.basename(args.comm or '')}); raw data: {path}.")
    try:
        runs = read_csv(path)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except (KeyError, ValueError) as e:
        fail(f"{path}: not the planner study's runs ({e})")
    for model in args.models.split():
        if not any(key[0] == model for key in runs):
            continue
        try:
            text, seeds = table(runs, model)
        except ValueError as e:
            fail(f"{path}: {e}")
        print(f"\n### {model}, seeds {', '.join(seeds)}\n")
        print(text, end="")


if __name__ == "__main__":
    main()
