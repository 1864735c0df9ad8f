#!/usr/bin/python3
"""The PyTorch side of scripts/bench-compress.sh, on one thread.

    bench_compress_reference.py FLAT.h5 --reps N

Times torch.topk on the gradient snapshot stored in FLAT.h5 (the data compress-bench
reads), and PowerSGD rank 2 over ResNet-18's parameter shapes written with PyTorch
operations (powerSGD_hook's math for one worker: error feedback, warm-started Q
orthogonalized again, P = M Q, P orthogonalized, Q = M^T P, M ~ P Q^T, new error).
Prints JSON: seconds as {"min", "median"}.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import h5py
import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize, _should_compress

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from synth_grads import resnet18_cifar  # noqa: E402  (the same names and shapes as compress-bench's preset)


def timed(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"min": min(times), "median": statistics.median(times)}


class PowerSGD:
    """One worker's PowerSGD step in torch operations, as powerSGD_hook computes it."""

    def __init__(self, shapes, rank):
        gen = torch.Generator().manual_seed(0)
        self.items = []
        for shape in shapes:
            rows = shape[0]
            cols = math.prod(shape) // rows
            r = min(rows, cols, rank)
            compress = len(shape) > 1 and _should_compress(rows, cols, r, 2)[0]
            q = torch.randn(1, cols, r, generator=gen) if compress else None
            if compress:
                _orthogonalize(q)
            self.items.append((rows, cols, compress, torch.zeros(shape), q))

    def step(self, grads):
        out = []
        for g, (rows, cols, compress, error, q) in zip(grads, self.items):
            error.add_(g)  # the input plus the error memory
            if not compress:
                out.append(error.clone())
                error.zero_()
                continue
            m = error.view(1, rows, cols)
            _orthogonalize(q)
            p = torch.bmm(m, q)
            _orthogonalize(p)
            torch.bmm(m.transpose(1, 2), p, out=q)
            approx = torch.bmm(p, q.transpose(1, 2))
            error.sub_(approx.view_as(error))
            out.append(approx.view_as(g))
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("flat")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--fraction", type=float, default=0.01)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with h5py.File(args.flat, "r") as f:
        group = f["snapshots"][list(f["snapshots"])[0]]
        x = torch.from_numpy(group[list(group)[0]][()]).reshape(-1)
    k = max(1, int(args.fraction * x.numel()))
    result = {"threads": torch.get_num_threads(), "values": x.numel(), "k": k}
    result["topk"] = timed(lambda: torch.topk(x.abs(), k, sorted=False), args.reps)

    shapes = [s for _, s in resnet18_cifar()]
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(s, generator=gen) for s in shapes]
    psgd = PowerSGD(shapes, 2)
    result["powersgd2"] = timed(lambda: psgd.step(grads), args.reps)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
