"""Schedules read through the package, and the errors users meet: each one line
that names the file or setting, raised on every rank alike (no rank left waiting)."""

import h5py
import pytest
import torch

import accordion
from conftest import EPOCHS, run_ranks
from ddp_worker import Net


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def test_levels_and_regimes_as_the_file_holds_them(schedules):
    s = accordion.load_schedule(schedules / "levels.h5", Net())
    assert s.mode == "compression" and s.epochs == EPOCHS and s.interval == 2
    assert s.low == "powersgd:4" and s.high == "powersgd:1" and s.source == "grads.h5"
    with h5py.File(schedules / "levels.h5", "r") as f:
        levels = [text(x) for x in f["levels"][:]]
        names = [text(x) for x in f["parameters/name"][:]]
        assert s.names == names
        for e in range(EPOCHS):
            assert s.levels(e) == {n: levels[i] for n, i in zip(names, f["epochs/level"][e])}
            assert s.critical(e) == {n: bool(c) for n, c in zip(names, f["epochs/critical"][e])}
        matrices = [len(shape) >= 2 for _, shape in s.parameters]
        assert s.critical_epochs() == [e for e in range(EPOCHS)
                                       if any(c and m for c, m in zip(f["epochs/critical"][e], matrices))]
    assert s.levels(0)["fc1.bias"] == "none" and s.levels(0)["fc1.weight"] == "powersgd:4"
    assert s.reasons(0)["fc1.weight"] == "first interval"
    assert s.levels(EPOCHS + 3, extend_last=True) == s.levels(EPOCHS - 1)


def test_batch_sizes_and_learning_rates_for_the_loader(schedules):
    s = accordion.Schedule(schedules / "batch.h5")
    with h5py.File(schedules / "batch.h5", "r") as f:
        sizes, scales = f["epochs/batch_size"][:], f["epochs/lr_scale"][:]
    assert set(sizes) == {64, 256}
    for e in range(EPOCHS):
        plan = s.batch(e, 0.1, world_size=2)
        assert plan == accordion.BatchEpoch(sizes[e] // 2, sizes[e], 0.1 * scales[e])
    assert s.batch(0, 0.1).batch_size == sizes[0]  # no process group: one rank


def message_of(error):
    message = str(error.value)
    assert "\n" not in message, message
    return message


def test_errors_name_the_file_and_the_problem(schedules):
    with pytest.raises(accordion.FileError) as e:
        accordion.load_schedule(schedules / "missing.h5")
    assert message_of(e).startswith(f"{schedules / 'missing.h5'}: no such schedule file")
    (schedules / "junk.h5").write_text("not a schedule")
    with pytest.raises(accordion.FileError) as e:
        accordion.load_schedule(schedules / "junk.h5")
    assert message_of(e) == f"{schedules / 'junk.h5'}: not an HDF5 file"
    with pytest.raises(accordion.FileError) as e:
        accordion.load_schedule(schedules / "grads.h5")
    assert message_of(e).startswith(f"{schedules / 'grads.h5'}: ") and "accordion.schedule" in str(e.value)
    with pytest.raises(accordion.UsageError) as e:
        accordion.load_schedule(schedules / "levels.h5", Net(renamed=True))
    assert message_of(e) == (f"{schedules / 'levels.h5'} does not fit this model: (1) the model's parameter "
                             "'head.weight' is missing; (2) the model's parameter 'head.bias' is missing; "
                             "(3) it lists 'fc2.weight', which the model does not have; (4) it lists 'fc2.bias', "
                             "which the model does not have")
    assert accordion.parameter_mismatches([("a", (2, 2))], [("a", (2,))]) == ["'a' has shape 2, the model's is 2x2"]
    batch = accordion.Schedule(schedules / "batch.h5")
    with pytest.raises(accordion.UsageError, match=r"is a batch schedule; levels\(\) reads compression schedules"):
        batch.levels(0)
    with pytest.raises(accordion.UsageError, match="does not split evenly over 3 ranks"):
        batch.batch(0, 0.1, world_size=3)
    with pytest.raises(accordion.UsageError, match=r"covers epochs 0-5, not epoch 6 \(extend_last=True"):
        batch.batch(EPOCHS, 0.1)


def test_the_recorder_refuses_a_model_outside_ddp(tmp_path):
    with pytest.raises(accordion.UsageError, match="^model: GradientRecorder records inside DistributedDataParallel"):
        accordion.GradientRecorder(torch.nn.Linear(2, 2), tmp_path / "grads.h5")


def last_line(ranks, rank):
    lines = ranks.stderr(rank).strip().splitlines()
    return lines[-1] if lines else ""


def assert_every_rank_stops(ranks, message):
    assert ranks.codes == [1, 1], ranks.describe()
    for rank in (0, 1):
        assert last_line(ranks, rank).startswith("ddp_worker: error: " + message), ranks.describe()


def test_two_ranks_stop_on_a_missing_schedule(tmp_path):
    ranks = run_ranks(["schedule", "--schedule", "missing.h5"], cwd=tmp_path)
    assert_every_rank_stops(ranks, "missing.h5: no such schedule file")


def test_two_ranks_stop_on_a_schedule_of_another_model(schedules):
    ranks = run_ranks(["schedule", "--schedule", "levels.h5", "--renamed"], cwd=schedules)
    assert_every_rank_stops(ranks, "levels.h5 does not fit this model: (1) the model's parameter 'head.weight'")
    ranks = run_ranks(["schedule", "--schedule", "batch.h5"], cwd=schedules)
    assert ranks.codes == [0, 0], ranks.describe()
    assert ranks.stdout(0).strip() == '{"batch_size": 32, "global_batch_size": 64, "lr": 0.1}'


def test_a_file_only_rank_0_can_write_stops_every_rank(tmp_path):
    # rank 0 alone writes: its failure must reach rank 1 before rank 1 trains into a collective
    (tmp_path / "taken").mkdir()
    ranks = run_ranks(["train", "--output", "taken", "--epochs", "1"], cwd=tmp_path)
    assert_every_rank_stops(ranks, "taken: ")
    ranks = run_ranks(["train", "--output", "none.h5", "--start", "2"], cwd=tmp_path)
    assert_every_rank_stops(ranks, "none.h5: ")
