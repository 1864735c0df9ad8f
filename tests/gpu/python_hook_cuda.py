"""The Python package's compressing DDP hook on a GPU, against the same hook on the CPU.

Run as `python_hook_cuda.py` (the driver) it starts two runs of itself as ranks, each
training a small model under DistributedDataParallel with accordion.compression_hook
for every compressor family, once on the CPU and once on the device under test:
  - two ranks over Gloo (CUDA tensors on one GPU, both ranks): the decoders of
    several workers on the device;
  - one rank over NCCL (the GPU users' backend; one GPU holds one NCCL rank), with
    the CPU's run over a Gloo group of its own;
  - two ranks over a group with no CPU backend ("cuda:gloo"), as a group made for
    NCCL has none: the hook's own collectives must reach the device.
Each level must send as many floats on the device as on the CPU and end with the
same parameters within rounding (for the levels that round stochastically or take
signs, 95% of them: a value within rounding of a rounding boundary or of zero may
go the other way). DGC's parameters are not compared: on the device it sends k
entries where the host's sampled threshold sends 0.8 k to k (docs/compressors.md). Exit 0 when every level agrees, 1 otherwise, 77 (skipped) where
torch sees no CUDA device. --device cpu runs the "device" runs on the CPU as well,
which checks the harness on a machine without a GPU.
"""

import argparse
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

# The package tests' model and batches (tests/python/ddp_worker.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from ddp_worker import Net, batch, let_gloo_finish  # noqa: E402
from ports import free_port  # noqa: E402

LEVELS = ["none", "fp16", "powersgd:2", "topk:0.1", "dgc:0.1", "randomk:0.1", "signsgd", "efsignsgd", "qsgd:127",
          "terngrad"]
# The levels whose result may flip where a value lies within rounding of a boundary.
FLIPPING = {"signsgd", "efsignsgd", "qsgd:127", "terngrad"}
# The levels that choose otherwise on the device by design: counts and finiteness only.
COUNTS_ONLY = {"dgc:0.1"}
EPOCHS, STEPS = 2, 5
RUN_SECONDS = 240


def train(accordion, level, device, rank, group):
    torch.manual_seed(7)
    model = Net().to(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                  process_group=group, bucket_cap_mb=1e-4)
    state = accordion.CompressionState(ddp, level, seed=3)
    ddp.register_comm_hook(state, accordion.compression_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for epoch in range(EPOCHS):
        state.set_epoch(epoch)
        for step in range(STEPS):
            x, y = (t.to(device) for t in batch(rank, epoch, step))
            optimizer.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()
    return {"floats": state.floats_sent,
            "parameters": torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).tolist()}


def rank_main(args):
    import accordion

    rank = int(os.environ["RANK"])
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if args.backend != "gloo" and device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend)
    # The CPU's runs need Gloo; over NCCL (or a CUDA-only Gloo) they get a group of their own.
    cpu_group = dist.new_group(backend="gloo") if args.backend != "gloo" else None
    results = {}
    for level in LEVELS:
        results[level] = {"cpu": train(accordion, level, torch.device("cpu"), rank, cpu_group),
                          "device": train(accordion, level, device, rank, None)}
    let_gloo_finish()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(results))


def run(device, backend, world):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    command = [sys.executable, os.path.abspath(__file__), "--rank", "--device", device, "--backend", backend]
    processes = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(world)]
    outputs = []
    try:
        for p in processes:
            outputs.append(p.communicate(timeout=RUN_SECONDS))
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        return None, f"still running after {RUN_SECONDS} s (a hang)"
    failed = [(r, p.returncode, outputs[r][1]) for r, p in enumerate(processes) if p.returncode != 0]
    if failed:
        r, code, err = failed[0]
        return None, f"rank {r} exited {code}:\n" + "\n".join("    " + line for line in err.splitlines()[-15:])
    return json.loads(outputs[0][0].strip().splitlines()[-1]), None


def compare(results, what):
    problems = []
    for level in LEVELS:
        cpu, dev = results[level]["cpu"], results[level]["device"]
        if cpu["floats"] != dev["floats"]:
            problems.append(f"{what}, {level}: {dev['floats']} floats sent on the device, {cpu['floats']} on the CPU")
        a, b = torch.tensor(cpu["parameters"]), torch.tensor(dev["parameters"])
        if not torch.isfinite(b).all():
            problems.append(f"{what}, {level}: parameters not finite on the device")
            continue
        if level in COUNTS_ONLY:
            print(f"{what}, {level}: {dev['floats']} floats, as on the CPU; parameters finite (not compared)")
            continue
        close = ((a - b).abs() <= 1e-4 + 1e-4 * a.abs()).double().mean().item()
        needed = 0.95 if level in FLIPPING else 1.0
        verdict = "ok" if close >= needed else "DIFFERENT"
        print(f"{what}, {level}: {dev['floats']} floats; {100 * close:.1f}% of {a.numel()} parameters as on the "
              f"CPU (max difference {(a - b).abs().max().item():.2e}): {verdict}")
        if close < needed:
            problems.append(f"{what}, {level}: only {100 * close:.1f}% of the parameters as on the CPU")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", action="store_true", help="run as one rank (the driver starts them)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--backend", choices=["gloo", "nccl", "cuda:gloo"], default="gloo")
    args = parser.parse_args()
    if args.rank:
        rank_main(args)
        return 0
    if not hasattr(dist.ProcessGroup, "boxed"):
        print(f"SKIPPED: the hook needs PyTorch 2.x; this is torch {torch.__version__}")
        return 77
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"SKIPPED: torch {torch.__version__} sees no CUDA device; this test runs on a GPU machine")
        return 77
    runs = [("two ranks over Gloo", "gloo", 2)]
    if args.device == "cuda":
        runs.append(("one rank over NCCL", "nccl", 1))
        runs.append(("two ranks over a CUDA-only Gloo group", "cuda:gloo", 2))
    problems = []
    for what, backend, world in runs:
        results, error = run(args.device, backend, world)
        if error is not None:
            problems.append(f"{what}: {error}")
            continue
        problems += compare(results, what)
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
