#!/usr/bin/python3
"""Checks that two grad-dump runs ended the same: FULL.h5 (never stopped) and
PART.h5 (stopped and resumed), and their checkpoints FULL.ckpt.h5 and PART.ckpt.h5.

Both files complete; /parameters, /steps and /snapshots equal; every /epochs
column equal but the wall times; norms of EPOCHS epochs and PARAMETERS
parameters; both checkpoints after EPOCHS epochs and GLOBAL_STEP steps, with
equal CHECKPOINT_GROUPS.

  same_run.py FULL.h5 PART.h5 --epochs E --parameters P --global-step N [--checkpoint-groups model,optimizer]
"""
import argparse
import sys

import h5py
import numpy as np


def same(a, b, path):
    if isinstance(a, h5py.Dataset):
        x, y = a[()], b[()]
        assert x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), path
    else:
        assert sorted(a.keys()) == sorted(b.keys()), (path, sorted(a.keys()), sorted(b.keys()))
        for k in a.keys():
            same(a[k], b[k], path + "/" + k)


def checkpoint_of(path):
    return path[:-3] + ".ckpt.h5" if path.endswith(".h5") else path + ".ckpt.h5"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("full")
    ap.add_argument("part")
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--parameters", type=int, required=True)
    ap.add_argument("--global-step", type=int, required=True)
    ap.add_argument("--checkpoint-groups", default="model,optimizer")
    args = ap.parse_args()
    with h5py.File(args.full, "r") as full, h5py.File(args.part, "r") as part:
        assert full.attrs["complete"] == 1 and part.attrs["complete"] == 1
        for group in ("parameters", "steps", "snapshots"):
            same(full[group], part[group], group)
        assert sorted(full["epochs"].keys()) == sorted(part["epochs"].keys())
        for column in full["epochs"].keys():
            if column != "seconds":  # wall time differs
                same(full["epochs"][column], part["epochs"][column], "epochs/" + column)
        assert part["epochs/norm"].shape == (args.epochs, args.parameters), part["epochs/norm"].shape
    with h5py.File(checkpoint_of(args.full), "r") as full, h5py.File(checkpoint_of(args.part), "r") as part:
        assert full.attrs["epoch"] == part.attrs["epoch"] == args.epochs
        assert full.attrs["global_step"] == part.attrs["global_step"] == args.global_step
        for group in args.checkpoint_groups.split(","):
            same(full[group], part[group], group)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAIL: the runs differ: {e}", file=sys.stderr)
        sys.exit(1)
