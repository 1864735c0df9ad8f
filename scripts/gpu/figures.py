#!/usr/bin/python3
"""Writes the GPU figures as markdown tables (the layout of docs/benchmarks.md's
GPU section) from what scripts/gpu/run-all.sh left in OUTDIR:

  steps.tsv        one line per step of run-all.sh: name, status, seconds, log
  train.jsonl      scripts/gpu/bench-train.sh's measurements
  compress.jsonl   scripts/gpu/bench-compress.sh's measurements

    figures.py OUTDIR        prints the tables; missing files give empty tables

A measurement that failed or is missing shows as such, with its goal unmet.
"""
import json
import os
import sys


def read_jsonl(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        rows.append({"error": "unreadable line: " + line[:80]})
    return rows


def verdict(value, goal, at_least):
    if value is None:
        return "not measured"
    return "ok" if (value >= goal if at_least else value <= goal) else "MISSED"


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def steps_table(out):
    lines = ["| step | status | seconds | log |", "|---|---|---|---|"]
    path = os.path.join(out, "steps.tsv")
    if os.path.exists(path):
        for line in open(path):
            parts = line.rstrip("\n").split("\t")
            if len(parts) == 4:
                lines.append("| " + " | ".join(p.replace("|", "\\|") for p in parts) + " |")
    return lines


def train_table(rows):
    lines = ["| batch | run | images/s | ratio | against | goal | verdict |", "|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        if r.get("bench") == "train" and "batch" in r:
            by[(r["batch"], r["run"])] = r
    goals = [("grad-dump", "PyTorch eager", 1.0), ("train-dist --compress none", "PyTorch eager", 1.0),
             ("train-dist --compress powersgd:2", "train-dist --compress none", 0.85),
             ("train-dist --compress powersgd:2, CUDA kernels (ACC_CUDA_KERNELS=all)", "train-dist --compress none",
              0.85)]
    for batch in sorted({b for b, _ in by}):
        def rate(run):
            r = by.get((batch, run))
            return r.get("images_per_second") if r else None

        base = by.get((batch, "PyTorch eager"))
        lines.append(f"| {batch} | PyTorch eager | {fmt(rate('PyTorch eager'), ',.0f')} | | | | "
                     f"{base.get('error', '') if base else 'not measured'} |")
        for run, against, goal in goals:
            r = by.get((batch, run))
            ours, ref = rate(run), rate(against)
            ratio = ours / ref if ours and ref else None
            note = verdict(ratio, goal, True)
            if r and "error" in r:
                note = r["error"]
            lines.append(f"| {batch} | {run} | {fmt(ours, ',.0f')} | {fmt(ratio, '.2f')} | {against} | "
                         f">= {goal} | {note} |")
    return lines


def compress_table(rows):
    lines = ["| measurement | toolkit | PyTorch / copy | ratio | goal | verdict |", "|---|---|---|---|---|---|"]
    sides = {r.get("side"): r for r in rows if r.get("bench") == "compress"}
    results = {item["compressor"]: item for item in sides.get("flat", {}).get("results", [])}
    shaped = {item["compressor"]: item for item in sides.get("shapes", {}).get("results", [])}
    ref = sides.get("pytorch", {})

    def seconds(item, key):
        return item[key]["min"] if item and key in item else None

    def ms(value):
        return "-" if value is None else f"{1e3 * value:.3f} ms"

    errors = "; ".join(f"{s}: {r['error']}" for s, r in sides.items() if "error" in r)
    def both(item):
        return seconds(item, "encode_seconds") + seconds(item, "decode_seconds") if item and "decode_seconds" in item \
            else None

    theirs = seconds(ref, "powersgd2")
    shapes = "ResNet-18" if ref.get("shapes", "resnet18") == "resnet18" else ref["shapes"]
    # PowerSGD, and again with its rounds by the CUDA kernels not yet measured.
    kernels_shaped = {item["compressor"]: item for item in sides.get("kernels-shapes", {}).get("results", [])}
    for measured, how in ((shaped, ""), (kernels_shaped, ", CUDA kernels (ACC_CUDA_KERNELS=all)")):
        ours = both(measured.get("powersgd:2"))
        if measured is kernels_shaped and not ours:
            continue
        ratio = ours / theirs if ours and theirs else None
        lines.append(f"| powersgd:2 encode+decode, {shapes} shapes{how} | {ms(ours)} | {ms(theirs)} | "
                     f"{fmt(ratio, '.3f')} | <= 0.5 | {verdict(ratio, 0.5, False)} |")
    # Top-k and DGC over the model's tensors, where their batches act (no goal of their own),
    # and again with top-k's CUDA kernels.
    for name in ("topk:0.01", "dgc:0.01"):
        for measured, how in ((shaped, ""), (kernels_shaped, ", CUDA kernels (ACC_CUDA_KERNELS=all)")):
            ours = both(measured.get(name))
            if ours:
                lines.append(f"| {name} encode+decode, {shapes} shapes{how} | {ms(ours)} | - | - | - | - |")
    theirs = seconds(ref, "topk")
    values = ref.get("values") or sides.get("flat", {}).get("values")
    what = f"{values:,} floats" if values else "all values"
    kernels = {item["compressor"]: item for item in sides.get("kernels", {}).get("results", [])}
    for measured, how in ((results, ""), (kernels, ", CUDA kernels (ACC_CUDA_KERNELS=all)")):
        ours = seconds(measured.get("topk:0.01"), "encode_seconds")
        ratio = ours / theirs if ours and theirs else None
        lines.append(f"| topk:0.01 encode, {what}{how} | {ms(ours)} | {ms(theirs)} (torch.topk) | "
                     f"{fmt(ratio, '.3f')} | <= 1.0 | {verdict(ratio, 1.0, False)} |")
    copy = ref.get("copy_bandwidth")
    gradient = 4.0 * values if values else None
    aten = {item["compressor"]: item for item in sides.get("aten", {}).get("results", [])}
    for name in ("signsgd", "fp16", "qsgd:127"):
        e = seconds(results.get(name), "encode_seconds")
        rate = gradient / e if e and gradient else None
        share = rate / copy if rate and copy else None
        lines.append(f"| {name} encode | {fmt(rate and rate / 1e9, '.1f')} GB/s | "
                     f"{fmt(copy and copy / 1e9, '.1f')} GB/s (copy) | {fmt(share and 100 * share, '.0f')}% | "
                     f">= 50% | {verdict(share, 0.5, True)} |")
        # The ATen operations the CUDA kernels replace, for comparison (no goal of their own).
        e = seconds(aten.get(name), "encode_seconds")
        if e and gradient:
            rate = gradient / e
            share = rate / copy if copy else None
            lines.append(f"| {name} encode, ATen operations (ACC_CUDA_KERNELS=0) | {fmt(rate / 1e9, '.1f')} GB/s | "
                         f"{fmt(copy and copy / 1e9, '.1f')} GB/s (copy) | {fmt(share and 100 * share, '.0f')}% | "
                         f"- | - |")
    if errors:
        lines.append("")
        lines.append("Failed: " + errors)
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: figures.py OUTDIR")
    out = sys.argv[1]
    train = read_jsonl(os.path.join(out, "train.jsonl"))
    compress = read_jsonl(os.path.join(out, "compress.jsonl"))
    devices = sorted({r["device"] for r in train + compress if isinstance(r.get("device"), str)})
    text = ["# GPU figures", "", "Device: " + (", ".join(devices) or "unknown"), "", "## Steps", ""]
    text += steps_table(out)
    text += ["", "## Training throughput: ResNet-18, CIFAR shape, synthetic data, one GPU", ""]
    text += train_table(train)
    text += ["", "## Compressors over ResNet-18's gradients (fastest of the repetitions)", ""]
    text += compress_table(compress)
    # The benchmarks' traces (scripts/trace-summary.py's tables), a heading level down.
    for name, title in (("traces-train.md", "Where a training step's time goes (train-dist --trace: steps 10 to 19 "
                                            "of the first epoch, which the figures leave out)"),
                        ("traces-compress.md", "Where a compressor's step goes (compress-bench --trace, 3 steps each)")):
        path = os.path.join(out, name)
        if os.path.exists(path):
            text += ["", "## " + title, ""]
            text += [("#" + line) if line.startswith("#") else line for line in open(path).read().splitlines()]
    print("\n".join(text))


if __name__ == "__main__":
    main()
