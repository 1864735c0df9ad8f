#!/usr/bin/python3
"""h5py's side of the train-dist tests: writes schedules, and checks metrics
files and checkpoints with code that shares nothing with train-dist.

  schedule OUT --model-from METRICS --levels L0,L1,... [--epochs E]
        a compression schedule for METRICS's parameters: epoch e uses level
        L[(e + p) % len(L)] on matrix parameter p (none on the others)
  batch-schedule OUT --model-from METRICS --batch B0,B1,... --scale S0,S1,...
  data-sent METRICS          floats and bytes per epoch recomputed from the
                             levels, the shapes and the steps (docs/metrics.md)
  levels METRICS SCHEDULE    the levels of every epoch equal the schedule's
  grads-from METRICS OUT     a gradient-statistics file from an accordion run's
                             norms and learning rates, for regime-detect
  decisions METRICS SCHED    the online decisions equal regime-detect's
  same-run A.h5 B.h5 [--skip NAME,...]   two files hold equal data (HDF5 trees)
"""
import argparse
import math
import sys

import h5py
import numpy as np


def parameters(f):
    names = [n.decode() if isinstance(n, bytes) else n for n in f["parameters/name"][()]]
    shapes = [list(row[:ndim]) for row, ndim in zip(f["parameters/shape"][()], f["parameters/ndim"][()])]
    return names, shapes


def strings(dataset):
    return [s.decode() if isinstance(s, bytes) else s for s in dataset[()]]


def copy_parameters(source, target):
    for name in ("name", "ndim", "shape", "numel"):
        target["parameters/" + name] = source["parameters/" + name][()]


def header(f, kind):
    f.attrs["format"] = kind
    f.attrs["format_version"] = "1.0"
    f.attrs["producer"] = "train_dist_check.py"
    f.attrs["command_line"] = " ".join(sys.argv)


def bytes_per_step(level, shape):
    """What one worker sends for one tensor, per docs/metrics.md ("Data sent")."""
    n = int(np.prod(shape)) if shape else 1
    name, _, parameter = level.partition(":")
    if name == "none":
        return 4 * n
    if name == "fp16":
        return 2 * n
    if name == "powersgd":
        rank = int(parameter)
        if len(shape) >= 2:
            rows, cols = shape[0], n // shape[0]
            r = min(rank, rows, cols)
            if (rows + cols) * r * 2 < rows * cols:
                return 4 * (rows + cols) * r
        return 4 * n
    kept = min(n, max(1, math.floor(float(parameter or 0) * n)))
    if name == "topk" or name == "dgc":
        return 8 * kept
    if name == "randomk":
        return 4 * kept
    if name == "signsgd":
        return 4 * math.ceil(n / 32)
    raise SystemExit("no formula here for " + level)


def schedule(args):
    with h5py.File(args.model_from, "r") as m, h5py.File(args.out, "w") as f:
        header(f, "accordion.schedule")
        f.attrs["mode"] = "compression"
        copy_parameters(m, f)
        _, shapes = parameters(m)
        levels = args.levels.split(",")
        table = ["none"] + [l for l in dict.fromkeys(levels) if l != "none"]
        epochs = args.epochs
        level = np.zeros((epochs, len(shapes)), dtype=np.int32)
        for e in range(epochs):
            for p, shape in enumerate(shapes):
                if len(shape) >= 2:
                    level[e, p] = table.index(levels[(e + p) % len(levels)])
        f["levels"] = np.array(table, dtype=h5py.string_dtype())
        f["epochs/epoch"] = np.arange(epochs, dtype=np.int64)
        f["epochs/level"] = level
        f["epochs/critical"] = np.zeros(level.shape, dtype=np.uint8)
        f["epochs/ratio"] = np.zeros(level.shape)
        f["epochs/reason"] = np.zeros(level.shape, dtype=np.int8)


def batch_schedule(args):
    with h5py.File(args.model_from, "r") as m, h5py.File(args.out, "w") as f:
        header(f, "accordion.schedule")
        f.attrs["mode"] = "batch"
        copy_parameters(m, f)
        batch = [int(b) for b in args.batch.split(",")]
        shape = (len(batch), len(m["parameters/name"]))
        f["epochs/epoch"] = np.arange(len(batch), dtype=np.int64)
        f["epochs/batch_size"] = np.array(batch, dtype=np.int64)
        f["epochs/lr_scale"] = np.array([float(s) for s in args.scale.split(",")])
        f["epochs/critical"] = np.zeros(shape, dtype=np.uint8)
        f["epochs/ratio"] = np.zeros(shape)
        f["epochs/reason"] = np.zeros(shape, dtype=np.int8)


def data_sent(args):
    with h5py.File(args.metrics, "r") as f:
        assert f.attrs["format"] == "accordion.metrics"
        _, shapes = parameters(f)
        levels = strings(f["levels"])
        table, steps = f["epochs/level"][()], f["epochs/steps"][()]
        total = 0
        for e in range(len(steps)):
            step = sum(bytes_per_step(levels[l], shapes[p]) for p, l in enumerate(table[e]))
            total += step * steps[e]
            assert f["epochs/bytes_sent"][e] == step * steps[e], (e, f["epochs/bytes_sent"][e], step, steps[e])
            assert f["epochs/floats_sent"][e] == step * steps[e] / 4, e
            assert f["epochs/bytes_sent_total"][e] == total, e
            assert f["epochs/floats_sent_total"][e] == total / 4, e
        # Compute is the rest of the epoch's wall time (never below zero).
        seconds, compute = f["epochs/seconds"][()], f["epochs/compute_seconds"][()]
        parts = compute + f["epochs/compression_seconds"][()] + f["epochs/communication_seconds"][()]
        assert ((np.abs(parts - seconds) < 1e-6) | (compute == 0)).all(), (parts, seconds)
        assert np.allclose(f["epochs/compression_seconds"][()],
                           f["epochs/encode_seconds"][()] + f["epochs/decode_seconds"][()])
        # Every rank's communication time, rank 0's the column's.
        ranks = f["epochs/rank_communication_seconds"][()]
        assert ranks.shape == (len(steps), f.attrs["world_size"]), ranks.shape
        assert (ranks >= 0).all(), ranks
        assert (ranks[:, 0] == f["epochs/communication_seconds"][()]).all(), ranks
    print("data sent: %d bytes per worker over %d epochs" % (total, len(steps)))


def levels_match(args):
    with h5py.File(args.metrics, "r") as m, h5py.File(args.schedule, "r") as s:
        ours, theirs = strings(m["levels"]), strings(s["levels"])
        used = np.vectorize(lambda i: ours[i])(m["epochs/level"][()])
        table = s["epochs/level"][()]
        last = table.shape[0] - 1
        wanted = np.array([[theirs[table[min(e, last), p]] for p in range(table.shape[1])] for e in range(used.shape[0])])
        assert (used == wanted).all(), (used, wanted)


def grads_from(args):
    with h5py.File(args.metrics, "r") as m, h5py.File(args.out, "w") as f:
        header(f, "accordion.grads")
        copy_parameters(m, f)
        f["epochs/norm"] = m["epochs/norm"][()]
        f["epochs/lr"] = m["epochs/lr"][()]
        f["epochs/steps"] = m["epochs/steps"][()]


def decisions(args):
    with h5py.File(args.metrics, "r") as m, h5py.File(args.schedule, "r") as s:
        assert (m["epochs/critical"][()] == s["epochs/critical"][()]).all(), (m["epochs/critical"][()], s["epochs/critical"][()])
        assert (m["epochs/reason"][()] == s["epochs/reason"][()]).all()
        a, b = m["epochs/ratio"][()], s["epochs/ratio"][()]
        assert ((a == b) | (np.isnan(a) & np.isnan(b))).all()
    levels_match(argparse.Namespace(metrics=args.metrics, schedule=args.schedule))


def same_run(args):
    skip = set(args.skip.split(",")) if args.skip else set()

    def walk(a, b, path):
        if isinstance(a, h5py.Dataset):
            x, y = a[()], b[()]
            equal = x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
            assert equal, "%s differs" % path
            return
        assert sorted(a.keys()) == sorted(b.keys()), (path, sorted(a.keys()), sorted(b.keys()))
        for key in a.keys():
            if key not in skip:
                walk(a[key], b[key], path + "/" + key)

    with h5py.File(args.a, "r") as a, h5py.File(args.b, "r") as b:
        walk(a, b, "")


# Each command: its function and its arguments (name, options).
COMMANDS = {
    "schedule": (schedule, [("out", {}), ("--model-from", {"required": True}), ("--levels", {"required": True}),
                            ("--epochs", {"type": int, "default": 4})]),
    "batch-schedule": (batch_schedule, [("out", {}), ("--model-from", {"required": True}),
                                        ("--batch", {"required": True}), ("--scale", {"required": True})]),
    "data-sent": (data_sent, [("metrics", {})]),
    "levels": (levels_match, [("metrics", {}), ("schedule", {})]),
    "grads-from": (grads_from, [("metrics", {}), ("out", {})]),
    "decisions": (decisions, [("metrics", {}), ("schedule", {})]),
    "same-run": (same_run, [("a", {}), ("b", {}), ("--skip", {"default": ""})]),
}


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (run, arguments) in COMMANDS.items():
        p = sub.add_parser(name)
        for argument, options in arguments:
            p.add_argument(argument, **options)
        p.set_defaults(run=run)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
