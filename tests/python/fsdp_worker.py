"""One rank of the tests' FSDP2 runs (Gloo, CPU, one thread, 4 ranks as 2 replicas
x 2 shards), started by conftest.run_ranks: `fsdp_worker.py SCENARIO [options]`.
Every rank prints one line of JSON. Needs PyTorch 2.x (fully_shard).

Scenarios:
  train      train Net for --epochs of --steps steps, each rank on its own
             batches, sharded within its replica (fully_shard over mesh["shard"])
             with --compress SPEC, --schedule PATH, --accordion or --auto
             (accordion.compress_fsdp over mesh["replicate"]; --accordion: rank 0
             also computes its local gradients again on a copy of the model and
             prints their per-epoch sums' norms; --auto: rank 0 prints each
             epoch's auto_records entry) or
             --reference-powersgd RANK (PowerSGD as its paper writes it, below,
             in each module's all-reduce hook), or sharded over the 2-D mesh
             (FSDP's own hybrid sharding) without either; prints the full
             parameters, the losses, and each epoch's floats sent, levels and
             steps counted
             (--record FILE also records rank 0's local gradients with
             accordion.GradientRecorder, which every mode takes, and rank 0
             computes them again on a copy of the model, as online; --plain
             shards over all 4 ranks, fully_shard over a 1-D mesh, without
             replicas)
             (--save-after E saves each rank's shards and exchange state to
             state.rankR.pt after epoch E; --start S loads them first; with
             --dcp both go through torch.distributed.checkpoint, state.dcp/)
             (--one-exchange: compress_fsdp(one_exchange=True), every module's
             shards exchanged together at the end of the backward pass)
             (--gravac FAMILY: compress_fsdp(gravac=...) instead, each epoch's
             GraVAC steps printed; --layout RxS: R replicas x S shards, 2x2 by
             default; --device cuda --backend nccl: on the GPUs, one a rank)
  every      each compressor on float32 and bf16 shards, 3 steps
  refusals   tries what compress_fsdp refuses; prints {case: message}
"""

import argparse
import datetime
import gc
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import accordion
from ddp_worker import dcp_load, dcp_save, epoch_record, let_gloo_finish

REPLICAS, SHARDS = 2, 2


class Net(nn.Module):
    # fc1's 25 rows split 13 + 12 over 2 shards (one padding row), fc3's single row
    # 1 + 0: uneven shards and an empty one.
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 25)
        self.fc2 = nn.Linear(25, 10)
        self.fc3 = nn.Linear(10, 1)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


class Unused(nn.Module):
    """A module (an FSDP module of its own) its forward leaves out."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 4)
        self.unused = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


class Spare(nn.Module):
    """A module with a trainable parameter its forward leaves out."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(12, 4)
        self.spare = nn.Parameter(torch.zeros(3))

    def forward(self, x):
        return self.fc(x)


def batch(rank, step):
    g = torch.Generator().manual_seed(1_000_003 * rank + step)
    x = torch.randn(8, 12, generator=g)
    return x, (x[:, :3].sum(1, keepdim=True) > 0).float()


def learning_rate(epoch):
    return 0.1 if epoch < 4 else 0.01


def shard_rows(rows, shards, index):
    """The rows of dimension 0 that shard `index` holds and the padded shard's, as
    fully_shard splits them (torch.chunk: ceil(rows / shards) rows per shard)."""
    per = -(-rows // shards)
    return max(0, min(per, rows - index * per)), per


def mesh_of(device="cpu"):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device, (REPLICAS, SHARDS), mesh_dim_names=("replicate", "shard"))


def shard(model, mesh, **options):
    from torch.distributed.fsdp import fully_shard
    for layer in (model.fc1, model.fc2, model.fc3):
        fully_shard(layer, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    return model


class PaperPowerSgd:
    """PowerSGD as Vogels et al. (2019), Algorithm 1 with error feedback, write it,
    on each parameter's shard (its rows on this rank, other dimensions flattened)
    averaged over the replica group: M = gradient + error; P = M Q, averaged;
    P orthonormalized (Gram-Schmidt); Q = M^T P, averaged; the gradient becomes
    P Q^T and the error M - P Q^T; Q warm-starts the next step. The first Q of each
    module is drawn as PyTorch's powerSGD_hook draws it (a torch seed from numpy's
    RandomState(seed), N(0, 1) per matrix in order), so that both start alike. A
    matrix that rank `rank` would not shrink below half ((rows + cols) rank >=
    rows cols / 2) is averaged whole, its error the local value minus the average
    (powerSGD_hook's rule); vectors are averaged whole."""

    def __init__(self, rank, group, seed):
        self.rank, self.group, self.seed = rank, group, seed
        self.error, self.q = {}, {}

    def mean(self, t):
        dist.all_reduce(t, group=self.group)
        return t.div_(dist.get_world_size(self.group))

    def hook(self, parts):
        def run(output):
            offset, fresh = 0, None
            for name, rows, padded, cols in parts:
                g = output[offset:offset + rows * cols]
                offset += padded * cols
                if rows == 0:
                    continue
                if name.endswith("bias"):
                    self.mean(g)
                    continue
                m = g.view(rows, cols) + self.error.get(name, 0)
                r = min(self.rank, rows, cols)
                if 2 * (rows + cols) * r >= rows * cols:
                    average = self.mean(m.clone())
                else:
                    if name not in self.q:
                        if fresh is None:
                            fresh = torch.Generator().manual_seed(int(np.random.RandomState(self.seed).randint(1_000_000_000)))
                        self.q[name] = torch.randn(cols, r, generator=fresh)
                    p = self.mean(m @ self.q[name])
                    for i in range(r):
                        p[:, i] /= p[:, i].norm()
                        p[:, i + 1:] -= p[:, i:i + 1] * (p[:, i:i + 1] * p[:, i + 1:]).sum(0)
                    self.q[name] = self.mean(m.t() @ p)
                    average = p @ self.q[name].t()
                self.error[name] = m - average
                g.copy_(average.view(-1))
        return run


def train(args, rank):
    device = torch.device(args.device, rank % torch.cuda.device_count()) if args.device == "cuda" else \
        torch.device("cpu")
    mesh = mesh_of(device.type)
    torch.manual_seed(7)
    model = Net().to(device)
    state = None
    options = {}
    if args.reduce_dtype:
        from torch.distributed.fsdp import MixedPrecisionPolicy
        options["mp_policy"] = MixedPrecisionPolicy(reduce_dtype=getattr(torch, args.reduce_dtype))
    if args.plain:
        shard(model, None, **options)  # fully_shard's default mesh: every rank, one replica
    elif args.compress is None and args.schedule is None and args.reference_powersgd is None and not args.accordion \
            and not args.gravac and not args.auto:
        shard(model, mesh, **options)  # FSDP's own hybrid sharding
    else:
        shard(model, mesh["shard"], **options)
        if args.accordion:
            state = accordion.compress_fsdp(model, mesh["replicate"], accordion=True, low="powersgd:4",
                                            high="powersgd:1", interval=2, seed=3)
        elif args.auto:
            state = accordion.compress_fsdp(model, mesh["replicate"], auto=True, low="powersgd:4", high="powersgd:1",
                                            interval=2, seed=3, margin=args.margin, one_exchange=args.one_exchange)
        elif args.gravac:
            state = accordion.compress_fsdp(model, mesh["replicate"], seed=3, start_step=args.start_step,
                                            gravac=accordion.Gravac(args.gravac, epsilon=args.gravac_epsilon,
                                                                    window=args.gravac_window,
                                                                    theta_min=args.gravac_theta_min))
        elif args.reference_powersgd is None:
            state = accordion.compress_fsdp(model, mesh["replicate"], args.compress, schedule=args.schedule, seed=3,
                                            start_step=args.start_step, one_exchange=args.one_exchange)
        else:
            reference = PaperPowerSgd(args.reference_powersgd, mesh["replicate"].get_group(), seed=3)
            index = dist.get_rank(mesh["shard"].get_group())
            for prefix in ("fc1", "fc2", "fc3"):
                layer, parts = getattr(model, prefix), []
                for name, p in layer.named_parameters():
                    rows, padded = shard_rows(p.shape[0], SHARDS, index)
                    parts.append((f"{prefix}.{name}", rows, padded, p[0].numel()))
                layer.set_all_reduce_hook(reference.hook(parts))
    recorder = accordion.GradientRecorder(model, args.record, dataset="synthetic", batch_size=8, seed=7) \
        if args.record else None
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.start > 0 and args.dcp:  # the model, optimizer and exchange state, as saved after epoch start - 1
        dcp_load("state.dcp", model, optimizer, "accordion", state)
    elif args.start > 0:  # this rank's shards and exchange state, as saved after epoch start - 1
        saved = torch.load(f"state.rank{rank}.pt")
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.to_local().copy_(saved["model"][name])
        state.load_state_dict(saved["exchange"])
    losses, epochs, reference_norms = [], [], []
    copy = Net()  # online: rank 0's local gradients computed again, without FSDP
    for epoch in range(args.start, args.epochs):
        lr = learning_rate(epoch) if args.accordion or args.auto or args.record else 0.1
        for group in optimizer.param_groups:
            group["lr"] = lr
        before = 0.0
        if state is not None:
            state.set_epoch(epoch, lr=lr if args.accordion or args.auto else None)
            before = state.floats_sent
        sums = {name: torch.zeros(p.shape, dtype=torch.float64) for name, p in model.named_parameters()}
        for step in range(args.steps):
            optimizer.zero_grad()
            # --accumulate N: N micro-batches per step, all but the last without gradient sync.
            for micro in range(args.accumulate):
                x, y = (t.to(device) for t in batch(rank, (epoch * args.steps + step) * args.accumulate + micro))
                if args.accordion or args.record:
                    full = {name: p.full_tensor() for name, p in model.named_parameters()}  # every rank
                    if rank == 0:
                        copy.load_state_dict(full)
                        loss = F.binary_cross_entropy_with_logits(copy(x), y)
                        for (name, _), g in zip(copy.named_parameters(), torch.autograd.grad(loss, list(copy.parameters()))):
                            sums[name] += g.double()
                model.set_requires_gradient_sync(micro + 1 == args.accumulate)
                loss = F.binary_cross_entropy_with_logits(model(x), y)
                loss.backward()
            optimizer.step()
            losses.append(loss.item())
        reference_norms.append([float(t.norm()) for t in sums.values()])
        if recorder is not None:
            recorder.end_epoch(lr=lr)
        if state is not None:
            epochs.append(epoch_record(state, epoch, before, args.gravac))
            if args.auto and rank == 0:
                epochs[-1]["auto"] = state.auto_records[-1]
        if args.save_after == epoch and args.dcp:
            dcp_save("state.dcp", model, optimizer, "accordion", state)
        elif args.save_after == epoch:
            torch.save({"model": {name: p.to_local().clone() for name, p in model.named_parameters()},
                        "exchange": state.state_dict()}, f"state.rank{rank}.pt")
    result = {"rank": rank, "losses": losses, "epochs": epochs,
              "parameters": {name: p.full_tensor().flatten().tolist() for name, p in model.named_parameters()},
              "shards": {name: list(p.to_local().shape) for name, p in model.named_parameters()},
              "finite": all(bool(torch.isfinite(p.to_local()).all()) for p in model.parameters())}
    if state is not None:
        saved = state.state_dict()
        result.update(floats=state.floats_sent, steps=state.steps, saved=sorted(saved["ranks"][str(dist.get_rank())][1]),
                      shared=sorted(saved["shared"][0]))
    if args.accordion or args.record:
        result.update(reference_norms=reference_norms)
    if args.accordion:
        result.update(online_norms=state.state_dict()["accordion"]["norms"])
    if recorder is not None:
        recorder.finish()
    print(json.dumps(result))


EVERY_COMPRESSOR = ["none", "fp16", "powersgd:2", "topk:0.1", "randomk:0.1", "dgc:0.1", "signsgd", "efsignsgd",
                    "qsgd:127", "terngrad"]


def every(args, rank):
    """Each compressor on float32 and bf16 shards (MixedPrecisionPolicy's reduce_dtype):
    3 steps each; the floats sent and whether every gradient shard stayed finite."""
    from torch.distributed.fsdp import MixedPrecisionPolicy
    mesh = mesh_of()
    out = {}
    for spec in EVERY_COMPRESSOR:
        for dtype in ("float32", "bfloat16"):
            torch.manual_seed(7)
            model = shard(Net(), mesh["shard"], mp_policy=MixedPrecisionPolicy(reduce_dtype=getattr(torch, dtype)))
            state = accordion.compress_fsdp(model, mesh["replicate"], spec, seed=3)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            finite = True
            for step in range(3):
                optimizer.zero_grad()
                x, y = batch(rank, step)
                F.binary_cross_entropy_with_logits(model(x), y).backward()
                finite = finite and all(bool(torch.isfinite(p.grad.to_local()).all()) for p in model.parameters())
                optimizer.step()
            out[f"{spec} {dtype}"] = {"floats": state.floats_sent, "finite": finite,
                                      "dtypes": sorted({str(p.grad.dtype) for p in model.parameters()})}
    print(json.dumps(out))


def refusals(args, rank):
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
    from torch.distributed.tensor import Shard
    mesh = mesh_of()
    messages = {}

    def attempt(case, make):
        try:
            make()
            messages[case] = None
        except accordion.Error as e:
            messages[case] = f"{type(e).__name__}: {e}"

    attempt("no replica group", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), None, "powersgd:2"))
    attempt("the shard group as replica group",
            lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["shard"], "powersgd:2"))
    # Every rank makes every group; ranks 0 and 3 hold other shard indices.
    crossed = {r: g for ranks in ([0, 3], [1, 2]) for g in [dist.new_group(ranks)] for r in ranks}
    attempt("a replica group across shard indices",
            lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), crossed[rank], "powersgd:2"))
    alone = {r: dist.new_group([r]) for r in range(dist.get_world_size())}
    attempt("a replica group short of the world",
            lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), alone[rank], "powersgd:2"))
    attempt("a 2-D mesh as replica group", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh, "none"))
    attempt("native hybrid sharding", lambda: accordion.compress_fsdp(shard(Net(), mesh), mesh["replicate"], "none"))
    attempt("FSDP1", lambda: accordion.compress_fsdp(
        FullyShardedDataParallel(Net(), process_group=mesh["shard"].get_group(), device_id=torch.device("cpu")),
        mesh["replicate"], "none"))
    attempt("no fully_shard", lambda: accordion.compress_fsdp(Net(), mesh["replicate"], "none"))
    attempt("neither compress nor schedule", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]),
                                                                             mesh["replicate"]))
    attempt("a bad spec", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"], "zip:3"))
    attempt("rows sharded on dimension 1", lambda: accordion.compress_fsdp(
        shard(Net(), mesh["shard"], shard_placement_fn=lambda p: Shard(1) if p.ndim == 2 and p.shape[1] % SHARDS == 0 else None),
        mesh["replicate"], "none"))

    def with_hook():
        model = shard(Net(), mesh["shard"])
        model.fc2.set_all_reduce_hook(lambda output: None)
        accordion.compress_fsdp(model, mesh["replicate"], "none")
    attempt("an all-reduce hook of the user's", with_hook)

    def offloaded():
        # CPUOffloadPolicy needs pinned (CUDA) memory to be made: its mark is set by hand.
        model = shard(Net(), mesh["shard"])
        model.fc1._get_fsdp_state()._fsdp_param_group.fsdp_params[0].offload_to_cpu = True
        accordion.compress_fsdp(model, mesh["replicate"], "none")
    attempt("CPU offload", offloaded)

    def unsharded():
        model = Net()
        for layer in (model.fc1, model.fc2):  # fc3 and the root left unsharded
            fully_shard(layer, mesh=mesh["shard"])
        accordion.compress_fsdp(model, mesh["replicate"], "none")
    attempt("a parameter outside fully_shard", unsharded)

    def another_shard():
        state = accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"], "none")
        saved = state.state_dict()
        (key, (owner, own, sums)), = saved["ranks"].items()
        state.load_state_dict({**saved, "ranks": {key: ({**owner, "shard_rank": 1 - state.shard_rank}, own, sums)}})
    attempt("a state of another shard", another_shard)

    def another_replica():
        state = accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"], "none")
        saved = state.state_dict()
        (key, (owner, own, sums)), = saved["ranks"].items()
        state.load_state_dict({**saved, "ranks": {key: ({**owner, "rank": 1 - owner["rank"]}, own, sums)}})
    attempt("a state of another replica", another_replica)
    attempt("gravac and compress", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"],
                                                                   "none", gravac="topk"))
    attempt("one_exchange not a bool", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]),
                                                                       mesh["replicate"], "none", one_exchange="yes"))
    attempt("auto and accordion", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"],
                                                                  accordion=True, auto=True))
    attempt("levels without auto", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"],
                                                                   accordion=True, levels=["topk:0.01"]))
    attempt("auto: an unknown level", lambda: accordion.compress_fsdp(shard(Net(), mesh["shard"]),
                                                                      mesh["replicate"], auto=True,
                                                                      levels=["powersgd:1", "zip:3"]))

    def no_rows():
        # Linear(2, 1)'s one row lies on shard 0: shard 1 holds nothing to decide from.
        model = nn.Linear(2, 1)
        fully_shard(model, mesh=mesh["shard"])
        accordion.compress_fsdp(model, mesh["replicate"], gravac="topk")
    attempt("gravac: a shard without rows", no_rows)

    def unused_module():
        model = Unused()
        fully_shard(model.fc, mesh=mesh["shard"])
        fully_shard(model.unused, mesh=mesh["shard"])
        fully_shard(model, mesh=mesh["shard"])
        accordion.compress_fsdp(model, mesh["replicate"], gravac="topk")
        model(batch(rank, 0)[0]).sum().backward()
    attempt("gravac: a module without gradients", unused_module)

    def a_ddp_state():
        state = accordion.compress_fsdp(shard(Net(), mesh["shard"]), mesh["replicate"], "none")
        state.load_state_dict({key: value for key, value in state.state_dict().items() if "shard" not in key})
    attempt("a state without its shard", a_ddp_state)

    def unused_parameter():
        model = Spare()
        fully_shard(model, mesh=mesh["shard"])
        accordion.compress_fsdp(model, mesh["replicate"], "none")
        model(batch(rank, 0)[0]).sum().backward()
    attempt("a parameter without gradient", unused_parameter)

    # GradientRecorder under FSDP: each refused before the file is made, but the last.
    def record(model, path="refused.h5", **options):
        accordion.GradientRecorder(model, path, **options)
    attempt("recorder: FSDP1", lambda: record(
        FullyShardedDataParallel(Net(), process_group=mesh["shard"].get_group(), device_id=torch.device("cpu"))))
    attempt("recorder: no fully_shard", lambda: record(Net()))

    def recorder_unsharded():
        model = Net()
        for layer in (model.fc1, model.fc2):
            fully_shard(layer, mesh=mesh["shard"])
        record(model)
    attempt("recorder: a parameter outside fully_shard", recorder_unsharded)
    attempt("recorder: a DDP hook", lambda: record(shard(Net(), mesh["shard"]), hook=lambda state, bucket: None))
    attempt("recorder: rows sharded on dimension 1", lambda: record(
        shard(Net(), mesh["shard"], shard_placement_fn=lambda p: Shard(1) if p.ndim == 2 and p.shape[1] % SHARDS == 0 else None)))
    from torch.distributed.device_mesh import init_device_mesh
    single = init_device_mesh("cpu", (REPLICAS * SHARDS, 1), mesh_dim_names=("replicate", "shard"))
    attempt("recorder: one rank per shard", lambda: record(shard(Net(), single["shard"])))
    attempt("recorder: a record_rank outside the world", lambda: record(shard(Net(), mesh["shard"]), record_rank=4))

    def recorder_unused_parameter():
        model = Spare()
        fully_shard(model, mesh=mesh["shard"])
        record(model, "spare.h5")
        model(batch(rank, 0)[0]).sum().backward()
    attempt("recorder: a parameter without gradient", recorder_unused_parameter)
    if rank == 0:
        print(json.dumps(messages))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["train", "every", "refusals"])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compress")
    parser.add_argument("--reference-powersgd", type=int)
    parser.add_argument("--schedule")
    parser.add_argument("--start-step", type=int, default=0, help="compress_fsdp's start_step")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--accordion", action="store_true",
                        help="online Accordion (low powersgd:4, high powersgd:1, interval 2; lr 0.1, 0.01 from epoch 4)")
    parser.add_argument("--auto", action="store_true",
                        help="compress_fsdp(auto=True) (low powersgd:4, high powersgd:1, interval 2)")
    parser.add_argument("--margin", type=float, help="the automatic mode's margin")
    parser.add_argument("--one-exchange", action="store_true",
                        help="compress_fsdp(one_exchange=True): every module's shards in one exchange a step")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--record", help="record with GradientRecorder into this file (lr 0.1, 0.01 from epoch 4)")
    parser.add_argument("--plain", action="store_true", help="fully_shard over all ranks (a 1-D mesh), no replicas")
    parser.add_argument("--save-after", type=int, help="save shards and exchange state after this epoch")
    parser.add_argument("--start", type=int, default=0, help="start at this epoch from the saved state")
    parser.add_argument("--reduce-dtype", choices=["bfloat16", "float16"], help="MixedPrecisionPolicy's reduce_dtype")
    parser.add_argument("--dcp", action="store_true", help="--save-after and --start through torch.distributed.checkpoint")
    parser.add_argument("--gravac", help="compress_fsdp(gravac=...) over this family (--gravac-epsilon, --gravac-window)")
    parser.add_argument("--gravac-epsilon", type=float, default=0.7)
    parser.add_argument("--gravac-window", type=int, default=500)
    parser.add_argument("--gravac-theta-min", type=float, default=10)
    parser.add_argument("--layout", default="2x2", help="replicas x shards, e.g. 1x2 (the world must be their product)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: rank r on GPU r mod the GPUs")
    parser.add_argument("--backend", default="gloo")
    args = parser.parse_args()
    global REPLICAS, SHARDS
    REPLICAS, SHARDS = (int(n) for n in args.layout.split("x"))
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ["RANK"]) % torch.cuda.device_count())
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    status = 0
    try:
        {"train": train, "every": every, "refusals": refusals}[args.scenario](args, rank)
    except accordion.Error as e:
        print(f"fsdp_worker: error: {e}", file=sys.stderr)
        status = 1
    if status == 0:
        try:
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
        except RuntimeError:
            pass
    gc.collect()
    let_gloo_finish()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
