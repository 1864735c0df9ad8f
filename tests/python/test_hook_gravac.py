"""compression_hook with GraVAC (CompressionState(gravac=...)): its extreme
settings against DDP and against the fixed levels they must send, its count of
floats against train-dist --gravac's, a resumed run against an uninterrupted
one, and what it refuses. A window longer than the run keeps every decision off
the clock (the throughput rules run only at a window's end), so runs repeat."""

import json
import os
import subprocess

import h5py
import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

import accordion
from conftest import Mlp, needs_hook, run_ranks

STEPS = 5
FAMILIES = ["topk", "dgc", "randomk", "powersgd"]
NEVER = "100000"  # a window no run reaches


def run(tmp_path, *arguments):
    ranks = run_ranks(["compress", "--steps", STEPS, *arguments], cwd=tmp_path)
    assert ranks.codes == [0, 0], ranks.describe()
    return json.loads(ranks.stdout(0))


def gravac(tmp_path, family, epsilon, *more):
    return run(tmp_path, "--epochs", "2", "--gravac", family, "--gravac-epsilon", epsilon, "--gravac-window", NEVER,
               *more)


def choices(result):
    return [(step["choice"], step["factor"]) for epoch in result["epochs"] for step in epoch["gravac"]]


@needs_hook
@pytest.mark.parametrize("family", ["topk", "powersgd"])
def test_at_epsilon_one_every_step_is_dense_and_ddps_own(tmp_path, family):
    # No compressed level keeps all of a gradient's energy, so a gain of 1 is never met.
    result = gravac(tmp_path, family, "1")
    assert choices(result) == [("dense", 1.0)] * 2 * STEPS
    assert result["parameters"] == run(tmp_path, "--epochs", "2")["parameters"]  # bit for bit


@needs_hook
def test_at_a_tiny_epsilon_every_step_sends_the_first_candidate(tmp_path):
    # The first candidate is theta_s x theta_min = 20x: topk keeping 1/20 of the entries.
    result = gravac(tmp_path, "topk", "1e-9")
    assert choices(result) == [("candidate", 20.0)] * 2 * STEPS
    assert {step["theta_min"] for e in result["epochs"] for step in e["gravac"]} == {10.0}
    assert result["parameters"] != run(tmp_path, "--epochs", "2")["parameters"]
    # What it sends per step: the matrices as topk:0.05 sends them, the vectors whole,
    # and GraVAC's own sums (4 doubles) and step time (1 double).
    fixed = run(tmp_path, "--epochs", "2", "--compress", "topk:0.05")
    assert [e["floats"] for e in result["epochs"]] == [e["floats"] + STEPS * 10 for e in fixed["epochs"]]


@needs_hook
@pytest.mark.parametrize("family", FAMILIES)
def test_floats_sent_equal_train_dists(one_rank, programs, tmp_path, family):
    # Both extremes, so that the candidate's level and dense are both counted.
    for epsilon in ("1e-9", "1"):
        done = subprocess.run([os.path.join(programs, "train-dist"), "--model", "mlp", "--dataset", "synthetic",
                               "--epochs", "1", "--train-samples", "256", "--test-samples", "64", "--batch-size", "64",
                               "--gravac", family, "--gravac-epsilon", epsilon, "--gravac-window", NEVER,
                               "--nproc", "1", "--threads", "1", "--metrics", "m.h5", "--force", "-q"],
                              cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        with h5py.File(tmp_path / "m.h5", "r") as f:
            per_step = f["epochs/floats_sent"][0] / f["epochs/steps"][0]
        model = DistributedDataParallel(Mlp())
        state = accordion.CompressionState(model, gravac=accordion.Gravac(family, epsilon=float(epsilon),
                                                                          window=int(NEVER)))
        model.register_comm_hook(state, accordion.compression_hook)
        for _ in range(2):
            torch.nn.functional.cross_entropy(model(torch.randn(64, 3072)), torch.randint(10, (64,))).backward()
        assert state.floats_sent == 2 * per_step, (family, epsilon)
        expected = "dense" if epsilon == "1" else "candidate"
        assert [s.choice for s in state.take_gravac_steps()] == [expected] * 2, (family, epsilon)


@needs_hook
@pytest.mark.parametrize("family", FAMILIES)
def test_16_bit_buckets_go_through_gravac_as_float32(one_rank, family):
    # As the bucket sync does: a bf16 model's gradients are exchanged as float32
    # copies, so GraVAC takes the same choices and sends as much as for float32,
    # and hands back finite bf16 gradients.
    x, y = torch.randn(64, 3072), torch.randint(10, (64,))

    def steps(kind):
        torch.manual_seed(3)
        net = Mlp().to(kind)
        model = DistributedDataParallel(net)
        state = accordion.CompressionState(model, gravac=accordion.Gravac(family, epsilon=1e-9, window=int(NEVER)))
        model.register_comm_hook(state, accordion.compression_hook)
        for _ in range(2):
            torch.nn.functional.cross_entropy(model(x.to(kind)).float(), y).backward()
        assert all(p.grad.dtype == kind and torch.isfinite(p.grad.float()).all() for p in net.parameters())
        return state.floats_sent, [s.choice for s in state.take_gravac_steps()]

    assert steps(torch.bfloat16) == steps(torch.float32) == (steps(torch.float32)[0], ["candidate"] * 2)


@needs_hook
@pytest.mark.parametrize("family", ["dgc", "powersgd"])
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, family):
    # The memories, DGC's momentum, PowerSGD's Q and the smoothed gains (which the
    # steps' records hold) must all come back.
    common = ("--epochs", "4", "--gravac", family, "--gravac-epsilon", "0.5", "--gravac-window", NEVER,
              "--gravac-theta-min", "2")
    straight = run(tmp_path, *common, "--save-after", "1")
    resumed = run(tmp_path, *common, "--start", "2")
    assert resumed["parameters"] == straight["parameters"]
    assert resumed["epochs"] == straight["epochs"][2:]
    assert "dense" not in {step["choice"] for e in straight["epochs"] for step in e["gravac"]}, straight


@needs_hook
def test_ranks_with_other_settings_stop_every_rank(tmp_path):
    ranks = run_ranks(["compress", "--gravac", "topk", "--gravac-epsilon-rank1", "0.5"], cwd=tmp_path)
    assert ranks.codes == [1, 1], ranks.describe()
    for rank in (0, 1):
        assert "ddp_worker: error: gravac: ranks disagree on GraVAC's settings" in ranks.stderr(rank), \
            ranks.describe()


@needs_hook
def test_what_gravac_refuses(one_rank):
    def refused(pattern, **arguments):
        with pytest.raises(accordion.UsageError, match=pattern):
            accordion.CompressionState(one_rank, **arguments)

    refused(r"^gravac: must be topk, dgc, randomk or powersgd, not 'qsgd'$", gravac="qsgd")
    refused(r"^epsilon: must be a compression gain in \(0, 1\], not 1.5$", gravac=accordion.Gravac("topk", epsilon=1.5))
    refused(r"^theta_max: must be a compression factor at least theta_min \(10\), not 5$",
            gravac=accordion.Gravac("topk", theta_max=5))
    refused(r"^window: must be at least 1 step, not 0$", gravac=accordion.Gravac("topk", window=0))
    refused(r"^policy: must be 'exponential' or 'geometric', not 'linear'$",
            gravac=accordion.Gravac("topk", policy="linear"))
    refused(r"^gain: must be 'squared' or 'norm', not 'plain'$", gravac=accordion.Gravac("topk", gain="plain"))
    refused(r"^batch_size: must be at least 1 sample, not 0$", gravac=accordion.Gravac("topk", batch_size=0))
    refused(r"^error_feedback: GraVAC always keeps", gravac="topk", error_feedback=False)
    refused(r"not compress and gravac$", compress="topk:0.1", gravac="topk")
    with pytest.raises(accordion.UsageError, match=r"^epsilon: must be a finite number, not nan$"):
        accordion.Gravac("topk", epsilon=float("nan"))
    state = accordion.CompressionState(one_rank, gravac="dgc")
    with pytest.raises(accordion.UsageError, match=r"^levels: GraVAC chooses a compression factor every step"):
        state.levels
    assert state.take_gravac_steps() == []
    with pytest.raises(accordion.UsageError, match=r"^state_dict: holds no GraVAC state"):
        state.load_state_dict(accordion.CompressionState(one_rank, "none").state_dict())
    with pytest.raises(accordion.UsageError, match=r"^state_dict: saved with GraVAC"):
        accordion.CompressionState(one_rank, "none").load_state_dict(state.state_dict())
    with pytest.raises(accordion.UsageError, match=r"^take_gravac_steps: this state was not made with gravac="):
        accordion.CompressionState(one_rank, "none").take_gravac_steps()


@needs_hook
def test_one_sync_answers_for_gravac(one_rank):
    # GraVAC's sync: its momentum (DGC's matrices once a compressed step ran) and its
    # state, which a state_dict in the layout of earlier versions (GraVAC's entries
    # under "gravac" rather than "state") restores as well.
    torch.manual_seed(0)
    model = DistributedDataParallel(Mlp())
    state = accordion.CompressionState(model, gravac=accordion.Gravac("dgc", epsilon=1e-9, window=int(NEVER)))
    model.register_comm_hook(state, accordion.compression_hook)
    torch.nn.functional.cross_entropy(model(torch.randn(64, 3072)), torch.randint(10, (64,))).backward()
    assert sorted(state.momentum_in_gradient) == ["fc1.weight", "fc2.weight", "fc3.weight"]
    saved = state.state_dict()
    # GraVAC's controller inputs (the same on every rank) apart from the rank's own entries.
    entries = {**saved["ranks"]["0"][1], **saved["shared"][0]}
    assert list(saved["shared"][0]) == ["gravac/inputs"] and saved["gravac"] is True
    assert "fc1.weight/error" in entries
    earlier = {"state": {}, "gravac": entries, "epoch": saved["epoch"], "steps": saved["steps"], "rank": 0,
               "world_size": 1}
    again = accordion.CompressionState(DistributedDataParallel(Mlp()), gravac=accordion.Gravac("dgc", epsilon=1e-9,
                                                                                               window=int(NEVER)))
    again.load_state_dict(earlier)
    restored = again.state_dict()
    restored = {**restored["ranks"]["0"][1], **restored["shared"][0]}
    assert sorted(restored) == sorted(entries)
    assert all(torch.equal(restored[n], entries[n]) for n in entries)
