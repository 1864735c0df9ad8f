"""Ports for the ranks of multi-process tests, and the starting of such ranks."""

import os
import socket
import subprocess
import sys

_held = []


def free_port():
    """A port on 127.0.0.1 held for the rest of this process: bound with SO_REUSEADDR,
    not listening. Connections are refused as at a free port and the ranks' store can
    open there, but no other socket (another test's Gloo pair, say) takes it meanwhile."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _held.append(s)
    return s.getsockname()[1]


def start_ranks(worker, arguments, cwd, world, seconds):
    """Runs `worker` with `arguments` as `world` ranks (Gloo's environment: one thread
    each, a fresh port) and waits for all of them: [(exit status, stdout, stderr)] per
    rank, or None where they are still running after `seconds` (then killed)."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world),
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    processes = [subprocess.Popen([sys.executable, worker] + [str(a) for a in arguments], cwd=cwd,
                                  env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for rank in range(world)]
    results = []
    try:
        for p in processes:
            out, err = p.communicate(timeout=seconds)
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in processes:
            p.kill()
        return None
    return results
