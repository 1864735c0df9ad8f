#!/usr/bin/python3
"""PyTorch's side of scripts/gpu/bench-compress.sh, on one device.

Times, with the device synchronised before and after each repetition:
  powersgd2  PowerSGD rank 2 over ResNet-18's gradient shapes, batched as
             powerSGD_hook does with batch_tensors_with_same_shape: matrices of
             one shape share one bmm; error feedback, warm-started Q
             orthogonalised again, P = M Q, P orthogonalised, Q = M^T P,
             M ~ P Q^T, new error. Vectors (biases, batch norm) pass through.
  topk       torch.topk(|x|, 1% of x, sorted=False) over all of ResNet-18's
             gradient values (11,173,962 floats)
  copy       a device-to-device copy of the same bytes (copy_ between two buffers)

Prints one JSON line: seconds as {"min", "median"}, and copy_bandwidth in bytes/s.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _orthogonalize, _should_compress

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
from synth_grads import resnet18_cifar  # noqa: E402  (compress-bench's resnet18 preset)


def timed(fn, reps, device):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()  # warm-up: kernels loaded, memory cached
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return {"min": min(times), "median": statistics.median(times)}


class BatchedPowerSGD:
    """One worker's PowerSGD step; matrices of the same shape go through one bmm."""

    def __init__(self, shapes, rank, device):
        gen = torch.Generator().manual_seed(0)
        groups, vectors = {}, 0
        for shape in shapes:
            rows = shape[0]
            cols = math.prod(shape) // rows
            r = min(rows, cols, rank)
            if len(shape) > 1 and _should_compress(rows, cols, r, 2)[0]:
                groups.setdefault((rows, cols, r), 0)
                groups[(rows, cols, r)] += 1
            else:
                vectors += math.prod(shape)
        self.groups = []
        for (rows, cols, r), count in sorted(groups.items()):
            q = torch.randn(count, cols, r, generator=gen).to(device)
            _orthogonalize(q)
            self.groups.append((torch.zeros(count, rows, cols, device=device), q))
        self.vector_error = torch.zeros(vectors, device=device)
        self.grads = [torch.randn(e.shape, generator=gen).to(device) for e, _ in self.groups]
        self.vector_grads = torch.randn(vectors, generator=gen).to(device)

    def step(self):
        out = []
        for (error, q), g in zip(self.groups, self.grads):
            error.add_(g)
            _orthogonalize(q)
            p = torch.bmm(error, q)
            _orthogonalize(p)
            torch.bmm(error.transpose(1, 2), p, out=q)
            approx = torch.bmm(p, q.transpose(1, 2))
            error.sub_(approx)
            out.append(approx)
        self.vector_error.add_(self.vector_grads)
        out.append(self.vector_error.clone())
        self.vector_error.zero_()
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda or cpu (cpu: to check the script, not to time it)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--fraction", type=float, default=0.01, help="top-k's share of the values")
    ap.add_argument("--values", type=int, default=0, help="values for top-k and the copy; 0: ResNet-18's count")
    ap.add_argument("--shapes", choices=("resnet18", "tiny"), default="resnet18",
                    help="PowerSGD's gradient shapes; tiny: three small ones, to check the script quickly")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads; 0: PyTorch's default")
    args = ap.parse_args()
    if args.reps < 1 or not 0 < args.fraction <= 1 or args.values < 0:
        ap.error("--reps must be >= 1, --fraction in (0, 1], --values >= 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_compress_torch.py: error: --device cuda: PyTorch sees no CUDA device")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    resnet18 = [s for _, s in resnet18_cifar()]
    shapes = resnet18 if args.shapes == "resnet18" else [(16, 8, 3, 3), (16, 8, 3, 3), (16,)]
    n = args.values or sum(math.prod(s) for s in resnet18)
    x = torch.randn(n, generator=torch.Generator().manual_seed(1)).to(device)
    k = max(1, int(args.fraction * n))
    result = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "values": n, "k": k, "reps": args.reps, "shapes": args.shapes}
    result["topk"] = timed(lambda: torch.topk(x.abs(), k, sorted=False), args.reps, device)
    copy = torch.empty_like(x)
    result["copy"] = timed(lambda: copy.copy_(x), args.reps, device)
    result["copy_bandwidth"] = 4.0 * n / result["copy"]["min"]
    psgd = BatchedPowerSGD(shapes, 2, device)
    result["powersgd2"] = timed(psgd.step, args.reps, device)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
