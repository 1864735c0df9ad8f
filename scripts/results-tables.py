#!/usr/bin/env python3
"""Recomputes the tables of docs/results.md from the raw data under docs/results/,
so that a table and its data cannot drift apart.

Each recomputed table stands in docs/results.md between two lines,
    <!-- table: NAME -->
    <!-- end of table -->
where NAME says what it is made from; the tables are:
    accordion STUDY               the reproduction study's runs of STUDY (powersgd, topk
                                  or batch), from docs/results/accordion-runs.csv
    accordion seeds               the same runs' final accuracy per seed
    gravac VARIANT...             the GraVAC study's variants (scripts/experiments/gravac.sh's
                                  names), against its dense runs, from docs/results/gravac-runs.csv
    time-to-accuracy LINK MODEL   the study of that link and model, both targets,
                                  from docs/results/time-to-accuracy-runs.csv
    planner MODEL                 the planner study's runs of MODEL (mlp or cnn), from
                                  docs/results/planner-runs.csv (scripts/experiments/planner.sh)
    model-check [RUN]             the network model against train-dist's exchange per step on
                                  a shaped link, from docs/results/model-check.csv, or
                                  model-check-RUN.csv for another machine's or setting's
                                  (scripts/experiments/shaped-model-check.sh)
    model-check-medians [RUN]     the same runs per model and level over their repeats: the
                                  medians of the modelled and the measured exchange

    scripts/results-tables.py            rewrite the tables in place
    scripts/results-tables.py --check    say which tables differ from their data (exit 1), write nothing
    scripts/results-tables.py --plots    also draw each study's accuracy against training time
                                         (docs/results/tta-MODEL-LINK.png; needs matplotlib)

The default test suite runs --check (e2e.results_tables). Exit 0 when every table
matches (or was written), 1 when one differs, 2 on a usage or data error."""
import argparse
import csv
import importlib.util
import math
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
BEGIN = re.compile(r"^<!-- table: (.+?) -->$")
END = "<!-- end of table -->"


def fail(message, code=2):
    print(f"results-tables.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def load_report(name="time_to_accuracy_report"):
    path = os.path.join(HERE, "experiments", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TimeToAccuracy:
    """The time-to-accuracy study's runs, by link and model."""

    GAP = 0.5  # points below dense's final accuracy: time-to-accuracy.sh's TARGET_GAP

    def __init__(self, data):
        self.report = load_report()
        self.path = os.path.join(data, "time-to-accuracy-runs.csv")
        try:
            self.runs = self.report.read_runs(self.path)
        except SystemExit as e:  # the report's own message, with its file
            fail(str(e).replace("time_to_accuracy_report.py: error: ", ""))

    def study(self, link, model):
        """{variant: [run per seed]} in the script's order, and the seeds every variant has."""
        order = list(self.report.LABELS)
        found = {}
        for (l, m, v, seed), r in self.runs.items():
            if (l, m) == (link, model):
                found.setdefault(v, {})[seed] = r
        if "dense" not in found:
            fail(f"{self.path}: no dense runs of {model} at {link}, which every comparison needs")
        seeds = sorted(set.intersection(*(set(s) for s in found.values())), key=int)
        variants = sorted(found, key=lambda v: order.index(v) if v in order else len(order))
        return {v: [found[v][s] for s in seeds] for v in variants}, seeds

    def table(self, link, model):
        runs, seeds = self.study(link, model)
        return self.report.tables(runs, seeds, self.GAP)[2]

    def plot(self, link, model, out):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        runs, seeds = self.study(link, model)
        final, mid, _ = self.report.tables(runs, seeds, self.GAP)
        fig, ax = plt.subplots(figsize=(9, 5.5))
        colors = plt.get_cmap("tab20").colors
        for i, (v, rs) in enumerate(runs.items()):
            for k, r in enumerate(rs):
                ax.plot(r["elapsed"], r["accuracy"], color=colors[i % len(colors)], alpha=0.85, linewidth=1.2,
                        marker="o", markersize=2.5, label=self.report.LABELS.get(v, v) if k == 0 else None)
        for y, name in ((final, "final target"), (mid, "mid-run target")):
            ax.axhline(y, color="black", linestyle="--" if name == "final target" else ":", linewidth=0.8)
            ax.text(0.005, y, f" {name} {y:.2f}%", transform=ax.get_yaxis_transform(), fontsize=8, va="bottom")
        low = min(min(r["accuracy"]) for rs in runs.values() for r in rs)
        ax.set_ylim(max(low, final - 8), None)
        ax.set_xlabel("training time (s), evaluation excluded")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{model} at {link}: every variant, seeds {', '.join(seeds)} (one line per seed)")
        ax.legend(fontsize=7, ncol=2, loc="lower right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out, dpi=110, metadata={"Software": None})
        plt.close(fig)


class Accordion:
    """The reproduction study's runs (scripts/reproduce-results.sh, written by
    scripts/experiments/accordion_csv.py): per study, run and seed, its epochs."""

    STUDIES = {
        "powersgd": ("rank 2", "rank 1"),
        "topk": ("99%", "10%"),
        "batch": ("256", "1024"),
    }
    RUNS = ("low", "high", "accordion", "online")

    def __init__(self, data):
        self.path = os.path.join(data, "accordion-runs.csv")
        self.runs = {}
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                for row in csv.DictReader(f):
                    key = (row["study"], row["run"], row["seed"])
                    self.runs.setdefault(key, []).append(row)
        except OSError as e:
            fail(f"{self.path}: {e.strerror}")
        except KeyError as e:
            fail(f"{self.path}: no column {e}")

    def label(self, study, run):
        low, high = self.STUDIES[study]
        return {"low": f"low ({low})", "high": f"high ({high})", "accordion": "Accordion, schedule replayed",
                "online": "Accordion online"}[run]

    def seeds(self, study):
        return sorted({k[2] for k in self.runs if k[0] == study}, key=int)

    def summary(self, study, run, seed):
        """Final test accuracy (fraction), floats sent, training seconds, critical epochs."""
        epochs = self.runs[(study, run, seed)]
        try:
            accuracy = [float(r["test_accuracy"]) for r in epochs if r["test_accuracy"] != ""]
            floats = float(epochs[-1]["floats_sent_total"])
            seconds = sum(float(r["seconds"]) for r in epochs)
            critical = [(int(r["critical_matrices"]), int(r["matrices"])) for r in epochs
                        if r["critical_matrices"] != ""]
        except ValueError as e:
            fail(f"{self.path}: {study} {run} seed {seed}: {e}")
        return accuracy[-1] if accuracy else math.nan, floats, seconds, self.critical_text(critical, len(epochs))

    @staticmethod
    def critical_text(critical, epochs):
        """As compare_runs.py writes it (accordion_runs.epoch_ranges): the epochs any
        matrix was critical in, and the share of (matrix, epoch) pairs that were."""
        if not critical:
            return "-"
        if len(critical) != epochs:
            fail("accordion-runs.csv: a run with critical matrices in some epochs only")
        # Which matrices were critical does not matter here, only how many.
        flags = np.array([[m < c for m in range(matrices)] for c, matrices in critical])
        from accordion_runs import epoch_ranges  # beside this script; imported once
        return epoch_ranges(flags)

    def table(self, study):
        if study not in self.STUDIES:
            fail(f"docs/results.md: a table 'accordion {study}'; the studies are {', '.join(self.STUDIES)}")
        seeds = self.seeds(study)
        rows = []
        for run in self.RUNS:
            have = [s for s in seeds if (study, run, s) in self.runs]
            if not have:
                continue
            if have != seeds:
                fail(f"{self.path}: {study} {run} has seeds {', '.join(have)}, the study {', '.join(seeds)}")
            runs = [self.summary(study, run, s) for s in seeds]
            accuracy = np.array([r[0] for r in runs])
            critical = sorted({r[3] for r in runs})
            rows.append((self.label(study, run), accuracy.mean(),
                         accuracy.max() - accuracy.min() if len(runs) > 1 else math.nan,
                         np.array([r[1] for r in runs]).mean(), np.array([r[2] for r in runs]).mean(),
                         "; ".join(critical)))
        if not rows or not rows[0][0].startswith("low"):
            fail(f"{self.path}: no low-level runs of {study}, which the factors compare with")
        base = rows[0]
        out = ["| run | test accuracy | floats sent (M) | less sent than low (x) | time (s) | faster than low (x) "
               "| critical epochs |", "|---|---|---|---|---|---|---|"]
        for label, accuracy, spread, floats, seconds, critical in rows:
            text = f"{100 * accuracy:.2f}%" + ("" if math.isnan(spread) else f" (±{50 * spread:.2f})")
            out.append(f"| {label} | {text} | {floats / 1e6:.2f} | ({base[3] / floats:.2f}x) | {seconds:.1f} | "
                       f"({base[4] / seconds:.2f}x) | {critical} |")
        return "\n".join(out) + "\n"

    def seeds_table(self):
        seeds = sorted({k[2] for k in self.runs}, key=int)
        out = ["| study | run | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|---|" + "---|" * len(seeds)]
        for study in self.STUDIES:
            for run in self.RUNS:
                if (study, run, seeds[0]) not in self.runs:
                    continue
                cells = [f"{100 * self.summary(study, run, s)[0]:.2f}%" if (study, run, s) in self.runs else "-"
                         for s in seeds]
                out.append(f"| {study} | {self.label(study, run)} | " + " | ".join(cells) + " |")
        return "\n".join(out) + "\n"


def read_study(report, path, what):
    """A study's runs, by its report's read_csv(); a file that is not its raw data fails."""
    try:
        return report.read_csv(path)
    except OSError as e:
        fail(f"{path}: {e.strerror}")
    except (KeyError, ValueError, IndexError) as e:
        fail(f"{path}: not the {what}'s runs ({e})")


class Gravac:
    """The GraVAC study's runs (scripts/experiments/gravac.sh), by variant."""

    def __init__(self, data):
        self.report = load_report("gravac_report")
        self.path = os.path.join(data, "gravac-runs.csv")
        self.runs = read_study(self.report, self.path, "GraVAC study")
        if "dense" not in self.runs:
            fail(f"{self.path}: no dense runs, which every factor compares with")
        self.dense = np.mean([r["floats"] for r in self.runs["dense"]])

    def table(self, variants):
        missing = [v for v in variants if v not in self.runs]
        if missing:
            fail(f"{self.path}: no runs of {', '.join(missing)}")
        return self.report.table([(v, self.runs[v]) for v in variants], self.dense)


class ModelCheck:
    """The network model's exchange per step against the measured one, one file per machine or setting."""

    def __init__(self, data):
        self.data = data

    def read(self, machine):
        path = os.path.join(self.data, "model-check.csv" if machine is None else f"model-check-{machine}.csv")
        try:
            with open(path, newline="", encoding="utf-8") as f:
                return path, list(csv.DictReader(f))
        except OSError as e:
            fail(f"{path}: {e.strerror}")

    def medians(self, machine=None):
        """Per model and level over the repeats: the median measured exchange and its range, and
        each model's median with the error of the medians and how many repeats it met to 25%.
        A repeat's measured time is one draw of a quantity that moves between repeats; the
        medians compare the model with its central value."""
        path, rows = self.read(machine)
        models = [(column, title) for column, title in (("modelled_seconds", "the fit"),
                                                        ("measured_times_modelled_seconds", "measured times"))
                  if rows and column in rows[0]]
        out = ["| model | level | repeats | measured, median (ms) | measured, range (ms) |" +
               "".join(f" modelled with {title}, median (ms) | error of the medians | repeats within 25% |"
                       for _, title in models),
               "|---|---|---|---|---|" + "---|---|---|" * len(models)]
        try:
            groups = {}
            for r in rows:
                groups.setdefault((r["model"], r["level"]), []).append(r)
            for (model, level), group in groups.items():
                measured = [float(r["measured_seconds"]) for r in group]
                middle = float(np.median(measured))
                line = (f"| {model} | {level} | {len(group)} | {1e3 * middle:.2f} | "
                        f"{1e3 * min(measured):.2f}-{1e3 * max(measured):.2f} |")
                for column, _ in models:
                    modelled = [float(r[column]) for r in group]
                    within = sum(abs(m / t - 1) <= 0.25 for m, t in zip(modelled, measured))
                    line += (f" {1e3 * float(np.median(modelled)):.2f} | "
                             f"{100 * (float(np.median(modelled)) / middle - 1):+.0f}% | {within} of {len(group)} |")
                out.append(line)
        except (KeyError, ValueError) as e:
            fail(f"{path}: not shaped-model-check.sh's table ({e})")
        return "\n".join(out) + "\n"

    def table(self, machine=None):
        path, rows = self.read(machine)
        # Newer files hold more models beside the first, a column pair each: the fit of calls
        # timed alone (since comm-profile -m), the measured times (compress-bench --comm-model),
        # the latency as the small sizes' median times (as comm-profile fitted it before its file's
        # version 1.3).
        extra = [(column, title) for column, title in (("isolated_modelled_seconds", "modelled from calls alone"),
                                                       ("measured_times_modelled_seconds", "modelled with measured times"),
                                                       ("median_alpha_modelled_seconds",
                                                        "modelled with the medians' latency"))
                 if rows and column in rows[0]]
        out = ["| repeat | model | level | compute per step (ms) | modelled exchange per step (ms) | measured (ms) | "
               "rank 0's (ms) | model's error |" + "".join(f" {title} (ms) | its error |" for _, title in extra),
               "|---|---|---|---|---|---|---|---|" + "---|---|" * len(extra)]
        try:
            for r in rows:
                modelled, measured = float(r["modelled_seconds"]), float(r["measured_seconds"])
                line = (f"| {int(r['repeat'])} | {r['model']} | {r['level']} | "
                        f"{1e3 * float(r['compute_seconds']):.1f} | {1e3 * modelled:.2f} | {1e3 * measured:.2f} | "
                        f"{1e3 * float(r['rank0_seconds']):.2f} | {100 * (modelled / measured - 1):+.0f}% |")
                for column, _ in extra:
                    other = float(r[column])
                    line += f" {1e3 * other:.2f} | {100 * (other / measured - 1):+.0f}% |"
                out.append(line)
        except (KeyError, ValueError) as e:
            fail(f"{path}: not shaped-model-check.sh's table ({e})")
        return "\n".join(out) + "\n"


class Planner:
    """The planner study's runs (scripts/experiments/planner.sh), by model."""

    def __init__(self, data):
        self.report = load_report("planner_report")
        self.path = os.path.join(data, "planner-runs.csv")
        self.runs = read_study(self.report, self.path, "planner study")

    def table(self, model):
        if not any(key[0] == model for key in self.runs):
            fail(f"{self.path}: no runs of {model}")
        try:
            return self.report.table(self.runs, model)[0]
        except ValueError as e:
            fail(f"{self.path}: {e}")


class Studies:
    """Each study's data, read when a table first asks for it."""

    def __init__(self, data):
        self.data = data
        self.loaded = {}

    def get(self, kind):
        if kind not in self.loaded:
            self.loaded[kind] = {"time-to-accuracy": TimeToAccuracy, "accordion": Accordion,
                                 "gravac": Gravac, "model-check": ModelCheck, "planner": Planner}[kind](self.data)
        return self.loaded[kind]


def recompute(name, studies):
    words = name.split()
    if len(words) == 3 and words[0] == "time-to-accuracy":
        return studies.get("time-to-accuracy").table(words[1], words[2])
    if words == ["accordion", "seeds"]:
        return studies.get("accordion").seeds_table()
    if len(words) == 2 and words[0] == "accordion":
        return studies.get("accordion").table(words[1])
    if words[:1] == ["model-check"] and len(words) <= 2:
        return studies.get("model-check").table(*words[1:])
    if words[:1] == ["model-check-medians"] and len(words) <= 2:
        return studies.get("model-check").medians(*words[1:])
    if len(words) == 2 and words[0] == "planner":
        return studies.get("planner").table(words[1])
    if len(words) >= 2 and words[0] == "gravac":
        return studies.get("gravac").table(words[1:])
    fail(f"docs/results.md: a table named '{name}', which this script does not make "
         "(accordion STUDY, accordion seeds, gravac VARIANT..., model-check [RUN], model-check-medians [RUN], "
         "planner MODEL, "
         "time-to-accuracy LINK MODEL)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 where a table differs")
    parser.add_argument("--plots", action="store_true", help="also draw the time-to-accuracy curves")
    parser.add_argument("--doc", default=os.path.join(TREE, "docs", "results.md"))
    parser.add_argument("--data", default=os.path.join(TREE, "docs", "results"))
    args = parser.parse_args()
    if args.check and args.plots:
        fail("--check writes nothing; leave out --plots")
    try:
        with open(args.doc, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"{args.doc}: {e.strerror}")
    studies = Studies(args.data)
    out, differ, names, i = [], [], [], 0
    while i < len(lines):
        match = BEGIN.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        name = match.group(1)
        try:
            end = lines.index(END, i)
        except ValueError:
            fail(f"{args.doc}: the table '{name}' has no '{END}' line after it")
        if any(BEGIN.match(line) for line in lines[i:end]):
            fail(f"{args.doc}: the table '{name}' holds another table's first line before its end")
        table = recompute(name, studies).rstrip("\n").split("\n")
        names.append(name)
        if lines[i:end] != table:
            differ.append(name)
        out += table
        i = end
    if not names:
        fail(f"{args.doc}: no tables marked '<!-- table: NAME -->'")
    if args.check:
        for name in differ:
            print(f"results-tables.py: {args.doc}: the table '{name}' differs from its data; "
                  "run scripts/results-tables.py to rewrite it", file=sys.stderr)
        print(f"results-tables.py: {len(names) - len(differ)} of {len(names)} tables match their data")
        sys.exit(1 if differ else 0)
    if differ:
        with open(args.doc + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n".join(out))
        os.replace(args.doc + ".tmp", args.doc)
    print(f"results-tables.py: {len(names)} tables, {len(differ)} rewritten")
    if args.plots:
        for name in names:
            words = name.split()
            if words[0] == "time-to-accuracy":
                path = os.path.join(args.data, f"tta-{words[2]}-{words[1]}.png")
                studies.get("time-to-accuracy").plot(words[1], words[2], path)
                print(f"results-tables.py: wrote {path}")


if __name__ == "__main__":
    main()
