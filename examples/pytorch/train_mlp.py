"""A plain PyTorch DDP training script with Accordion's recorder added: an MLP on
Fashion-MNIST (Debian's dataset-fashion-mnist; no torchvision). The lines marked
`# accordion` are all it takes to write grads.h5 for regime-detect.

    python3 -m torch.distributed.run --nproc_per_node 2 examples/pytorch/train_mlp.py -o grads.h5
    regime-detect grads.h5 --interval 2 -o sched.h5

With --batch-schedule SCHED.h5 (regime-detect --mode batch) each epoch takes its
batch size and learning rate from the schedule. With --compress SPEC (e.g.
powersgd:2), --schedule SCHED.h5 (a compression schedule), --accordion (decided
online) or --gravac FAMILY (GraVAC: a factor chosen every step) DDP exchanges the
gradients through accordion.compression_hook (PyTorch 2.x), at that level or at
each epoch's or step's (--warmup-steps N: the first N steps uncompressed, the
hook's start_step). --resume continues a stopped run from its
last checkpoint (OUTPUT.ckpt.pt, and each rank's OUTPUT.hook.rankR.pt), and its
grads.h5 with it.
Every rank uses one thread; the model is the toolkit's `mlp` (fc1, fc2, fc3), so
its schedules also fit train-dist --model mlp.
"""

import argparse
import collections
import gc
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import accordion  # accordion

DATA = "/usr/share/datasets/fashion-mnist"


class MLP(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split, limit):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(DATA, f"{prefix}-images-idx3-ubyte.gz"))[:limit]
    labels = read_idx(os.path.join(DATA, f"{prefix}-labels-idx1-ubyte.gz"))[:limit]
    x = (torch.from_numpy(images.astype(np.float32)) / 255 - 0.2860) / 0.3530
    return x, torch.from_numpy(labels.astype(np.int64))


def learning_rate(args, epoch):
    return args.lr * (0.1 if epoch >= args.lr_decay_epoch else 1.0)


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        out = model(x)
        loss, accuracy = F.cross_entropy(out, y).item(), (out.argmax(1) == y).float().mean().item()
    model.train()
    return loss, accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="grads.h5", help="gradient-statistics file (default grads.h5)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank (default 64)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--lr-decay-epoch", type=int, default=6, help="lr x 0.1 from this epoch (default 6)")
    parser.add_argument("--train-samples", type=int, default=12000, help="first N training images (default 12000)")
    parser.add_argument("--test-samples", type=int, default=2000)
    parser.add_argument("--batch-schedule", help="a batch schedule from regime-detect --mode batch")
    parser.add_argument("--compress", help="compress every matrix's gradient at this level, e.g. powersgd:2")
    parser.add_argument("--schedule", help="a compression schedule from regime-detect: each epoch's levels")
    parser.add_argument("--warmup-steps", type=int, default=0,
                        help="with --compress, --schedule, --accordion or --gravac: send the first N steps "
                             "uncompressed (the hook's start_step; default 0)")
    parser.add_argument("--accordion", action="store_true",
                        help="decide the levels online (powersgd:2 critical, powersgd:1 elsewhere, a decision "
                             "every 2 epochs)")
    parser.add_argument("--gravac", choices=["topk", "dgc", "randomk", "powersgd"],
                        help="GraVAC over this compressor family (epsilon 0.7, a window of 50 steps)")
    parser.add_argument("--resume", action="store_true", help="continue from OUTPUT.ckpt.pt")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    torch.set_num_threads(1)
    if "RANK" not in os.environ:  # started without torchrun: one process
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    train_x, train_y = load("train", args.train_samples)
    test_x, test_y = load("test", args.test_samples)
    model = DistributedDataParallel(MLP())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    checkpoint = os.path.splitext(args.output)[0] + ".ckpt.pt"
    hook_checkpoint = os.path.splitext(args.output)[0] + f".hook.rank{rank}.pt"
    # accordion: with --compress or --schedule, the gradients go through the toolkit's compressors
    compression = None
    if args.accordion:
        compression = accordion.CompressionState(model, accordion=True, interval=2,  # accordion
                                                 start_step=args.warmup_steps)
    elif args.gravac:
        gravac = accordion.Gravac(args.gravac, window=50, batch_size=args.batch_size)  # accordion
        compression = accordion.CompressionState(model, gravac=gravac, start_step=args.warmup_steps)  # accordion
    elif args.compress or args.schedule:
        compression = accordion.CompressionState(model, args.compress, schedule=args.schedule,  # accordion
                                                 start_step=args.warmup_steps)
    start = 0
    if args.resume:
        state = torch.load(checkpoint)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        if compression is not None:
            compression.load_state_dict(torch.load(hook_checkpoint))  # accordion: error memories, PowerSGD's Q

    # accordion: record rank 0's local gradients inside DDP's communication hook, into args.output
    recorder = accordion.GradientRecorder(model, args.output, start_epoch=start, model_name="mlp",  # accordion
                                          dataset="fashion-mnist", batch_size=args.batch_size, seed=args.seed,
                                          hook=accordion.compression_hook if compression is not None else None,
                                          hook_state=compression)
    schedule = accordion.load_schedule(args.batch_schedule, model) if args.batch_schedule else None  # accordion

    for epoch in range(start, args.epochs):
        lr, batch_size = learning_rate(args, epoch), args.batch_size
        if schedule is not None:
            plan = schedule.batch(epoch, lr)  # accordion: this epoch's batch size (per rank) and lr
            lr, batch_size = plan.lr, plan.batch_size
        for group in optimizer.param_groups:
            group["lr"] = lr
        if compression is not None:
            compression.set_epoch(epoch, lr=lr)  # accordion: this epoch's levels
            sent_before = compression.floats_sent
        # Each rank takes every world-th sample of the epoch's shuffle.
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed + epoch))
        mine = order[rank::world]
        started, losses, correct = time.perf_counter(), [], 0
        for first in range(0, len(mine) - batch_size + 1, batch_size):
            index = mine[first:first + batch_size]
            out = model(train_x[index])
            loss = F.cross_entropy(out, train_y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += (out.argmax(1) == train_y[index]).sum().item()
        seconds = time.perf_counter() - started
        seen = len(losses) * batch_size
        test_loss, test_accuracy = evaluate(model.module, test_x, test_y)
        recorder.end_epoch(lr=lr, loss=sum(losses) / len(losses), accuracy=correct / seen,  # accordion
                           test_loss=test_loss, test_accuracy=test_accuracy, samples=seen, seconds=seconds)
        if compression is not None:
            torch.save(compression.state_dict(), hook_checkpoint + ".tmp")  # every rank: its own memories
            os.replace(hook_checkpoint + ".tmp", hook_checkpoint)
        if args.gravac:  # accordion: the factors GraVAC chose this epoch (every rank takes its records)
            factors = collections.Counter(step.factor for step in compression.take_gravac_steps())
        if rank == 0:
            # After end_epoch: a run killed in between resumes from the previous
            # checkpoint, and start_epoch drops the epoch the file holds beyond it.
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
            sent = f", sent {compression.floats_sent - sent_before:.4g} floats" if compression is not None else ""
            if args.gravac:
                sent += " (" + ", ".join(f"{n} at {f:g}x" if f > 1 else f"{n} dense" for f, n in sorted(factors.items())) + ")"
            print(f"epoch {epoch}: loss {sum(losses) / len(losses):.4f}, test accuracy {100 * test_accuracy:.2f}%, "
                  f"lr {lr:g}, batch {batch_size} per rank{sent}, {seconds:.1f} s", flush=True)
    recorder.finish()  # accordion: the file is complete


if __name__ == "__main__":
    status = 0
    try:
        main()
    except accordion.Error as e:
        print(f"train_mlp.py: error: {e}", file=sys.stderr)
        status = 1
    # On an error too, the group goes while the interpreter is whole (after what
    # reference cycles held is freed): one left to the teardown may abort the process.
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(status)
