"""Shared pieces of the package's tests: starting a run of several ranks (each its
own process, Gloo on the CPU, one thread), a group of one rank in the test's own
process, and finding the toolkit's programs.

Environment: ACC_BIN, the folder of the built programs (regime-detect); default
build/bin of this tree.
"""

import faulthandler
import math
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddp_worker import Net, let_gloo_finish
from ports import free_port, start_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "ddp_worker.py")
# The compressing hook hands the process group to C++ with ProcessGroup.boxed() (PyTorch 2.x).
needs_hook = pytest.mark.skipif(not hasattr(dist.ProcessGroup, "boxed"),
                                reason="CompressionState needs PyTorch 2.x (ProcessGroup.boxed()); "
                                       "test_hook.py checks the error this torch gives")
# A run that has not ended by then waits for a rank that will not come: a hang.
RUN_SECONDS = 120


def _seconds(name, default):
    text = os.environ.get(name, str(default))
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise pytest.UsageError(f"{name}: must be a finite number of seconds above 0, not '{text}'")
    return value


# A test (set-up and tear-down included) still going by then hangs in this process:
# every thread's stack is printed and pytest ends with a failure instead of waiting.
TEST_SECONDS = _seconds("ACC_TEST_SECONDS", 600)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # To file descriptor 2 itself: pytest.ini keeps pytest from capturing it.
    faulthandler.dump_traceback_later(TEST_SECONDS, exit=True, file=2)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


class Ranks:
    def __init__(self, results):
        self.results = results  # (exit status, stdout, stderr) per rank

    @property
    def codes(self):
        return [r[0] for r in self.results]

    def stderr(self, rank):
        return self.results[rank][2]

    def stdout(self, rank):
        return self.results[rank][1]

    def describe(self):
        return "\n".join(f"rank {i}: exit {c}\n{err}" for i, (c, _, err) in enumerate(self.results))


def run_ranks(arguments, cwd, world=2, worker=WORKER):
    """Runs `worker` (ddp_worker.py) with `arguments` on `world` ranks and waits for all of them."""
    results = start_ranks(worker, arguments, cwd, world, RUN_SECONDS)
    if results is None:
        pytest.fail(f"{os.path.basename(worker)} {' '.join(map(str, arguments))}: still running after {RUN_SECONDS} s (a hang)")
    return Ranks(results)


@pytest.fixture(scope="session")
def programs():
    """The folder of the toolkit's programs."""
    folder = os.environ.get("ACC_BIN") or os.path.join(TREE, "build", "bin")
    if not os.path.exists(os.path.join(folder, "regime-detect")):
        pytest.skip(f"{folder}/regime-detect: not built (set ACC_BIN to the programs' folder)")
    return folder


def regime_detect(programs, *arguments, cwd):
    done = subprocess.run([os.path.join(programs, "regime-detect")] + [str(a) for a in arguments], cwd=cwd,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"regime-detect {' '.join(map(str, arguments))}: {done.stderr}"
    return done


# Epochs of the schedules made from write_grads().
EPOCHS = 6


def write_grads(path):
    """A gradient-statistics file of Net's parameters, written with h5py alone."""
    from ddp_worker import Net
    model = Net()
    names = [n for n, _ in model.named_parameters()]
    shapes = [tuple(p.shape) for p in model.parameters()]
    norm = np.array([[1.0, 0.5, 2.0, 0.1]] * EPOCHS)
    norm[2] *= [2.0, 1.0, 1.05, 3.0]  # big changes at epoch 2 for fc1.weight and fc2.bias
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = "1.0"
        f["parameters/name"] = np.array(names, dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([len(s) for s in shapes], dtype=np.int32)
        f["parameters/shape"] = np.array([list(s) + [0] * (2 - len(s)) for s in shapes], dtype=np.int64)
        f["parameters/numel"] = np.array([int(np.prod(s)) for s in shapes], dtype=np.int64)
        f["epochs/norm"] = norm
        f["epochs/lr"] = np.array([0.1] * 4 + [0.01] * 2)
        f["epochs/steps"] = np.full(EPOCHS, 10, dtype=np.int64)


@pytest.fixture
def schedules(tmp_path, programs):
    write_grads(tmp_path / "grads.h5")
    regime_detect(programs, "grads.h5", "--interval", "2", "--low", "powersgd:4", "--high", "powersgd:1",
                  "-o", "levels.h5", cwd=tmp_path)
    regime_detect(programs, "grads.h5", "--interval", "2", "--mode", "batch", "--low", "64", "--high", "256",
                  "-o", "batch.h5", cwd=tmp_path)
    return tmp_path


class Mlp(torch.nn.Module):
    """train-dist's mlp on its synthetic dataset (3 x 32 x 32 images, 10 classes)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3072, 256)
        self.fc2 = torch.nn.Linear(256, 256)
        self.fc3 = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


@pytest.fixture(scope="module")
def one_rank():
    """A process group of one rank in this process, for the checks made before any step."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield DistributedDataParallel(Net())
    let_gloo_finish()
    dist.destroy_process_group()
