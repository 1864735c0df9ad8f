#!/usr/bin/env python3
"""Recomputes the tables of docs/results.md from the raw data under docs/results/,
so that a table and its data cannot drift apart.

Each recomputed table stands in docs/results.md between two lines,
    <!-- table: NAME -->
    <!-- end of table -->
where NAME says what it is made from; the tables are:
    time-to-accuracy LINK MODEL   the study of that link and model, both targets,
                                  from docs/results/time-to-accuracy-runs.csv

    scripts/results-tables.py            rewrite the tables in place
    scripts/results-tables.py --check    say which tables differ from their data (exit 1), write nothing
    scripts/results-tables.py --plots    also draw each study's accuracy against training time
                                         (docs/results/tta-MODEL-LINK.png; needs matplotlib)

The default test suite runs --check (e2e.results_tables). Exit 0 when every table
matches (or was written), 1 when one differs, 2 on a usage or data error."""
import argparse
import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)
BEGIN = re.compile(r"^<!-- table: (.+?) -->$")
END = "<!-- end of table -->"


def fail(message, code=2):
    print(f"results-tables.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def load_report():
    path = os.path.join(HERE, "experiments", "time_to_accuracy_report.py")
    spec = importlib.util.spec_from_file_location("time_to_accuracy_report", path)
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


def recompute(name, studies):
    words = name.split()
    if len(words) == 3 and words[0] == "time-to-accuracy":
        return studies.table(words[1], words[2])
    fail(f"docs/results.md: a table named '{name}', which this script does not make "
         "(time-to-accuracy LINK MODEL)")


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
    studies = TimeToAccuracy(args.data)
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
                studies.plot(words[1], words[2], path)
                print(f"results-tables.py: wrote {path}")


if __name__ == "__main__":
    main()
