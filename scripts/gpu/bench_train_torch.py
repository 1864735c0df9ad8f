#!/usr/bin/python3
"""PyTorch eager's side of scripts/gpu/bench-train.sh: SGD steps of the CIFAR
ResNet-18 (scripts/bench_train_dist_ddp.py's definition, the toolkit's resnet18)
on synthetic CIFAR-shaped data, on one device.

Each step is what a plain training loop does: zero_grad, forward, cross-entropy,
backward, torch.optim.SGD (lr 0.1, momentum 0.9, weight decay 1e-4; PyTorch's
default foreach implementation), then loss.item() and the correct count's
.item() (two host synchronisations a step).

  --data device   the whole synthetic set lives on the device (default)
  --data host     batches come from pinned host memory with non_blocking copies

Prints one JSON line: images per second over the timed steps, and seconds per step.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from bench_train_dist_ddp import ResNet18  # noqa: E402  (the same model as train-dist's resnet18)


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda", help="cuda or cpu (cpu: to check the script, not to time it)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=100, help="timed steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    ap.add_argument("--data", choices=("device", "host"), default="device")
    ap.add_argument("--batches", type=int, default=8, help="distinct batches of synthetic data, used in turn")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=0, help="CPU threads; 0: PyTorch's default")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1 or args.warmup < 0 or args.batches < 1:
        ap.error("--batch, --steps and --batches must be >= 1, --warmup >= 0")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench_train_torch.py: error: --device cuda: PyTorch sees no CUDA device")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False  # as LibTorch's default, which the toolkit keeps

    model = ResNet18().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(args.seed)
    images = torch.randn(args.batches * args.batch, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (args.batches * args.batch,), generator=generator)
    if args.data == "device":
        images, labels = images.to(device), labels.to(device)
    elif device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()

    def step(index):
        first = (index % args.batches) * args.batch
        x = images[first : first + args.batch].to(device, non_blocking=True)
        y = labels[first : first + args.batch].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        return loss.item(), (logits.detach().argmax(1) == y).sum().item()

    model.train()
    for index in range(args.warmup):
        step(index)
    synchronize(device)
    start = time.perf_counter()
    for index in range(args.steps):
        loss, _ = step(args.warmup + index)
    synchronize(device)
    seconds = time.perf_counter() - start
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(json.dumps({"side": "pytorch-eager", "device": name, "torch": torch.__version__, "batch": args.batch,
                      "data": args.data, "steps": args.steps, "seconds_per_step": seconds / args.steps,
                      "images_per_second": args.steps * args.batch / seconds, "last_loss": loss}), flush=True)


if __name__ == "__main__":
    main()
