"""Hybrid sharding with FSDP2 and a compressed replica exchange: train_mlp.py's MLP
on Fashion-MNIST, sharded within each replica by fully_shard and averaged across
the replicas by the toolkit's compressors (accordion.compress_fsdp; PyTorch 2.x).
The lines marked `# accordion` are all it takes.

    python3 -m torch.distributed.run --nproc_per_node 4 examples/pytorch/train_fsdp.py --compress powersgd:4

4 ranks are 2 replicas (--replicas) of 2 shards each, as 2 nodes of 2 GPUs would be;
here Gloo on the CPU. Without --compress, --schedule, --accordion or --auto it trains with
FSDP's own hybrid sharding (fully_shard over the 2-D mesh), for comparison.
--schedule SCHED.h5 replays a compression schedule from regime-detect (e.g. made
from train_mlp.py's grads.h5: the same parameters); --accordion decides the levels
online; --auto chooses them each epoch by the step time predicted on the link it
measures, uncompressed where compression does not pay. --model cnn trains the toolkit's `cnn` (train-dist --model cnn) instead of
the MLP; --csv FILE appends a row per epoch (rank 0: accuracy, time, the median
step's seconds, floats sent). --record GRADS.h5 records rank 0's local gradients for regime-detect
(accordion.GradientRecorder, in any of these modes); record-and-detect-fsdp.sh
runs record -> regime-detect -> replay with it. Every rank uses one thread.
"""

import argparse
import csv
import gc
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import accordion  # accordion
from train_mlp import MLP, evaluate, learning_rate, load


class CNN(nn.Module):
    """The toolkit's `cnn`: two 3x3 convolutions, a 2x2 max-pool and two linear layers."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.fc1 = nn.Linear(64 * 12 * 12, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x.view(-1, 1, 28, 28)))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


CSV_COLUMNS = ["epoch", "loss", "test_accuracy", "seconds", "steps", "step_seconds", "floats_sent"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compress", help="exchange the shards across the replicas at this level, e.g. powersgd:4")
    parser.add_argument("--schedule", help="a compression schedule from regime-detect: each epoch's levels")
    parser.add_argument("--accordion", action="store_true",
                        help="decide the levels online (powersgd:2 critical, powersgd:1 elsewhere, a decision "
                             "every 2 epochs)")
    parser.add_argument("--auto", action="store_true",
                        help="the automatic mode: each epoch's levels by predicted step time, within Accordion's "
                             "error budget (its regimes as --accordion decides them)")
    parser.add_argument("--one-exchange", action="store_true",
                        help="exchange every module's shards together once per step, at the end of the backward "
                             "pass (compress_fsdp's one_exchange): one latency per collective instead of one per "
                             "module")
    parser.add_argument("--record", metavar="GRADS.h5",
                        help="record rank 0's local gradients, summed per epoch, for regime-detect")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp",
                        help="train_mlp.py's MLP or the toolkit's cnn (default mlp)")
    parser.add_argument("--csv", metavar="FILE", help="append a row per epoch to FILE (rank 0; header if new)")
    parser.add_argument("--replicas", type=int, default=2, help="replicas; each shards over world / replicas ranks")
    parser.add_argument("--reduce-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="the dtype FSDP reduces gradients in (MixedPrecisionPolicy's reduce_dtype)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank (default 64)")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--lr-decay-epoch", type=int, default=6, help="lr x 0.1 from this epoch (default 6)")
    parser.add_argument("--train-samples", type=int, default=12000, help="first N training images (default 12000)")
    parser.add_argument("--test-samples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    if args.one_exchange and not (args.compress or args.schedule or args.accordion or args.auto):
        parser.error("--one-exchange: belongs to the compressed replica exchange; give it with --compress, "
                     "--schedule, --accordion or --auto")

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.replicas < 1 or world % args.replicas:
        raise SystemExit(f"train_fsdp.py: error: --replicas {args.replicas} does not divide the {world} ranks")
    mesh = init_device_mesh("cpu", (args.replicas, world // args.replicas), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(args.seed)
    train_x, train_y = load("train", args.train_samples)
    test_x, test_y = load("test", args.test_samples)
    model = MLP() if args.model == "mlp" else CNN()
    policy = MixedPrecisionPolicy(reduce_dtype=getattr(torch, args.reduce_dtype))
    compressed = args.compress or args.schedule or args.accordion or args.auto
    # Sharded within a replica; without compression FSDP also all-reduces across the replicas.
    shard_mesh = mesh["shard"] if compressed else mesh
    for layer in [child for child in model.children() if any(True for _ in child.parameters())]:
        fully_shard(layer, mesh=shard_mesh, mp_policy=policy)
    fully_shard(model, mesh=shard_mesh, mp_policy=policy)
    state = None
    if compressed:
        # accordion: each module's gradient shard averaged across the replicas, compressed
        state = accordion.compress_fsdp(model, mesh["replicate"], args.compress, schedule=args.schedule,  # accordion
                                        accordion=args.accordion, auto=args.auto, interval=2,
                                        one_exchange=args.one_exchange)
    recorder = None
    if args.record:
        # accordion: rank 0's raw local gradients, read at each FSDP module's reduce-scatter input
        recorder = accordion.GradientRecorder(model, args.record, model_name="mlp", dataset="fashion-mnist",  # accordion
                                              batch_size=args.batch_size, seed=args.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        lr = learning_rate(args, epoch)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if state is not None:
            state.set_epoch(epoch, lr=lr)  # accordion: this epoch's levels (online: decided now)
            sent_before = state.floats_sent
        # Each rank takes every world-th sample of the epoch's shuffle.
        order = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(args.seed + epoch))
        mine = order[rank::world]
        started, losses, correct, steps = time.perf_counter(), [], 0, []
        for first in range(0, len(mine) - args.batch_size + 1, args.batch_size):
            step_started = time.perf_counter()
            index = mine[first:first + args.batch_size]
            out = model(train_x[index])
            loss = F.cross_entropy(out, train_y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += (out.argmax(1) == train_y[index]).sum().item()
            steps.append(time.perf_counter() - step_started)
        seconds = time.perf_counter() - started
        test_loss, test_accuracy = evaluate(model, test_x, test_y)  # every rank: FSDP gathers the parameters
        if recorder is not None:
            seen = len(losses) * args.batch_size
            recorder.end_epoch(lr=lr, loss=sum(losses) / len(losses), accuracy=correct / seen,  # accordion
                               test_loss=test_loss, test_accuracy=test_accuracy, samples=seen, seconds=seconds)
        if rank == 0:
            sent = f", sent {state.floats_sent - sent_before:.4g} floats" if state is not None else ""
            print(f"epoch {epoch}: loss {sum(losses) / len(losses):.4f}, test accuracy {100 * test_accuracy:.2f}%, "
                  f"lr {lr:g}{sent}, {seconds:.1f} s", flush=True)
            if args.auto:
                print(f"  auto: {state.auto_records[-1]['summary']}", flush=True)
            if args.csv:
                write_row(args.csv, [epoch, sum(losses) / len(losses), test_accuracy, seconds, len(steps),
                                     statistics.median(steps),
                                     state.floats_sent - sent_before if state is not None else ""])
    if recorder is not None:
        recorder.finish()  # accordion: the file is complete


def write_row(path, row):
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(CSV_COLUMNS)
        writer.writerow([repr(v) if isinstance(v, float) else v for v in row])


if __name__ == "__main__":
    status = 0
    try:
        main()
    except accordion.Error as e:
        print(f"train_fsdp.py: error: {e}", file=sys.stderr)
        status = 1
    # On an error too, the group goes while the interpreter is whole (after what
    # reference cycles held is freed): one left to the teardown may abort the process.
    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
    sys.exit(status)
