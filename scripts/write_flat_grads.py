"""Writes a gradient-statistics file (accordion.grads 1.0) holding one snapshot of
N standard-normal float32 values, the input both sides of the compressor benchmarks
read.  usage: write_flat_grads.py OUT.h5 N"""
import sys

import h5py
import numpy as np

path, n = sys.argv[1], int(sys.argv[2])
x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
with h5py.File(path, "w") as f:
    f.attrs["format"] = "accordion.grads"
    f.attrs["format_version"] = "1.0"
    f["parameters/name"] = np.array(["flat"], dtype=h5py.string_dtype())
    f["parameters/ndim"] = np.array([1], dtype=np.int32)
    f["parameters/shape"] = np.array([[n]], dtype=np.int64)
    f["parameters/numel"] = np.array([n], dtype=np.int64)
    f["epochs/norm"] = np.array([[float(np.linalg.norm(x))]])
    f["epochs/lr"] = np.array([0.1])
    f["epochs/steps"] = np.array([1], dtype=np.int64)
    g = f.create_group("snapshots/epoch_0")
    g.attrs["epoch"] = 0
    g.attrs["steps"] = 1
    g["flat"] = x
