"""Shared pieces of the package's tests: starting a run of several ranks (each its
own process, Gloo on the CPU, one thread) and finding the toolkit's programs.

Environment: ACC_BIN, the folder of the built programs (regime-detect); default
build/bin of this tree.
"""

import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "ddp_worker.py")
# A run that has not ended by then waits for a rank that will not come: a hang.
RUN_SECONDS = 120


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(arguments, cwd, world=2):
    """Runs ddp_worker.py with `arguments` on `world` ranks and waits for all of them."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    processes = [subprocess.Popen([sys.executable, WORKER] + [str(a) for a in arguments], cwd=cwd,
                                  env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for rank in range(world)]
    results = []
    try:
        for p in processes:
            out, err = p.communicate(timeout=RUN_SECONDS)
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        pytest.fail(f"ddp_worker.py {' '.join(map(str, arguments))}: still running after {RUN_SECONDS} s (a hang)")
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
