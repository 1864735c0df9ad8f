#!/usr/bin/python3
"""PyTorch DDP's side of scripts/bench-train-dist.sh: data-parallel SGD steps of
the CIFAR ResNet-18 on synthetic data, one thread per rank, Gloo.

  --hook none       DDP as it comes (25 MiB buckets allreduced during backward)
  --hook powersgd   DDP with powerSGD_hook (error feedback, warm start) at --rank-k
  --hook accordion-none, --hook accordion-powersgd
                    the accordion package's compression_hook at level none, or
                    powersgd:--rank-k from the same step as powerSGD_hook
                    (scripts/bench-hook.sh; needs the package importable)

Without --rank it starts --world ranks on this machine; with --rank it is one rank
(the benchmark starts one per network namespace). Rank 0 prints one JSON line:
the mean and median seconds of the timed steps (each the slowest rank's).
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, inputs, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = None
        if stride != 1 or inputs != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(inputs, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


class ResNet18(nn.Module):
    """train-dist's resnet18: 3x3 stem, no max-pool, four stages of two blocks."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        stages, inputs = [], 64
        for index, planes in enumerate((64, 128, 256, 512)):
            stride = 1 if index == 0 else 2
            stages.append(nn.Sequential(Block(inputs, planes, stride), Block(planes, planes, 1)))
            inputs = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.linear = nn.Linear(512, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.linear(F.adaptive_avg_pool2d(x, 1).flatten(1))


def run(rank, args):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(ResNet18())
    if args.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank_k, start_powerSGD_iter=2)
        model.register_comm_hook(state, powersgd.powerSGD_hook)
    elif args.hook.startswith("accordion-"):
        import accordion

        level = "none" if args.hook == "accordion-none" else f"powersgd:{args.rank_k}"
        state = accordion.CompressionState(model, level, start_step=2)
        model.register_comm_hook(state, accordion.compression_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(args.seed + rank)
    images = torch.randn(args.batch * 4, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (args.batch * 4,), generator=generator)
    times = []
    for step in range(args.warmup + args.steps):
        first = (step % 4) * args.batch
        x, y = images[first : first + args.batch], labels[first : first + args.batch]
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            slowest = torch.tensor([elapsed])
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            times.append(slowest.item())
    if rank == 0:
        print(json.dumps({"hook": args.hook, "steps": len(times), "mean": statistics.mean(times),
                          "median": statistics.median(times), "min": min(times)}), flush=True)
    # Both ranks get here before either tears its connections down, and the group ends
    # while nothing holds it any more: a Gloo group still alive at the interpreter's
    # teardown, or one whose peer has gone, can abort the process.
    dist.barrier()
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # nor the interpreter's teardown, where Gloo's threads can abort the process


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hook", choices=("none", "powersgd", "accordion-none", "accordion-powersgd"), default="none")
    parser.add_argument("--rank-k", type=int, default=2, help="PowerSGD's matrix approximation rank")
    parser.add_argument("--batch", type=int, default=32, help="samples per step and rank")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--rank", type=int, default=None, help="run only this rank")
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=29511)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    if args.rank is not None:
        run(args.rank, args)
    else:
        mp.spawn(run, args=(args,), nprocs=args.world)


if __name__ == "__main__":
    main()
