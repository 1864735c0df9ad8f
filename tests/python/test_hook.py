"""accordion.compression_hook under DDP with two ranks over Gloo: level none
against DDP's own allreduce, the floats sent against the wire sizes worked out
here from the shapes, a schedule replayed epoch by epoch, a resumed run against
an uninterrupted one, and the errors users meet."""

import inspect
import json
import os
import subprocess

import h5py
import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import accordion
from conftest import Mlp, needs_hook, regime_detect, run_ranks
from ddp_worker import Net

SHAPES = {"fc1.weight": (16, 12), "fc1.bias": (16,), "fc2.weight": (4, 16), "fc2.bias": (4,)}
STEPS = 5


def floats_per_step(level, shape):
    """Floats one rank sends for one tensor at `level`, from the compressors' wire
    formats: PowerSGD sends P and Q (rows + cols) x rank where that is under half
    the matrix (PyTorch's powerSGD_hook rule), the matrix whole elsewhere; fp16 two
    bytes per value; none four."""
    n = 1
    for d in shape:
        n *= d
    if level == "none":
        return n
    name, _, parameter = level.partition(":")
    if name == "fp16":
        return n / 2
    if name == "powersgd":
        rows, cols = shape[0], n // shape[0]
        rank = min(int(parameter), rows, cols)
        return (rows + cols) * rank if 2 * (rows + cols) * rank < rows * cols else n
    raise ValueError(level)


# Results of runs that read and write no files, by their arguments. Such a run is
# deterministic (the tests compare runs bit for bit), so one launch serves every test
# that asks for the same arguments: several tests compare with the same DDP run.
_runs = {}
FILE_OPTIONS = {"--save-after", "--start", "--record", "--schedule", "--output", "--reference", "--state", "--crash-after"}


def run(tmp_path, *arguments):
    key = tuple(str(a) for a in arguments)
    if key in _runs:
        return json.loads(_runs[key])
    ranks = run_ranks(["compress", "--steps", STEPS, *arguments], cwd=tmp_path)
    assert ranks.codes == [0, 0], ranks.describe()
    if not FILE_OPTIONS.intersection(key):
        _runs[key] = ranks.stdout(0)
    return json.loads(ranks.stdout(0))


@needs_hook
def test_level_none_is_ddps_own_allreduce(tmp_path):
    ddp = run(tmp_path, "--epochs", "2")
    hooked = run(tmp_path, "--epochs", "2", "--compress", "none")
    assert hooked["parameters"] == ddp["parameters"]  # bit for bit
    assert [e["floats"] for e in hooked["epochs"]] == [STEPS * sum(floats_per_step("none", s) for s in SHAPES.values())] * 2


@needs_hook
@pytest.mark.parametrize("spec", ["powersgd:1", "fp16"])
def test_floats_sent_are_the_wire_sizes(tmp_path, spec):
    result = run(tmp_path, "--epochs", "2", "--compress", spec)
    # A spec compresses the matrices; vectors go uncompressed, as train-dist --compress sends them.
    levels = {name: spec if len(shape) == 2 else "none" for name, shape in SHAPES.items()}
    expected = STEPS * sum(floats_per_step(levels[name], shape) for name, shape in SHAPES.items())
    for epoch in result["epochs"]:
        assert epoch["levels"] == levels
        assert epoch["floats"] == expected, epoch
    assert result["epochs"][-1]["steps"] == 2 * STEPS
    # Compression changes the training: the parameters differ from DDP's.
    assert result["parameters"] != run(tmp_path, "--epochs", "2")["parameters"]


@needs_hook
@pytest.mark.parametrize("rank", [1, 2])
def test_powersgd_is_pytorchs_powersgd_hook(tmp_path, rank):
    # Same rank, seed, warm start and error feedback, one bucket for the model; compression
    # starts at step 2, after DDP regrouped its buckets (PyTorch's hook keeps its state by
    # bucket position, which is why it refuses an earlier start): 20 steps of training
    # agree to float32 rounding.
    one_bucket = ("--start-step", "2", "--bucket-mb", "25")
    ours = run(tmp_path, "--epochs", "4", "--compress", f"powersgd:{rank}", *one_bucket)
    theirs = run(tmp_path, "--epochs", "4", "--torch-powersgd", rank, *one_bucket)
    for a, b in zip(ours["parameters"], theirs["parameters"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ours["parameters"] != run(tmp_path, "--epochs", "4")["parameters"]


@needs_hook
@pytest.mark.parametrize("option", [("--ddp-option", "gradient_as_bucket_view"), ("--ddp-option", "static_graph"),
                                    ("--accumulate", "2")])
def test_ddps_options_change_nothing_the_hook_does(tmp_path, option):
    # Level none against DDP's own allreduce under the same option, and PowerSGD with
    # and without the option (no_sync: the accumulated gradient of the synchronised step).
    ddp = run(tmp_path, "--epochs", "2", *option)
    assert run(tmp_path, "--epochs", "2", "--compress", "none", *option)["parameters"] == ddp["parameters"]
    with_option = run(tmp_path, "--epochs", "2", "--compress", "powersgd:1", *option)
    if option[0] == "--ddp-option":
        assert with_option == run(tmp_path, "--epochs", "2", "--compress", "powersgd:1")
    else:
        levels = {name: "powersgd:1" if len(shape) == 2 else "none" for name, shape in SHAPES.items()}
        assert [e["floats"] for e in with_option["epochs"]] == [
            STEPS * sum(floats_per_step(levels[n], s) for n, s in SHAPES.items())] * 2
        assert with_option["epochs"][-1]["steps"] == 2 * STEPS


@needs_hook
def test_a_rank_with_other_levels_stops_every_rank(tmp_path):
    ranks = run_ranks(["compress", "--compress", "powersgd:1", "--compress-rank1", "powersgd:2"], cwd=tmp_path)
    assert ranks.codes == [1, 1], ranks.describe()
    for rank in (0, 1):
        assert ranks.stderr(rank).strip().splitlines()[-1] == (
            f"ddp_worker: error: workers disagree on the tensors or their compression levels (rank {rank}); every "
            "worker must pass the same ones"), ranks.describe()


@needs_hook
def test_online_accordion_decides_as_regime_detect_on_the_same_norms(tmp_path, programs):
    # The run records rank 0's gradients under the recorder; regime-detect on that file
    # must give the levels the hook used online, epoch by epoch.
    result = run(tmp_path, "--epochs", "6", "--accordion", "--record", "grads.h5")
    regime_detect(programs, "grads.h5", "--interval", "2", "--eta", "0.5", "--low", "powersgd:4", "--high",
                  "powersgd:1", "-o", "sched.h5", cwd=tmp_path)
    schedule = accordion.load_schedule(tmp_path / "sched.h5", Net())
    for epoch in result["epochs"]:
        assert epoch["levels"] == schedule.levels(epoch["epoch"]), epoch
        assert epoch["critical"] == schedule.critical(epoch["epoch"]), epoch
        levels = epoch["levels"]
        assert epoch["floats"] == STEPS * sum(floats_per_step(levels[n], s) for n, s in SHAPES.items()), epoch
    assert {e["levels"]["fc1.weight"] for e in result["epochs"]} == {"powersgd:4", "powersgd:1"}


@needs_hook
def test_online_accordion_resumes_as_if_uninterrupted(tmp_path):
    # Saved after epoch 2 (the norms so far, rank 0's sums of the epoch), resumed at epoch 3.
    straight = run(tmp_path, "--epochs", "6", "--accordion", "--save-after", "2")
    resumed = run(tmp_path, "--epochs", "6", "--accordion", "--start", "3")
    assert resumed["parameters"] == straight["parameters"]
    assert resumed["epochs"] == straight["epochs"][3:]


@needs_hook
def test_a_schedule_is_replayed_epoch_by_epoch(schedules):
    result = run(schedules, "--epochs", "6", "--schedule", "levels.h5")
    schedule = accordion.load_schedule(schedules / "levels.h5", Net())
    seen = set()
    for epoch in result["epochs"]:
        levels = schedule.levels(epoch["epoch"])
        seen.update(levels.values())
        assert epoch["levels"] == levels
        assert epoch["floats"] == STEPS * sum(floats_per_step(levels[n], s) for n, s in SHAPES.items()), epoch
    assert {"powersgd:4", "powersgd:1"} <= seen, "the schedule must change levels for this test to mean anything"


@needs_hook
@pytest.mark.parametrize("buckets", ["1e-4", "25"])
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, buckets):
    # PowerSGD's warm-started Q and every error memory travel in state_dict(); one
    # bucket per parameter, or one for the whole model.
    straight = run(tmp_path, "--epochs", "4", "--compress", "powersgd:1", "--bucket-mb", buckets,
                   "--save-after", "1")
    resumed = run(tmp_path, "--epochs", "4", "--compress", "powersgd:1", "--bucket-mb", buckets, "--start", "2")
    assert resumed["parameters"] == straight["parameters"]
    assert [e["floats"] for e in resumed["epochs"]] == [e["floats"] for e in straight["epochs"][2:]]
    saved = torch.load(tmp_path / "state.rank0.pt")["hook"]
    owner, entries, sums = saved["ranks"]["0"]
    assert sorted(name for name in entries if not name.startswith("exchange/")) == [
        "fc1.weight/error", "fc1.weight/powersgd_q", "fc2.weight/error", "fc2.weight/powersgd_q"]
    assert owner == {"rank": 0, "world_size": 2} and sums is None
    assert saved["epoch"] == 1 and saved["steps"] == 2 * STEPS and saved["world_size"] == 2


@needs_hook
def test_a_run_resumed_through_torch_distributed_checkpoint_equals_an_uninterrupted_one(tmp_path):
    # dcp.save and dcp.load with the state as a Stateful beside the model and optimizer:
    # each rank's memories under its own key (DCP keeps one copy of a key that several
    # ranks save), so every rank gets its own back.
    common = ("--epochs", "4", "--compress", "powersgd:1", "--dcp")
    straight = run(tmp_path, *common, "--save-after", "1")
    resumed = run(tmp_path, *common, "--start", "2")
    assert resumed["parameters"] == straight["parameters"]
    assert resumed["epochs"] == straight["epochs"][2:]
    from torch.distributed.checkpoint import FileSystemReader
    keys = FileSystemReader(str(tmp_path / "state.dcp")).read_metadata().state_dict_metadata
    assert {"hook.ranks.0", "hook.ranks.1", "hook.steps", "hook.epoch", "hook.world_size"} <= set(keys)


@needs_hook
@pytest.mark.parametrize("through", ["torch.save", "dcp"])
def test_a_state_of_two_ranks_goes_on_in_one_without_the_memories(tmp_path, one_rank, through):
    # Elastic: the steps and epoch go on, each rank's memories are dropped, with a warning.
    dcp = ("--dcp",) if through == "dcp" else ()
    run(tmp_path, "--epochs", "2", "--compress", "powersgd:1", "--save-after", "1", *dcp)
    state = accordion.CompressionState(one_rank, "powersgd:1")
    with pytest.warns(UserWarning, match=r"^state_dict: saved by 2 ranks, loaded by 1 rank; each rank's error "
                                         r"memories, PowerSGD's Q and DGC's momentum are dropped"):
        if dcp:
            from torch.distributed import checkpoint
            checkpoint.load({"hook": state}, checkpoint_id=str(tmp_path / "state.dcp"))
        else:
            state.load_state_dict(torch.load(tmp_path / "state.rank0.pt")["hook"])
    assert (state.epoch, state.steps) == (1, 2 * STEPS)
    assert state.state_dict()["ranks"]["0"][1] == {}


@needs_hook
def test_a_bad_spec_stops_every_rank(tmp_path):
    ranks = run_ranks(["compress", "--compress", "powersgd:0"], cwd=tmp_path)
    assert ranks.codes == [1, 1], ranks.describe()
    for rank in (0, 1):
        assert ranks.stderr(rank).strip().splitlines()[-1] == (
            "ddp_worker: error: compress: 'powersgd:0': RANK must be a whole number from 1 to 1000000000, "
            "e.g. powersgd:2"), ranks.describe()


EVERY_COMPRESSOR = ["none", "fp16", "powersgd:2", "topk:0.01", "randomk:0.01", "dgc:0.01", "signsgd", "efsignsgd",
                    "qsgd:127", "terngrad"]


@needs_hook
def test_floats_sent_equal_train_dists_for_every_compressor(one_rank, programs, tmp_path):
    torch.manual_seed(0)
    for spec in EVERY_COMPRESSOR:
        done = subprocess.run([os.path.join(programs, "train-dist"), "--model", "mlp", "--dataset", "synthetic",
                               "--epochs", "1", "--train-samples", "256", "--test-samples", "64", "--batch-size", "64",
                               "--compress", spec, "--nproc", "1", "--threads", "1", "--metrics", "m.h5", "--force",
                               "-q"], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        with h5py.File(tmp_path / "m.h5", "r") as f:
            per_step = f["epochs/floats_sent"][0] / f["epochs/steps"][0]
        model = DistributedDataParallel(Mlp())
        state = accordion.CompressionState(model, spec)
        model.register_comm_hook(state, accordion.compression_hook)
        for _ in range(2):
            torch.nn.functional.cross_entropy(model(torch.randn(64, 3072)), torch.randint(10, (64,))).backward()
        assert state.floats_sent == 2 * per_step, spec


@needs_hook
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_compressor_works_on_16_bit_buckets(one_rank, dtype):
    # A model kept in 16 bits hands DDP 16-bit buckets: each compressor averages
    # float32 copies (its memories in fp32) and rounds the average back once. Each
    # sends what it sends for the float32 model and gives finite 16-bit gradients;
    # level none on one rank gives back the local gradient bit for bit.
    x, y = torch.randn(64, 3072), torch.randint(10, (64,))

    def step(kind, spec):
        torch.manual_seed(1)
        net = Mlp().to(kind)
        model = DistributedDataParallel(net)
        state = accordion.CompressionState(model, spec)
        model.register_comm_hook(state, accordion.compression_hook)
        torch.nn.functional.cross_entropy(model(x.to(kind)).float(), y).backward()
        return [p.grad for p in net.parameters()], state.floats_sent

    torch.manual_seed(1)
    local = Mlp().to(dtype)
    torch.nn.functional.cross_entropy(local(x.to(dtype)).float(), y).backward()
    for spec in EVERY_COMPRESSOR:
        grads, sent = step(dtype, spec)
        assert all(g.dtype == dtype and torch.isfinite(g.float()).all() for g in grads), spec
        assert sent == step(torch.float32, spec)[1], spec
        if spec == "none":
            assert all(torch.equal(g, p.grad) for g, p in zip(grads, local.parameters()))


@needs_hook
@pytest.mark.parametrize("spec", ["powersgd:2", "topk:0.1"])
def test_a_bf16_model_trains_as_the_float32_one(one_rank, spec):
    # 40 SGD steps on one fixed batch from the same start, compressed alike: the bf16
    # model's losses follow the float32 model's within 0.05, not bit for bit (bf16
    # keeps 8 bits of mantissa; seen: at most 0.029 with PowerSGD and 0.005 with
    # Top-k, while the loss falls from 2.30 to 1.46 and 1.04).
    x, y = torch.randn(128, 3072), torch.randint(10, (128,))

    def losses(kind):
        torch.manual_seed(2)
        net = Mlp().to(kind)
        model = DistributedDataParallel(net)
        model.register_comm_hook(accordion.CompressionState(model, spec), accordion.compression_hook)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
        out = []
        for _ in range(40):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x.to(kind)).float(), y)
            loss.backward()
            optimizer.step()
            out.append(loss.item())
        return out

    wide, narrow = losses(torch.float32), losses(torch.bfloat16)
    assert wide[-1] < 0.75 * wide[0], "the float32 model must learn for the comparison to mean anything"
    assert max(abs(a - b) for a, b in zip(wide, narrow)) < 0.05, list(zip(wide, narrow))


def test_the_default_levels_are_the_programs(programs):
    # Accordion's defaults are written once, in the toolkit's registry: the package's
    # low and high are regime-detect's --low and --high.
    parameters = inspect.signature(accordion.CompressionState).parameters
    shown = subprocess.run([os.path.join(programs, "regime-detect"), "--help"], capture_output=True, text=True).stdout
    for option, default in (("--low", parameters["low"].default), ("--high", parameters["high"].default)):
        line = next(line for line in shown.splitlines() if line.strip().startswith(option))
        assert f"a compressor spec [{default}]" in line, line
    assert (parameters["low"].default, parameters["high"].default) == ("powersgd:2", "powersgd:1")


def message_of(e):
    return str(e.value)


@pytest.mark.skipif(hasattr(dist.ProcessGroup, "boxed"), reason="PyTorch 2.x has what the hook needs")
def test_an_old_torch_is_told_what_the_hook_needs(one_rank):
    with pytest.raises(accordion.UsageError, match=r"^CompressionState: needs PyTorch 2\.x"):
        accordion.CompressionState(one_rank, "powersgd:2")


@needs_hook
def test_what_is_refused_before_any_step(one_rank, schedules):
    with pytest.raises(accordion.UsageError, match="^model: CompressionState compresses DistributedDataParallel"):
        accordion.CompressionState(Net(), "powersgd:2")
    with pytest.raises(accordion.UsageError, match=r"give one of compress .* accordion=True \(decided online\), "
                                                   r"gravac \(.*\) or auto=True \(.*\), not none of them$"):
        accordion.CompressionState(one_rank)
    with pytest.raises(accordion.UsageError, match="not compress and schedule$"):
        accordion.CompressionState(one_rank, "topk:0.1", schedule=schedules / "levels.h5")
    with pytest.raises(accordion.UsageError, match="not compress and accordion$"):
        accordion.CompressionState(one_rank, "topk:0.1", accordion=True)
    with pytest.raises(accordion.UsageError) as e:
        accordion.CompressionState(one_rank, "zip:3")
    assert message_of(e).startswith("compress: 'zip:3' is not a compressor spec; one of none, fp16, powersgd:RANK")
    with pytest.raises(accordion.UsageError, match=r"is a batch schedule; CompressionState replays compression"):
        accordion.CompressionState(one_rank, schedule=schedules / "batch.h5")
    with pytest.raises(accordion.UsageError, match=r"does not fit this model: \(1\) the model's parameter 'head.weight'"):
        accordion.CompressionState(DistributedDataParallel(Net(renamed=True)), schedule=schedules / "levels.h5")
    with pytest.raises(accordion.FileError, match="missing.h5: no such schedule file"):
        accordion.CompressionState(one_rank, schedule=schedules / "missing.h5")
    state = accordion.CompressionState(one_rank, schedule=schedules / "levels.h5")
    with pytest.raises(accordion.UsageError, match=r"covers epochs 0-5, not epoch 6 \(extend_last=True"):
        state.set_epoch(6)
    assert accordion.CompressionState(one_rank, schedule=schedules / "levels.h5", extend_last=True).set_epoch(9) is None
    with pytest.raises(accordion.UsageError, match="^state_dict: holds state of parameters this model does not "
                                                   "have: head.weight$"):
        state.load_state_dict({"state": {"head.weight/error": torch.zeros(64)}, "epoch": 0, "steps": 0})
    with pytest.raises(accordion.UsageError, match="^state_dict: not a CompressionState.state_dict()"):
        state.load_state_dict({"epoch": 0})
    # Error memories are each rank's own: another rank's state of this world is refused
    # (as are those of earlier versions, which kept the owner beside the entries).
    saved = state.state_dict()
    assert saved["ranks"]["0"][0] == {"rank": 0, "world_size": 1} and saved["world_size"] == 1
    state.load_state_dict(saved)
    with pytest.raises(accordion.UsageError, match=r"^state_dict: saved by rank 1 of 1, loaded on rank 0 of 1; each "
                                                   r"rank's error memories are its own, so a state loads only on the "
                                                   r"rank that saved it \(give each rank its own state_dict\)$"):
        state.load_state_dict({**saved, "ranks": {"1": ({"rank": 1, "world_size": 1}, {}, None)}})
    with pytest.raises(accordion.UsageError, match=r"^state_dict: saved by rank 1 of 1, loaded on rank 0 of 1"):
        state.load_state_dict({"state": {}, "epoch": 0, "steps": 0, "rank": 1, "world_size": 1})
    with pytest.raises(accordion.UsageError, match=r"^state_dict: its 'ranks' must hold the state of the one rank"):
        state.load_state_dict({**saved, "ranks": {}})
    with pytest.raises(accordion.UsageError, match=r"^seed: must be a whole number in \[0, 2\^32\)"):
        accordion.CompressionState(one_rank, "none", seed=-1)


@needs_hook
def test_what_online_accordion_refuses(one_rank):
    with pytest.raises(accordion.UsageError, match=r"^eta: must be a number in \(0, 1e\+06\], not '0'$"):
        accordion.CompressionState(one_rank, accordion=True, eta=0)
    with pytest.raises(accordion.UsageError, match=r"^interval: must be a whole number in \[1, 1000000\], not '0'$"):
        accordion.CompressionState(one_rank, accordion=True, interval=0)
    with pytest.raises(accordion.UsageError, match=r"^low: 'powersgd': powersgd needs RANK, e.g. powersgd:2$"):
        accordion.CompressionState(one_rank, accordion=True, low="powersgd")
    state = accordion.CompressionState(one_rank, accordion=True, interval=2)
    with pytest.raises(accordion.UsageError, match=r"^levels: decided online at set_epoch"):
        state.levels
    with pytest.raises(accordion.UsageError, match=r"^lr: online Accordion needs each epoch's learning rate"):
        state.set_epoch(0)
    state.set_epoch(0, lr=0.1)
    assert state.levels == {"fc1.weight": "powersgd:2", "fc1.bias": "none", "fc2.weight": "powersgd:2",
                            "fc2.bias": "none"}
    assert state.reasons["fc1.weight"] == "first interval" and state.critical["fc2.weight"] is True
    with pytest.raises(accordion.UsageError, match=r"^epoch: online Accordion decides epochs in order; epoch 3 "
                                                   "cannot follow 0"):
        state.set_epoch(3, lr=0.1)
    saved = state.state_dict()
    other = accordion.CompressionState(one_rank, accordion=True, interval=3)
    with pytest.raises(accordion.UsageError, match=r"^state_dict: saved with low powersgd:2, high powersgd:1, "
                                                   "eta 0.5, interval 2; this state has .* interval 3$"):
        other.load_state_dict(saved)
    with pytest.raises(accordion.UsageError, match=r"^state_dict: holds no online Accordion state"):
        state.load_state_dict(accordion.CompressionState(one_rank, "none").state_dict())


@needs_hook
def test_the_automatic_mode_times_its_first_epoch_then_plans_within_its_guard(tmp_path):
    # Two ranks on loopback: the first epoch goes uncompressed and times the step; from
    # the second, rank 0 plans on the link measured on the group and every rank sends
    # its levels (the exchange refuses ranks whose levels differ). Whether compression
    # pays here depends on the machine, so each epoch's levels are checked against the
    # guard's rule on the record's own predictions.
    margin = 0.05
    result = run(tmp_path, "--epochs", "4", "--auto", "--margin", margin)
    first, *rest = result["epochs"]
    assert set(first["levels"].values()) == {"none"}
    assert first["floats"] == STEPS * sum(floats_per_step("none", s) for s in SHAPES.values())
    assert set(first["auto"]["reasons"].values()) == {"measuring"}
    assert first["auto"]["summary"].startswith("measuring: ")
    assert first["auto"]["measured"] is True and first["auto"]["allreduce_bandwidth"] > 0
    assert first["auto"]["steps"] == STEPS and first["auto"]["measured_seconds"] > 0
    for epoch in rest:
        record = epoch["auto"]
        assert record["measured"] is False  # measuring again would take more than 3 % of these short epochs
        levels, reasons = epoch["levels"], record["reasons"]
        assert reasons["fc1.bias"] == reasons["fc2.bias"] == "vector"
        assert levels["fc1.bias"] == levels["fc2.bias"] == "none"
        assert record["predicted_seconds"] > 0 and record["uncompressed_seconds"] > 0
        if record["pays"]:
            assert record["compressed_seconds"] < (1 - margin) * record["uncompressed_seconds"], record
            assert record["summary"].startswith("pays: ")
            assert {reasons["fc1.weight"], reasons["fc2.weight"]} <= {"pays", "budget", "regime", "accuracy"}
        else:
            assert not record["compressed_seconds"] < (1 - margin) * record["uncompressed_seconds"], record
            assert record["summary"].startswith("does not pay: ")
            assert levels["fc1.weight"] == levels["fc2.weight"] == "none"
            assert reasons["fc1.weight"] == reasons["fc2.weight"] == "does not pay"
        assert epoch["floats"] == STEPS * sum(floats_per_step(levels[n], s) for n, s in SHAPES.items()), epoch


@needs_hook
def test_what_the_automatic_mode_refuses(one_rank):
    with pytest.raises(accordion.UsageError, match="not compress and auto$"):
        accordion.CompressionState(one_rank, "topk:0.1", auto=True)
    with pytest.raises(accordion.UsageError, match="not accordion and auto$"):
        accordion.CompressionState(one_rank, accordion=True, auto=True)
    with pytest.raises(accordion.UsageError, match=r"^levels: belongs to the automatic mode; give it with auto=True$"):
        accordion.CompressionState(one_rank, accordion=True, levels=["powersgd:1"])
    with pytest.raises(accordion.UsageError, match=r"^levels: no candidate levels"):
        accordion.CompressionState(one_rank, auto=True, levels="")
    with pytest.raises(accordion.UsageError, match=r"^levels: an empty level in 'powersgd:1,'"):
        accordion.CompressionState(one_rank, auto=True, levels="powersgd:1,")
    with pytest.raises(accordion.UsageError, match=r"^levels: 'zip:3' is not a compressor spec"):
        accordion.CompressionState(one_rank, auto=True, levels=["powersgd:1", "zip:3"])
    with pytest.raises(accordion.UsageError, match=r"^levels: fp16 cannot be planned: no error model for it"):
        accordion.CompressionState(one_rank, auto=True, levels=["fp16"])
    with pytest.raises(accordion.UsageError, match=r"^low: qsgd:8 cannot be planned"):
        accordion.CompressionState(one_rank, auto=True, low="qsgd:8")
    with pytest.raises(accordion.UsageError, match=r"^margin: must be in \[0, 1\)$"):
        accordion.CompressionState(one_rank, auto=True, margin=1)
    with pytest.raises(accordion.UsageError, match=r"^drift: must be a number > 0$"):
        accordion.CompressionState(one_rank, auto=True, drift=0)
    with pytest.raises(accordion.UsageError, match=r"^drift: must be a number, not 'x'$"):
        accordion.CompressionState(one_rank, auto=True, drift="x")
    state = accordion.CompressionState(one_rank, auto=True)
    with pytest.raises(accordion.UsageError, match=r"^lr: online Accordion needs each epoch's learning rate"):
        state.set_epoch(0)
    state.set_epoch(0, lr=0.1)
    assert set(state.levels.values()) == {"none"}
    assert [r["epoch"] for r in state.auto_records] == [0]
    saved = state.state_dict()
    with pytest.raises(accordion.UsageError, match=r"^state_dict: saved with auto=True, which this state does not run"):
        accordion.CompressionState(one_rank, accordion=True).load_state_dict(saved)
    with pytest.raises(accordion.UsageError, match=r"^state_dict: holds no automatic mode's state"):
        state.load_state_dict(accordion.CompressionState(one_rank, accordion=True).state_dict())
    with pytest.raises(accordion.UsageError, match=r"^auto_records: this state was not made with auto=True"):
        accordion.CompressionState(one_rank, "none").auto_records


@needs_hook
def test_momentum_in_gradient_names_the_parameters_dgc_sent(one_rank):
    # DGC's aggregated gradient carries momentum for the matrices it compresses; the
    # vectors go whole, and PowerSGD carries none.
    torch.manual_seed(0)
    for spec, expected in (("dgc:0.1", ["fc1.weight", "fc2.weight", "fc3.weight"]), ("powersgd:1", [])):
        model = DistributedDataParallel(Mlp())
        state = accordion.CompressionState(model, spec)
        assert state.momentum_in_gradient == []  # nothing sent yet
        model.register_comm_hook(state, accordion.compression_hook)
        torch.nn.functional.cross_entropy(model(torch.randn(64, 3072)), torch.randint(10, (64,))).backward()
        assert sorted(state.momentum_in_gradient) == expected, spec
