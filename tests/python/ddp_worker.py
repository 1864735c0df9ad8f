"""One rank of the tests' DDP runs (Gloo, CPU, one thread), started by
launch.py: `ddp_worker.py SCENARIO [options]`. Errors of the package end the rank
with `ddp_worker: error: <message>` and exit 1, as a user's script would.

Scenarios:
  train      train a small model under DistributedDataParallel with the recorder;
             rank 0 also computes each step's local gradients again with
             torch.autograd.grad on a copy of the model (no DDP, no hook) and
             writes their per-epoch sums' norms to --reference (JSON)
  schedule   read --schedule for the model (every rank) and print its epoch 0
  compress   train under DDP with accordion.compression_hook (--compress SPEC or
             --schedule PATH or --accordion or --auto; --record FILE also records under
             GradientRecorder), PyTorch's powerSGD_hook (--torch-powersgd RANK) or
             DDP's own allreduce (none of them); rank 0 prints, as JSON,
             each epoch's floats sent and levels and the final parameters.
             --save-after E saves model, optimizer and hook state per rank to
             --state (.rankR.pt) after epoch E; --start S loads them first
             (--dcp: through torch.distributed.checkpoint, into --state.dcp/)
"""

import argparse
import copy
import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import accordion


def let_gloo_finish():
    """Gives a Gloo group's worker threads the GIL before the group is torn down.
    A worker drops a finished collective's tensors while holding the group's queue
    lock, and needs the GIL where Python made them; the group's destructor takes that
    lock, so run on a thread holding the GIL right after a collective, both would wait
    forever (a test's end hung so). A pause without the GIL lets the worker end."""
    time.sleep(0.2)


class Net(nn.Module):
    def __init__(self, renamed=False):
        super().__init__()
        self.fc1 = nn.Linear(12, 16)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(16, 4)
        if renamed:  # the same shapes under other names: a schedule of Net must not fit it
            self.head = self.fc2
            del self.fc2

    def forward(self, x):
        out = self.act(self.fc1(x))
        return (self.head if hasattr(self, "head") else self.fc2)(out)


def batch(rank, epoch, step):
    g = torch.Generator().manual_seed(1_000_003 * rank + 1009 * epoch + step)
    x = torch.randn(8, 12, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return x, y


def learning_rate(epoch):
    return 0.2 if epoch < 3 else 0.02


def train(args, rank, world):
    torch.manual_seed(7)
    model = Net()
    # Tiny buckets: one per parameter, regrouped by DDP after the first step.
    ddp = DistributedDataParallel(model, bucket_cap_mb=1e-4)
    hook = None
    hook_state = None
    if args.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = default_hooks.fp16_compress_hook
    elif args.hook == "powersgd":
        hook, hook_state = accordion.compression_hook, accordion.CompressionState(ddp, "powersgd:1")
    recorder = accordion.GradientRecorder(ddp, args.output, hook=hook, hook_state=hook_state, start_epoch=args.start,
                                          model_name="net", dataset="synthetic", batch_size=8, seed=7)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=learning_rate(args.start), momentum=0.9, weight_decay=1e-3)
    names = [name for name, _ in model.named_parameters()]
    reference = copy.deepcopy(model)
    epochs = []
    for epoch in range(args.start, args.epochs):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(epoch)
        sums = {name: torch.zeros_like(p, dtype=torch.float64) for name, p in model.named_parameters()}
        losses, correct, seen = [], 0, 0
        for step in range(args.steps):
            x, y = batch(rank, epoch, step)
            if rank == 0:
                reference.load_state_dict(model.state_dict())
                ref_loss = F.cross_entropy(reference(x), y)
                for name, g in zip(names, torch.autograd.grad(ref_loss, list(reference.parameters()))):
                    sums[name] += g.double()
            optimizer.zero_grad()
            out = ddp(x)
            loss = F.cross_entropy(out, y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            correct += int((out.argmax(1) == y).sum())
            seen += len(y)
        last = {}
        if rank == 0:
            last = {name: float((recorder.summed_gradient(name).double() - sums[name]).abs().max()) for name in names}
        recorder.end_epoch(lr=learning_rate(epoch), loss=sum(losses) / len(losses), accuracy=correct / seen,
                           samples=seen)
        epochs.append({"epoch": epoch, "lr": learning_rate(epoch), "loss": sum(losses) / len(losses),
                       "accuracy": correct / seen, "steps": args.steps, "samples": seen,
                       "norms": [float(sums[name].norm()) for name in names], "sum_error": last})
        if rank == 0 and args.reference:
            with open(args.reference, "w") as f:
                json.dump({"names": names, "shapes": [list(p.shape) for p in model.parameters()],
                           "epochs": epochs}, f)
        if args.crash_after is not None and epoch == args.crash_after:
            os._exit(3)  # killed between epochs: no finish()
    recorder.finish()


def epoch_record(state, epoch, before, gravac):
    """What the package's `state` did in `epoch`: floats sent (since `before`), levels,
    steps and regimes, and with GraVAC its steps."""
    record = {"epoch": epoch, "floats": state.floats_sent - before, "levels": None if gravac else state.levels,
              "steps": state.steps, "critical": state.critical}
    if gravac:
        record["gravac"] = [step._asdict() for step in state.take_gravac_steps()]
    return record


def dcp_save(path, model, optimizer, key, state):
    """The model, the optimizer and `state` (the package's, a Stateful, under `key`)
    through torch.distributed.checkpoint, as its documentation saves them."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state, key: state}, checkpoint_id=path)


def dcp_load(path, model, optimizer, key, state):
    """What dcp_save() saved, into the fresh model, optimizer and state."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model_state, optimizer_state = get_state_dict(model, optimizer)
    checkpoint = {"model": model_state, "optimizer": optimizer_state, key: state}
    dcp.load(checkpoint, checkpoint_id=path)
    set_state_dict(model, optimizer, model_state_dict=checkpoint["model"], optim_state_dict=checkpoint["optimizer"])


def compress(args, rank, world):
    torch.manual_seed(7)
    model = Net()
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb,
                                  **{option: True for option in args.ddp_option})
    state, recorder = None, None
    if args.compress is not None or args.schedule is not None or args.accordion or args.gravac or args.auto:
        spec = args.compress_rank1 if rank == 1 and args.compress_rank1 else args.compress
        online = dict(accordion=True, low=args.low, high=args.high, eta=args.eta, interval=args.interval) \
            if args.accordion else {}
        if args.auto:
            online = dict(auto=True, low=args.low, high=args.high, eta=args.eta, interval=args.interval,
                          margin=args.margin)
        if args.gravac:
            epsilon = args.gravac_epsilon_rank1 if rank == 1 and args.gravac_epsilon_rank1 else args.gravac_epsilon
            online = dict(gravac=accordion.Gravac(args.gravac, epsilon=epsilon, window=args.gravac_window,
                                                  theta_min=args.gravac_theta_min))
        state = accordion.CompressionState(ddp, spec, schedule=args.schedule, seed=3, start_step=args.start_step,
                                           **online)
        if args.record:
            recorder = accordion.GradientRecorder(ddp, args.record, hook=accordion.compression_hook, hook_state=state)
        else:
            ddp.register_comm_hook(state, accordion.compression_hook)
    elif args.torch_powersgd:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        reference = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.torch_powersgd,
                                       start_powerSGD_iter=args.start_step, random_seed=3)
        ddp.register_comm_hook(reference, psgd.powerSGD_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=learning_rate(args.start), momentum=0.9)
    if args.start > 0 and args.dcp:
        dcp_load(f"{args.state}.dcp", ddp, optimizer, "hook", state)
    elif args.start > 0:
        saved = torch.load(f"{args.state}.rank{rank}.pt")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state.load_state_dict(saved["hook"])
    epochs = []
    for epoch in range(args.start, args.epochs):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(epoch)
        before = 0.0
        if state is not None:
            state.set_epoch(epoch, lr=learning_rate(epoch) if args.accordion or args.auto else None)
            before = state.floats_sent
        for step in range(args.steps):
            optimizer.zero_grad()
            # --accumulate N: N micro-batches per step, all but the last under no_sync().
            for micro in range(args.accumulate):
                x, y = batch(rank, epoch, step * args.accumulate + micro)
                if micro + 1 < args.accumulate:
                    with ddp.no_sync():
                        F.cross_entropy(ddp(x), y).backward()
                else:
                    F.cross_entropy(ddp(x), y).backward()
            optimizer.step()
        if recorder is not None:
            recorder.end_epoch(lr=learning_rate(epoch))
        if state is not None:
            epochs.append(epoch_record(state, epoch, before, args.gravac))
            if args.auto and rank == 0:
                epochs[-1]["auto"] = state.auto_records[-1]
        if args.save_after == epoch and args.dcp:
            dcp_save(f"{args.state}.dcp", ddp, optimizer, "hook", state)
        elif args.save_after == epoch:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "hook": state.state_dict()}, f"{args.state}.rank{rank}.pt")
    if recorder is not None:
        recorder.finish()
    if rank == 0:
        print(json.dumps({"epochs": epochs, "parameters": [p.detach().flatten().tolist() for p in model.parameters()]}))


def schedule(args, rank, world):
    model = DistributedDataParallel(Net(renamed=args.renamed))
    s = accordion.load_schedule(args.schedule, model)
    if rank == 0:
        print(json.dumps(s.levels(0) if s.mode == "compression" else s.batch(0, 0.1)._asdict()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["train", "schedule", "compress"])
    parser.add_argument("--output", default="grads.h5")
    parser.add_argument("--reference")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--crash-after", type=int)
    parser.add_argument("--hook", choices=["allreduce", "fp16", "powersgd"], default="allreduce")
    parser.add_argument("--compress")
    parser.add_argument("--torch-powersgd", type=int, help="PyTorch's powerSGD_hook at this rank instead")
    parser.add_argument("--start-step", type=int, default=0, help="the first step compressed")
    parser.add_argument("--compress-rank1", help="rank 1's --compress (a disagreeing rank)")
    parser.add_argument("--ddp-option", action="append", default=[], choices=["gradient_as_bucket_view", "static_graph"])
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--accordion", action="store_true", help="online Accordion (--low, --high, --eta, --interval)")
    parser.add_argument("--auto", action="store_true", help="the automatic mode (--low, --high, --eta, --interval, "
                        "--margin)")
    parser.add_argument("--margin", type=float)
    parser.add_argument("--low", default="powersgd:4")
    parser.add_argument("--high", default="powersgd:1")
    parser.add_argument("--eta", type=float, default=0.5)
    parser.add_argument("--interval", type=int, default=2)
    parser.add_argument("--gravac", help="GraVAC over this family (--gravac-epsilon, --gravac-window)")
    parser.add_argument("--gravac-epsilon", type=float, default=0.7)
    parser.add_argument("--gravac-epsilon-rank1", type=float, help="rank 1's --gravac-epsilon (a disagreeing rank)")
    parser.add_argument("--gravac-window", type=int, default=500)
    parser.add_argument("--gravac-theta-min", type=float, default=10)
    parser.add_argument("--record", help="also record the gradients into this file (the hook under the recorder)")
    parser.add_argument("--bucket-mb", type=float, default=1e-4)
    parser.add_argument("--save-after", type=int)
    parser.add_argument("--state", default="state")
    parser.add_argument("--dcp", action="store_true", help="--save-after and --start through torch.distributed.checkpoint")
    parser.add_argument("--schedule")
    parser.add_argument("--renamed", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    status = 0
    try:
        {"train": train, "schedule": schedule, "compress": compress}[args.scenario](args, rank, world)
    except accordion.Error as e:
        print(f"ddp_worker: error: {e}", file=sys.stderr)
        status = 1
    # A Gloo group torn down while its peer still uses it, or left to the interpreter's
    # teardown, may abort the process (SIGABRT) instead of letting it exit with its
    # status. So: ranks that succeeded wait for each other (bounded, in case the other
    # failed), the group goes while the interpreter is whole, after what reference
    # cycles held is freed, and the process ends without the interpreter's teardown.
    if status == 0:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        except RuntimeError:
            pass  # the other rank failed: its status tells
    gc.collect()
    let_gloo_finish()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
