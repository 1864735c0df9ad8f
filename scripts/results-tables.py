#!/usr/bin/env python3
"""Recomputes the tables of docs/results.md, docs/benchmarks.md and README.md (its quickstart
table) from the raw data under docs/results/ and docs/benchmarks/, so that a table and its
data cannot drift apart.

Each recomputed table stands in its document between two lines,
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
    model-check-fits RUN          the same run's rows scored per latency of the fit (the mean
                                  times', the median times', the calls alone'): how many within
                                  25% of the measured exchange, the rms and the largest error;
                                  for runs whose profiles have mean times (comm-profile 1.3 on)
    compute-per-step              docs/benchmarks/compute-per-step/compute.csv: each side's
                                  lower median of its runs per model and pass, as
                                  scripts/bench-comm-profile-compute.sh reports them
    ci LOG                        the parts' times and the tests' counts of both builds in
                                  docs/benchmarks/ci/LOG, a log of .ci/run (scripts/test.sh's lines)
    auto-predictions              train-dist --auto's predicted against measured step time per link
                                  and model, and the measuring's share of the time, from
                                  docs/results/auto-predictions.csv (scripts/experiments/auto_predictions.py)
    auto-overhead                 train-dist --auto's throughput against dense's on loopback, where
                                  compression does not pay, in blocks of dense, auto, auto, dense runs,
                                  from docs/results/auto-overhead-runs.csv (scripts/experiments/auto-overhead.sh)
    fsdp LINK                     FSDP2's hybrid sharding with the toolkit's replica exchange against
                                  FSDP's own on that link (100mbit, loopback), from
                                  docs/results/fsdp-runs.csv (scripts/experiments/fsdp.sh)
    quickstart                    README.md's table of the quickstart, made by compare_runs.py from
                                  the kept run's metrics files in docs/results/quickstart/ (as
                                  examples/pipeline.sh makes it), which must equal the run's own
                                  table.txt there; a code block

Every row of the studies' CSV files names, in its commit column, the commit of the programs
that made it. A row of the GraVAC or time-to-accuracy tables whose runs were made before a
later change that docs/results.md says changes their numbers is marked '(stale: before
COMMIT)', COMMIT being that change (STALE below); a rerun, a newer commit, clears it.

    scripts/results-tables.py            rewrite the tables in place
    scripts/results-tables.py --check    say which tables differ from their data (exit 1), write nothing
    scripts/results-tables.py --plots    also draw each study's accuracy against training time
                                         (docs/results/tta-MODEL-LINK.png; needs matplotlib)

--doc DOC (again for more) takes those documents instead of docs/results.md,
docs/benchmarks.md and README.md; --data and --benchmarks the raw data's directories. The default
test suite runs --check (e2e.results_tables). Exit 0 when every table matches (or
was written), 1 when one differs, 2 on a usage or data error."""
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


# Changes that docs/results.md says change some variants' numbers: (the change, the study,
# its variants it changes, the commits of runs made before it).
STALE = (
    # GraVAC sends through the one gradient exchange: DGC's sampled threshold and PowerSGD's Q
    # are drawn differently ("GraVAC on the same setting").
    ("62384a7", "gravac", re.compile(r"^gravac-(dgc|powersgd)-"), {"4ccddc1"}),
    ("62384a7", "time-to-accuracy", re.compile(r"^gravac-(dgc|powersgd)-"),
     {"bcbaee8", "f205c9e", "a85bc43", "d03161e", "7c38a96"}),
)


def stale(study, variant, commits):
    """The change that makes a variant's runs of these commits stale, or None."""
    for change, which, variants, before in STALE:
        if which == study and variants.match(variant) and set(commits) & before:
            return change
    return None


def stale_label(label, change):
    return f"{label} (stale: before {change})" if change else label


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
        lines = self.report.tables(runs, seeds, self.GAP)[2].split("\n")
        for v, rs in runs.items():
            change = stale("time-to-accuracy", v, [r["commit"] for r in rs])
            if change:
                label = f"| {self.report.LABELS.get(v, v)} |"
                lines = [f"| {stale_label(line[2:len(label) - 2], change)} |" + line[len(label):]
                         if line.startswith(label) else line for line in lines]
        return "\n".join(lines)

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
            fail(f"a table 'accordion {study}'; the studies are {', '.join(self.STUDIES)}")
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
        self.commits = {}
        with open(self.path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                self.commits.setdefault(row["variant"], set()).add(row.get("commit") or "unknown")

    def table(self, variants):
        missing = [v for v in variants if v not in self.runs]
        if missing:
            fail(f"{self.path}: no runs of {', '.join(missing)}")
        return self.report.table([(stale_label(v, stale("gravac", v, self.commits[v])), self.runs[v])
                                  for v in variants], self.dense)


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

    # The latencies a run's model is priced with, by the column of its modelled exchange.
    FITS = (("modelled_seconds", "median of the mean times, back to back (profile file 1.3 on)"),
            ("median_alpha_modelled_seconds", "median of the median times, back to back (before profile file 1.3)"),
            ("isolated_modelled_seconds", "median of the mean times, calls alone (`-m 1`)"))

    def fits(self, machine):
        """Per latency of the fit, over all the run's rows: how many are within 25% of the
        measured exchange, the rms of the relative errors and the largest one."""
        path, rows = self.read(machine)
        if rows and "median_alpha_modelled_seconds" not in rows[0]:
            fail(f"{path}: no median_alpha_modelled_seconds column: its profiles have no mean times "
                 "(comm-profile before 1.3), so its fit's latency is the median times'")
        out = ["| latency of the fit | rows within 25% | rms error | largest error |", "|---|---|---|---|"]
        try:
            measured = np.array([float(r["measured_seconds"]) for r in rows])
            for column, title in self.FITS:
                error = np.array([float(r[column]) for r in rows]) / measured - 1
                largest = error[np.argmax(np.abs(error))]
                out.append(f"| {title} | {int(np.sum(np.abs(error) <= 0.25))} of {len(rows)} | "
                           f"{100 * np.sqrt(np.mean(error ** 2)):.1f}% | {100 * largest:+.0f}% |")
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


class ComputePerStep:
    """docs/benchmarks/compute-per-step/: comm-profile --model's forward and backward pass
    against a plain PyTorch loop, each side's lower median of its runs (as
    scripts/bench-comm-profile-compute.sh makes its report from the same file)."""

    def __init__(self, benchmarks):
        self.path = os.path.join(benchmarks, "compute-per-step", "compute.csv")

    def table(self):
        best = {}
        try:
            with open(self.path, newline="", encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    for p in ("forward", "backward"):
                        key = (r["model"], int(r["batch"]), p, r["side"])
                        best[key] = min(best.get(key, math.inf), float(r[p + "_seconds"]))
        except OSError as e:
            fail(f"{self.path}: {e.strerror}")
        except (KeyError, ValueError) as e:
            fail(f"{self.path}: not bench-comm-profile-compute.sh's compute.csv ({e})")
        out = ["| model | batch | pass | comm-profile ms | PyTorch ms | ratio |", "|---|---|---|---|---|---|"]
        for model, batch, p in dict.fromkeys(k[:3] for k in best):
            if (model, batch, p, "comm-profile") not in best or (model, batch, p, "pytorch") not in best:
                fail(f"{self.path}: {model} at batch {batch} has runs of one side only")
            ours, torch = best[(model, batch, p, "comm-profile")], best[(model, batch, p, "pytorch")]
            out.append(f"| {model} | {batch} | {p} | {1e3 * ours:.3f} | {1e3 * torch:.3f} | {ours / torch:.2f} |")
        return "\n".join(out) + "\n"


class CiLog:
    """A kept log of .ci/run (docs/benchmarks/ci/): per build, scripts/test.sh's time for each
    part, ctest's count of tests (and of those skipped) and pytest's summary."""

    PASSED = re.compile(r"^test\.sh: (.+) passed in (\d+) s \(set-up (\d+) s, build (\d+) s, ctest (\d+) s, "
                        r"Python package (\d+) s\)$")
    CTEST = re.compile(r"^\d+% tests passed, (\d+) tests failed out of (\d+)$")
    SKIPPED = re.compile(r"^\s*\d+/\d+ Test +#\d+: (\S+) \.+\*\*\*Skipped ")
    PYTEST = re.compile(r"^(\d+) passed(?:, (\d+) skipped)? in ")
    # Why a test skips, by its name (tests/e2e/CMakeLists.txt, tests/e2e/cuda_*.sh).
    NEEDS = ((re.compile(r"^gpu\."), "need a GPU"),
             (re.compile(r"^e2e\.cuda_"), "need a build with the CUDA kernels"))

    def __init__(self, benchmarks):
        self.dir = os.path.join(benchmarks, "ci")

    def builds(self, log):
        path = os.path.join(self.dir, log)
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except OSError as e:
            fail(f"{path}: {e.strerror}")
        builds, part = [], {"skipped": [], "without": False}
        for line in lines:
            if (m := self.CTEST.match(line)):
                part["failed"], part["tests"] = int(m.group(1)), int(m.group(2))
            elif (m := self.SKIPPED.match(line)):
                part["skipped"].append(m.group(1))
            elif (m := self.PYTEST.match(line)):
                part["pytest"] = (int(m.group(1)), int(m.group(2) or 0))
            elif "without the tests labelled torch_independent" in line:
                part["without"] = True
            elif (m := self.PASSED.match(line)):
                if "tests" not in part or "pytest" not in part:
                    fail(f"{path}: {m.group(1)} passed with no ctest or pytest summary before it")
                part.update(name=m.group(1), seconds=[int(g) for g in m.groups()[1:]])
                builds.append(part)
                part = {"skipped": [], "without": False}
        if not builds:
            fail(f"{path}: no 'test.sh: ... passed in' line: not a log of .ci/run")
        return builds

    def table(self, log):
        builds = self.builds(log)
        out = ["| part | " + " | ".join(b["name"] for b in builds) + " |", "|---" * (len(builds) + 1) + "|"]
        suite = []
        for b in builds:
            counts = [(sum(bool(pattern.match(t)) for t in b["skipped"]), need) for pattern, need in self.NEEDS]
            others = len(b["skipped"]) - sum(n for n, _ in counts)
            why = [f"the {n} that {need}" for n, need in counts if n] + ([f"{others} others"] if others else [])
            text = f"{b['seconds'][3]} s ({b['tests']} tests"
            if b["without"]:
                text += ": not those labelled `torch_independent`"
            if b["failed"]:
                text += f", {b['failed']} failed"
            if len(why) == 1:
                text += f", {why[0]} skipped"
            elif why:
                text += f"; {len(b['skipped'])} skipped: {' and '.join(why)}"
            suite.append(text + ")")
        rows = (("set-up check", [f"{b['seconds'][1]} s" for b in builds]),
                ("build", [f"{b['seconds'][2]} s" for b in builds]),
                ("default suite", suite),
                ("Python package", [f"{b['seconds'][4]} s ({b['pytest'][0]} passed, {b['pytest'][1]} skipped)"
                                    for b in builds]),
                ("in all", [f"{b['seconds'][0]} s" for b in builds]))
        out += [f"| {part} | " + " | ".join(cells) + " |" for part, cells in rows]
        return "\n".join(out) + "\n"


class AutoPredictions:
    """train-dist --auto's predicted against measured step times (docs/results/auto-predictions.csv,
    scripts/experiments/auto_predictions.py)."""

    def __init__(self, data):
        self.report = load_report("auto_predictions")
        self.path = os.path.join(data, "auto-predictions.csv")

    def table(self):
        return self.report.table(self.report.read_csv(self.path))


class AutoOverhead:
    """train-dist --auto against dense on loopback (docs/results/auto-overhead-runs.csv,
    scripts/experiments/auto-overhead.sh)."""

    def __init__(self, data):
        self.report = load_report("auto_overhead_report")
        self.path = os.path.join(data, "auto-overhead-runs.csv")

    def table(self):
        try:
            return self.report.table(self.report.read_runs(self.path))
        except SystemExit as e:  # the report's own message, with its file
            fail(str(e).replace("auto_overhead_report.py: error: ", ""))


class Fsdp:
    """The FSDP2 study's runs (docs/results/fsdp-runs.csv, scripts/experiments/fsdp.sh)."""

    def __init__(self, data):
        self.report = load_report("fsdp_report")
        self.runs = self.report.read_runs(os.path.join(data, "fsdp-runs.csv"))

    def table(self, link):
        return self.report.table(self.runs, link)


class Quickstart:
    """A kept run of examples/pipeline.sh (docs/results/quickstart/): its table made again by
    scripts/compare_runs.py from its metrics files, labelled as the run's table.txt labels them."""

    def __init__(self, data):
        self.dir = os.path.join(data, "quickstart")

    def table(self):
        import subprocess

        path = os.path.join(self.dir, "table.txt")
        try:
            with open(path, encoding="utf-8") as f:
                kept = f.read()
        except OSError as e:
            fail(f"{path}: {e.strerror}")
        # A row's label is its text before the figures; its metrics file is named by its first word.
        labels = [re.split(r"\s{2,}", line)[0] for line in kept.split("\n")[1:] if line.strip()]
        if not labels or not kept.startswith("run "):
            fail(f"{path}: not compare_runs.py's table")
        made = subprocess.run([sys.executable, os.path.join(HERE, "compare_runs.py")] +
                              [f"{label}={label.split()[0]}.h5" for label in labels],
                              cwd=self.dir, capture_output=True, text=True)
        if made.returncode != 0:
            fail(f"{self.dir}: compare_runs.py: {made.stderr.strip()}")
        if made.stdout != kept:
            fail(f"{path}: not the table of the metrics files beside it")
        return "```\n" + kept + "```\n"


class Studies:
    """Each study's data, read when a table first asks for it."""

    def __init__(self, data, benchmarks):
        self.data = data
        self.benchmarks = benchmarks
        self.loaded = {}

    def get(self, kind):
        if kind not in self.loaded:
            studies = {"time-to-accuracy": TimeToAccuracy, "accordion": Accordion, "gravac": Gravac,
                       "model-check": ModelCheck, "planner": Planner}
            studies["quickstart"] = Quickstart
            studies["auto-predictions"] = AutoPredictions
            studies["auto-overhead"] = AutoOverhead
            studies["fsdp"] = Fsdp
            benchmarks = {"compute-per-step": ComputePerStep, "ci": CiLog}
            self.loaded[kind] = (studies[kind](self.data) if kind in studies else
                                 benchmarks[kind](self.benchmarks))
        return self.loaded[kind]


def recompute(name, studies, doc):
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
    if len(words) == 2 and words[0] == "model-check-fits":
        return studies.get("model-check").fits(words[1])
    if len(words) >= 2 and words[0] == "gravac":
        return studies.get("gravac").table(words[1:])
    if words == ["compute-per-step"]:
        return studies.get("compute-per-step").table()
    if len(words) == 2 and words[0] == "ci":
        return studies.get("ci").table(words[1])
    if words == ["quickstart"]:
        return studies.get("quickstart").table()
    if words == ["auto-predictions"]:
        return studies.get("auto-predictions").table()
    if len(words) == 2 and words[0] == "fsdp":
        return studies.get("fsdp").table(words[1])
    if words == ["auto-overhead"]:
        return studies.get("auto-overhead").table()
    fail(f"{doc}: a table named '{name}', which this script does not make "
         "(accordion STUDY, accordion seeds, ci LOG, compute-per-step, gravac VARIANT..., model-check [RUN], "
         "model-check-fits RUN, model-check-medians [RUN], planner MODEL, quickstart, time-to-accuracy LINK MODEL, "
         "auto-predictions, auto-overhead, fsdp LINK)")


def tables_of(doc, studies):
    """The document's lines with every marked table recomputed, the tables' names and those that differ."""
    try:
        with open(doc, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except OSError as e:
        fail(f"{doc}: {e.strerror}")
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
            fail(f"{doc}: the table '{name}' has no '{END}' line after it")
        if any(BEGIN.match(line) for line in lines[i:end]):
            fail(f"{doc}: the table '{name}' holds another table's first line before its end")
        table = recompute(name, studies, doc).rstrip("\n").split("\n")
        names.append(name)
        if lines[i:end] != table:
            differ.append(name)
        out += table
        i = end
    if not names:
        fail(f"{doc}: no tables marked '<!-- table: NAME -->'")
    return out, names, differ


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 where a table differs")
    parser.add_argument("--plots", action="store_true", help="also draw the time-to-accuracy curves")
    parser.add_argument("--doc", action="append", help="a document with marked tables (again for more; "
                        "default docs/results.md, docs/benchmarks.md and README.md)")
    parser.add_argument("--data", default=os.path.join(TREE, "docs", "results"),
                        help="the studies' raw data (default docs/results)")
    parser.add_argument("--benchmarks", default=os.path.join(TREE, "docs", "benchmarks"),
                        help="the benchmarks' raw data (default docs/benchmarks)")
    args = parser.parse_args()
    if args.check and args.plots:
        fail("--check writes nothing; leave out --plots")
    docs = args.doc or [os.path.join(TREE, "docs", name) for name in ("results.md", "benchmarks.md")] + [
        os.path.join(TREE, "README.md")]
    studies = Studies(args.data, args.benchmarks)
    made = [(doc, *tables_of(doc, studies)) for doc in docs]
    names = [name for _, _, n, _ in made for name in n]
    differ = [(doc, name) for doc, _, _, d in made for name in d]
    if args.check:
        for doc, name in differ:
            print(f"results-tables.py: {doc}: the table '{name}' differs from its data; "
                  "run scripts/results-tables.py to rewrite it", file=sys.stderr)
        print(f"results-tables.py: {len(names) - len(differ)} of {len(names)} tables match their data")
        sys.exit(1 if differ else 0)
    for doc, out, _, d in made:
        if d:
            with open(doc + ".tmp", "w", encoding="utf-8") as f:
                f.write("\n".join(out))
            os.replace(doc + ".tmp", doc)
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
