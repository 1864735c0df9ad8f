#!/usr/bin/python3
"""References for tests/unit/test_exchange_parity.cpp, computed with PyTorch.

    compress_reference.py powersgd IN.h5 OUT_PREFIX   PyTorch's own powerSGD_hook on W Gloo ranks
    compress_reference.py topk IN.h5 OUT.h5           top-k with error feedback, in torch operations
    compress_reference.py qsgd IN.h5 OUT.h5           QSGD given the uniform numbers, in torch operations

The test writes IN.h5 (gradients per rank and step) and compares our results with OUT.
"""
import os
import sys
import tempfile

# The references run on CPU tensors. Where CUDA is present, powerSGD_hook calls
# torch.cuda.synchronize(device) on the bucket's device after decompressing
# (1.13 and 2.x alike), which refuses a CPU device: hide the GPUs before torch
# loads so that the hook takes its CPU path on every machine.
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd


def read_inputs(f, rank, step, count):
    return [torch.from_numpy(f[f"rank{rank}/step{step}/t{i}"][()]) for i in range(count)]


class Bucket:
    """What powerSGD_hook reads from a DDP GradBucket: one flat buffer and views into it."""

    def __init__(self, tensors):
        self._buffer = torch.cat([t.reshape(-1) for t in tensors])
        self._shapes = [t.shape for t in tensors]

    def buffer(self):
        return self._buffer

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        out, offset = [], 0
        for shape in self._shapes:
            n = int(np.prod(shape)) if len(shape) else 1
            out.append(self._buffer[offset:offset + n].view(shape))
            offset += n
        return out


def powersgd_rank(rank, world, store_path, in_path, out_prefix):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    with h5py.File(in_path, "r") as f, h5py.File(f"{out_prefix}{rank}.h5", "w") as out:
        for c in range(int(f.attrs["configs"])):
            group = f[f"config{c}"]
            count, steps = int(group.attrs["tensors"]), int(group.attrs["steps"])
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(group.attrs["rank"]),
                                       start_powerSGD_iter=2, random_seed=int(group.attrs["seed"]))
            state.start_powerSGD_iter = 0  # compress from the first step, as the exchange does
            for s in range(steps):
                bucket = Bucket(read_inputs(group, rank, s, count))
                result = psgd.powerSGD_hook(state, bucket).wait()
                out[f"config{c}/step{s}"] = result.numpy()
            out[f"config{c}/error"] = state.error_dict[0].numpy()
            out[f"config{c}/q"] = state.q_memory_dict[0].numpy()
            rng = np.random.RandomState(int(group.attrs["seed"]))
            out[f"config{c}/seeds"] = np.array([rng.randint(1_000_000_000) for _ in range(5)], dtype=np.int64)
    # Leave together, and without Gloo's destructors: one rank tearing down its
    # connections while the other still holds them can abort the process.
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def powersgd(in_path, out_prefix):
    with h5py.File(in_path, "r") as f:
        world = int(f.attrs["world"])
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(powersgd_rank, args=(world, os.path.join(tmp, "store"), in_path, out_prefix), nprocs=world)


def topk(in_path, out_path):
    with h5py.File(in_path, "r") as f, h5py.File(out_path, "w") as out:
        world, steps, count = (int(f.attrs[a]) for a in ("world", "steps", "tensors"))
        fraction = float(f.attrs["fraction"])
        errors = [[None] * count for _ in range(world)]
        for s in range(steps):
            for i in range(count):
                total = None
                for r in range(world):
                    g = torch.from_numpy(f[f"rank{r}/step{s}/t{i}"][()]).reshape(-1)
                    t = g if errors[r][i] is None else g + errors[r][i]
                    k = max(1, int(fraction * t.numel()))
                    idx = torch.topk(t.abs(), k).indices
                    e = t.clone()
                    e[idx] = 0
                    errors[r][i] = e
                    part = torch.zeros_like(t).index_add_(0, idx, t[idx])
                    total = part if total is None else total + part
                out[f"step{s}/t{i}"] = (total / world).numpy()
        for r in range(world):
            for i in range(count):
                out[f"rank{r}/error{i}"] = errors[r][i].numpy()


def qsgd(in_path, out_path):
    with h5py.File(in_path, "r") as f, h5py.File(out_path, "w") as out:
        world, levels = int(f.attrs["world"]), int(f.attrs["levels"])
        bucket = 128
        total = None
        for r in range(world):
            x = torch.from_numpy(f[f"rank{r}/x"][()])
            u = torch.from_numpy(f[f"rank{r}/u"][()])
            n = x.numel()
            padded = torch.nn.functional.pad(x, (0, (-n) % bucket)).reshape(-1, bucket)
            norms = torch.linalg.vector_norm(padded.double(), dim=1).float()
            scale = (torch.tensor(float(levels), dtype=torch.float32) / norms).repeat_interleave(bucket)[:n]
            scale = torch.where(torch.isinf(scale), torch.zeros_like(scale), scale)
            l = x.abs() * scale
            fl = torch.floor(l)
            q = torch.clamp(fl + (u < l - fl).float(), max=float(levels))
            codes = torch.where(x < 0, -q, q)
            step = (norms / levels).repeat_interleave(bucket)[:n]
            decoded = codes * step
            out[f"rank{r}/norms"] = norms.numpy()
            out[f"rank{r}/codes"] = codes.to(torch.int32).numpy()
            total = decoded if total is None else total + decoded
        out["mean"] = (total / world).numpy()


if __name__ == "__main__":
    mode, source, target = sys.argv[1:4]
    {"powersgd": powersgd, "topk": topk, "qsgd": qsgd}[mode](source, target)
