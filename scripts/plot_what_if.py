#!/usr/bin/python3
"""Draw compress-bench --what-if's CSV: predicted speedup over uncompressed DDP against the
link's bandwidth, one line per world size, one panel per model and plan; and print the
break-even bandwidths as a Markdown table.

    compress-bench --what-if --shapes resnet18 --compute-ms 30 --csv > r18.csv
    scripts/plot_what_if.py resnet18=r18.csv gpt2-medium=gpt2.csv -o what-if.png
    scripts/plot_what_if.py docs/results/what-if.csv --table      # a CSV with a model column

Each input is LABEL=CSV (compress-bench's CSV, the label naming the model) or a CSV with a
`model` column (as docs/results/what-if.csv, which scripts/what-if-figure.sh writes).
--plans and --worlds choose what to draw (default: every plan, and up to five world sizes
spread over those in the file). A speedup above 1 is where compression pays; a line crosses 1
at the break-even bandwidth. Exit 1 on a file that cannot be read or holds no what-if rows."""
import argparse
import csv
import math
import os
import sys

COLUMNS = ("plan", "world_size", "bandwidth", "speedup", "break_even_bandwidth", "pays_at_low_bandwidth")


def read(inputs):
    """Rows as dicts with the model's label, in the order read."""
    rows = []
    for item in inputs:
        label, path = (item.split("=", 1) if "=" in item and not os.path.exists(item) else (None, item))
        try:
            with open(path, newline="") as f:
                found = list(csv.DictReader(f))
        except OSError as e:
            raise SystemExit(f"plot_what_if.py: error: {path}: {e.strerror}")
        if not found or any(c not in found[0] for c in COLUMNS):
            raise SystemExit(f"plot_what_if.py: error: {path}: not compress-bench --what-if's CSV "
                             f"(it needs the columns {', '.join(COLUMNS)})")
        for r in found:
            if label is not None:
                r["model"] = label
            elif "model" not in r:
                raise SystemExit(f"plot_what_if.py: error: {path}: has no model column; give it as LABEL={path}")
            rows.append(r)
    return rows


def ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def pays_text(rows_of_world):
    """Where the plan pays, from the CSV's first crossing (as compress-bench's table, in Gbit/s)."""
    r = rows_of_world[0]
    low = r["pays_at_low_bandwidth"] == "1"
    if not r["break_even_bandwidth"]:
        return "always" if low else "never"
    g = float(r["break_even_bandwidth"]) * 8 / 1e9
    return ("< " if low else "> ") + f"{g:.3g}"


def table(rows, worlds):
    """Markdown: break-even bandwidth per model and plan (rows) and world size (columns)."""
    out = ["| model | plan | " + " | ".join(f"W={w}" for w in worlds) + " |",
           "|---|---|" + "---:|" * len(worlds)]
    for model in ordered(r["model"] for r in rows):
        for plan in ordered(r["plan"] for r in rows if r["model"] == model):
            cells = []
            for w in worlds:
                mine = [r for r in rows if r["model"] == model and r["plan"] == plan and int(r["world_size"]) == w]
                cells.append(pays_text(mine) if mine else "")
            out.append(f"| {model} | {plan} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(rows, plans, worlds, output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = ordered(r["model"] for r in rows)
    fig, axes = plt.subplots(len(models), len(plans), figsize=(3.6 * len(plans), 3.0 * len(models)),
                             squeeze=False, sharex=True, sharey=True)
    colours = plt.cm.viridis([i / max(1, len(worlds) - 1) for i in range(len(worlds))])
    for i, model in enumerate(models):
        for j, plan in enumerate(plans):
            ax = axes[i][j]
            for w, colour in zip(worlds, colours):
                mine = sorted((float(r["bandwidth"]) * 8 / 1e9, float(r["speedup"])) for r in rows
                              if r["model"] == model and r["plan"] == plan and int(r["world_size"]) == w)
                if mine:
                    ax.plot([m[0] for m in mine], [m[1] for m in mine], color=colour, marker=".", label=f"W={w}")
            ax.axhline(1, color="grey", linewidth=0.8, linestyle="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{model}: {plan}", fontsize=9)
            if i == len(models) - 1:
                ax.set_xlabel("link bandwidth (Gbit/s)")
            if j == 0:
                ax.set_ylabel("predicted speedup over DDP")
            ax.grid(True, which="major", linewidth=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(output, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="plot_what_if.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="LABEL=CSV|CSV")
    parser.add_argument("-o", "--output", help="the PNG to write")
    parser.add_argument("--table", action="store_true", help="print the break-even bandwidths as Markdown")
    parser.add_argument("--plans", help="plans to draw, comma-separated [all]")
    parser.add_argument("--worlds", help="world sizes to draw, comma-separated [five of the file's]")
    args = parser.parse_args(argv)
    if not args.output and not args.table:
        parser.error("give -o PNG, --table or both")
    rows = read(args.inputs)
    all_worlds = sorted({int(r["world_size"]) for r in rows})
    plans = args.plans.split(",") if args.plans else ordered(r["plan"] for r in rows)
    if args.worlds:
        worlds = [int(w) for w in args.worlds.split(",")]
    elif len(all_worlds) <= 5:
        worlds = all_worlds
    else:
        worlds = [all_worlds[round(k * (len(all_worlds) - 1) / 4)] for k in range(5)]
    missing = [p for p in plans if p not in {r["plan"] for r in rows}]
    if missing:
        raise SystemExit(f"plot_what_if.py: error: --plans: no rows of {', '.join(missing)}")
    if args.table:
        print(table(rows, all_worlds))
    if args.output:
        plot(rows, plans, worlds, args.output)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
