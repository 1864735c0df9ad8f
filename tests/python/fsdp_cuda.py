"""compress_fsdp on CUDA tensors over NCCL, against the same runs on the CPU over
Gloo (fsdp_worker.py's train scenario, 10 steps each). Run by test_fsdp.py (pytest)
and, on a GPU machine, by tests/gpu/python_hook_cuda.sh (scripts/gpu/run-all.sh's
gpu.python_hook_cuda), which has no pytest: `python fsdp_cuda.py` exits 0 when every
check holds, 1 otherwise, and 77 (skipped) where torch sees no CUDA device, has no
NCCL or no FSDP2.

One rank per GPU, as NCCL wants (it refuses two ranks on one device): 2 replicas x
2 shards with 4 GPUs or more, 2 replicas x 1 shard with 2 or 3, and with one GPU
1 x 1, where the replica exchange runs over a group of one rank (the hook, the
exchange's device path and GraVAC's end of step on the device, not the averaging).
The checks:
  - level none and powersgd:2 on the device against the CPU: parameters within
    1e-5 (none) and 1e-4 (powersgd:2; float32 arithmetic of other kernels), the
    same floats sent;
  - GraVAC (topk) at epsilon 1, every step dense, against level none on the device
    (within 1e-6): the shards handed back as zeros and their average added once
    every module has come, on FSDP's streams;
  - GraVAC at a tiny epsilon: every step the first candidate (20x), finite
    parameters, and the floats the CPU's run sends.
`--device cpu --ranks N` runs the "device" runs on the CPU over Gloo as well, as if
there were N GPUs, which checks the harness on a machine without one.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from ports import start_ranks  # noqa: E402

WORKER = os.path.join(HERE, "fsdp_worker.py")
RUN_SECONDS = 240
NEVER = "100000"  # a GraVAC window no run reaches


def unavailable():
    """Why the check cannot run here (None: it can)."""
    import torch
    import torch.distributed as dist
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception:
        return f"needs FSDP2 (torch.distributed.fsdp.fully_shard); this is torch {torch.__version__}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device; this check runs on a GPU machine (scripts/gpu/run-all.sh)"
    if not dist.is_nccl_available():
        return "this torch has no NCCL"
    return None


def layout(gpus):
    """(replicas, shards) for one rank per GPU."""
    return (2, 2) if gpus >= 4 else (2, 1) if gpus >= 2 else (1, 1)


def launch(arguments, world, cwd):
    """Every rank's JSON of `fsdp_worker.py train ARGUMENTS`; raises RuntimeError with the ranks' errors."""
    results = start_ranks(WORKER, ["train", *arguments], cwd, world, RUN_SECONDS)
    if results is None:
        raise RuntimeError(f"fsdp_worker.py train {' '.join(arguments)}: still running after {RUN_SECONDS} s")
    if any(code != 0 for code, _, _ in results):
        raise RuntimeError(f"fsdp_worker.py train {' '.join(arguments)}:\n" +
                           "\n".join(f"rank {r}: exit {c}\n{e[-2000:]}" for r, (c, _, e) in enumerate(results)))
    return [json.loads(out) for _, out, _ in results]


def difference(a, b):
    return max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))


def failures(cwd, device="cuda", gpus=None):
    """The checks that do not hold, one line each (empty: all hold)."""
    import torch
    gpus = gpus or torch.cuda.device_count()
    replicas, shards = layout(gpus)
    world = replicas * shards
    on_device = ["--layout", f"{replicas}x{shards}", "--device", device,
                 "--backend", "nccl" if device == "cuda" else "gloo"]
    on_cpu = ["--layout", f"{replicas}x{shards}"]
    gravac = ["--gravac", "topk", "--gravac-window", NEVER]
    found = []

    def runs(arguments):
        return launch(on_device + arguments, world, cwd), launch(on_cpu + arguments, world, cwd)

    for spec, tolerance in (("none", 1e-5), ("powersgd:2", 1e-4)):
        device_run, cpu_run = runs(["--compress", spec])
        for rank, (d, c) in enumerate(zip(device_run, cpu_run)):
            if difference(d["parameters"], c["parameters"]) > tolerance:
                found.append(f"{spec}, rank {rank}: the device's parameters are "
                             f"{difference(d['parameters'], c['parameters']):.3g} away from the CPU's (> {tolerance})")
            if d["floats"] != c["floats"]:
                found.append(f"{spec}, rank {rank}: {d['floats']} floats sent on the device, {c['floats']} on the CPU")
    none = launch(on_device + ["--compress", "none"], world, cwd)
    dense = launch(on_device + gravac + ["--gravac-epsilon", "1"], world, cwd)
    for rank, (d, n) in enumerate(zip(dense, none)):
        choices = {s["choice"] for e in d["epochs"] for s in e["gravac"]}
        if choices != {"dense"} or difference(d["parameters"], n["parameters"]) > 1e-6:
            found.append(f"gravac at epsilon 1, rank {rank}: choices {sorted(choices)}, parameters "
                         f"{difference(d['parameters'], n['parameters']):.3g} away from level none's")
    device_run, cpu_run = runs(gravac + ["--gravac-epsilon", "1e-9"])
    for rank, (d, c) in enumerate(zip(device_run, cpu_run)):
        steps = [(s["choice"], s["factor"]) for e in d["epochs"] for s in e["gravac"]]
        if steps != [("candidate", 20.0)] * 10 or not d["finite"] or d["floats"] != c["floats"]:
            found.append(f"gravac at a tiny epsilon, rank {rank}: steps {steps[:2]}..., finite {d['finite']}, "
                         f"{d['floats']} floats sent on the device, {c['floats']} on the CPU")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--ranks", type=int, help="--device cpu: as if there were this many GPUs")
    args = parser.parse_args()
    if args.device == "cuda":
        reason = unavailable()
        if reason:
            print(f"SKIPPED: {reason}")
            return 77
    import tempfile
    with tempfile.TemporaryDirectory() as cwd:
        try:
            found = failures(cwd, args.device, args.ranks)
        except RuntimeError as e:
            found = [str(e)]
    for line in found:
        print(f"FAILED: {line}", file=sys.stderr)
    if not found:
        print("compress_fsdp on the device: every check holds")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
