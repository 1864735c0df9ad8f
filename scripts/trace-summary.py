#!/usr/bin/env python3
"""Where a step's time goes, from a trace written by --trace (compress-bench, train-dist, grad-dump).

    scripts/trace-summary.py TRACE.json [--top N]

For each compressor (the trace's ranges, one per compressor and world size, each
holding its timed steps) or window of training steps (train-dist and grad-dump
--trace; with the time of each part of a step), per step: the time from the step's start to its end, the
operations the host issued (ATen operations called by the toolkit, not the ones they
call), and on a GPU the device's busy time (kernels, copies and memsets, overlaps
counted once) with the activities that took most of it. Where the device is idle for
much of a step, the host's queueing sets its time; where it is busy, the kernels do.
Prints Markdown. Standard library only.
"""
import argparse
import json
import sys
from collections import defaultdict


def load(path):
    try:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"trace-summary.py: error: {path}: not a trace written by --trace ({e})")
    return [e for e in events if e.get("ph") == "X" and "ts" in e and "dur" in e]


def inside(event, start, end):
    # LibTorch 1.13 gives whole microseconds: a range may end a microsecond after its parent.
    return start <= event["ts"] and event["ts"] + event["dur"] <= end + 1.0


def busy(intervals):
    """Microseconds covered by the intervals, overlaps counted once."""
    total, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total


def top_level(operations):
    """The operations not nested in another operation of the same host thread."""
    out = []
    by_thread = defaultdict(list)
    for e in operations:
        by_thread[e.get("tid")].append(e)
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        reach = None
        for e in ops:
            if reach is None or e["ts"] >= reach:
                out.append(e)
                reach = e["ts"] + e["dur"]
    return out


def summarize(events, top):
    ranges = sorted((e for e in events if e.get("cat") == "range"), key=lambda e: e["ts"])
    steps = [e for e in ranges if e["name"] == "step"]
    # A compressor's steps (compress-bench), or a window of training steps (--trace of
    # train-dist and grad-dump): the ranges that hold steps. The ranges inside a step
    # are its parts.
    rows = [e for e in ranges if e["name"] != "step" and any(inside(s, e["ts"], e["ts"] + e["dur"]) for s in steps)]
    others = [e for e in ranges if e["name"] != "step" and e not in rows]
    device = [e for e in events if e.get("cat") == "device"]
    operations = top_level([e for e in events if e.get("cat") == "operation"])
    lines = []
    if not rows:
        return ["No steps in this trace (no range holds ranges named step)."]
    for row in rows:
        start, end = row["ts"], row["ts"] + row["dur"]
        mine = [s for s in steps if inside(s, start, end)]
        n = len(mine) or 1
        span = sum(s["dur"] for s in mine) / n
        ops = [e for e in operations if any(inside(e, s["ts"], s["ts"] + s["dur"]) for s in mine)]
        acts = [e for e in device if start <= e["ts"] <= end]
        lines.append(f"### {row['name']} ({len(mine)} step{'' if len(mine) == 1 else 's'})")
        lines.append("")
        text = f"Per step: {span / 1e3:.3f} ms from start to end, {len(ops) / n:.0f} host operations"
        if acts:
            on = busy((e["ts"], e["ts"] + e["dur"]) for e in acts) / n
            text += (f", device busy {on / 1e3:.3f} ms ({100 * on / span if span else 0:.0f}%) in "
                     f"{len(acts) / n:.0f} activities")
        lines.append(text + ".")
        parts = defaultdict(float)
        for e in others:
            if any(inside(e, s["ts"], s["ts"] + s["dur"]) for s in mine):
                parts[e["name"]] += e["dur"]
        if parts:
            lines.append("Parts of a step: " + ", ".join(f"{name} {t / n / 1e3:.3f} ms" for name, t in parts.items()) + ".")
        lines.append("")
        what, items = ("device activity", acts) if acts else ("host operation", ops)
        totals, counts = defaultdict(float), defaultdict(int)
        for e in items:
            totals[e["name"]] += e["dur"]
            counts[e["name"]] += 1
        whole = sum(totals.values()) or 1.0
        lines.append(f"| {what} | per step | time per step | share |")
        lines.append("|---|---|---|---|")
        for name in sorted(totals, key=lambda k: -totals[k])[:top]:
            short = name if len(name) <= 80 else name[:77] + "..."
            lines.append(f"| `{short}` | {counts[name] / n:.1f} | {totals[name] / n:.1f} us | "
                         f"{100 * totals[name] / whole:.0f}% |")
        lines.append("")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="a trace written by --trace (compress-bench, train-dist, grad-dump)")
    ap.add_argument("--top", type=int, default=8, help="activities (or operations) listed per compressor [8]")
    args = ap.parse_args()
    if args.top < 1:
        ap.error("--top: must be at least 1")
    print("\n".join(summarize(load(args.trace), args.top)))


if __name__ == "__main__":
    main()
