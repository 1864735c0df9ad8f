"""accordion.compression_hook under DDP with two ranks over Gloo: level none
against DDP's own allreduce, the floats sent against the wire sizes worked out
here from the shapes, a schedule replayed epoch by epoch, a resumed run against
an uninterrupted one, and the errors users meet."""

import json
import os

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import accordion
from conftest import needs_hook, run_ranks
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


def run(tmp_path, *arguments):
    ranks = run_ranks(["compress", "--steps", STEPS, *arguments], cwd=tmp_path)
    assert ranks.codes == [0, 0], ranks.describe()
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
    assert sorted(saved["state"]) == ["fc1.weight/error", "fc1.weight/powersgd_q", "fc2.weight/error",
                                      "fc2.weight/powersgd_q"]
    assert saved["epoch"] == 1 and saved["steps"] == 2 * STEPS


@needs_hook
def test_a_bad_spec_stops_every_rank(tmp_path):
    ranks = run_ranks(["compress", "--compress", "powersgd:0"], cwd=tmp_path)
    assert ranks.codes == [1, 1], ranks.describe()
    for rank in (0, 1):
        assert ranks.stderr(rank).strip().splitlines()[-1] == (
            "ddp_worker: error: compress: 'powersgd:0': RANK must be a whole number from 1 to 1000000000, "
            "e.g. powersgd:2"), ranks.describe()


@pytest.fixture(scope="module")
def one_rank():
    """A process group of one rank in this process, for the checks made before any step."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield DistributedDataParallel(Net())
    dist.destroy_process_group()


def _free_port():
    from conftest import free_port
    return free_port()


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
    with pytest.raises(accordion.UsageError, match="give either compress .* not neither$"):
        accordion.CompressionState(one_rank)
    with pytest.raises(accordion.UsageError, match="not both$"):
        accordion.CompressionState(one_rank, "topk:0.1", schedule=schedules / "levels.h5")
    with pytest.raises(accordion.UsageError) as e:
        accordion.CompressionState(one_rank, "zip:3")
    assert message_of(e).startswith("compress: 'zip:3' is not a compressor spec; one of none, fp16, powersgd:RANK")
    with pytest.raises(accordion.UsageError, match=r"is a batch schedule; CompressionState replays compression"):
        accordion.CompressionState(one_rank, schedule=schedules / "batch.h5")
    with pytest.raises(accordion.UsageError, match="does not belong to this model: the model's parameter 'head.weight'"):
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
    with pytest.raises(accordion.UsageError, match=r"^seed: must be a whole number in \[0, 2\^32\)"):
        accordion.CompressionState(one_rank, "none", seed=-1)
