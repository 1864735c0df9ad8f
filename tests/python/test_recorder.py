"""GradientRecorder under DDP with two ranks over Gloo: the file's numbers against
an independent recomputation, its layout against docs/formats.md, regime-detect
on it, and resuming a stopped run."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

import accordion
from conftest import TREE, needs_hook, regime_detect, run_ranks

NAMES = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
SHAPES = [(16, 12), (16,), (4, 16), (4,)]


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def train(tmp_path, *extra, reference="ref.json", output="grads.h5"):
    ranks = run_ranks(["train", "--output", output, "--reference", reference, *extra], cwd=tmp_path)
    return ranks, json.load(open(tmp_path / reference))


def check_layout(path, epochs, complete):
    """The layout of docs/formats.md, read with h5py (code the toolkit did not write)."""
    with h5py.File(path, "r") as f:
        a = f.attrs
        assert text(a["format"]) == "accordion.grads" and text(a["format_version"]).startswith("1."), dict(a)
        assert text(a["producer"]).startswith("accordion.GradientRecorder "), dict(a)
        assert "ddp_worker.py" in text(a["command_line"]), dict(a)
        assert a["complete"] == complete and a["world_size"] == 2 and a["batch_size"] == 8, dict(a)
        assert text(a["model"]) == "net" and text(a["dataset"]) == "synthetic" and a["seed"] == 7, dict(a)
        assert [text(n) for n in f["parameters/name"][:]] == NAMES
        assert f["parameters/ndim"].dtype == np.int32 and list(f["parameters/ndim"][:]) == [2, 1, 2, 1]
        assert f["parameters/shape"].dtype == np.int64
        assert [tuple(row[:n]) for row, n in zip(f["parameters/shape"][:], f["parameters/ndim"][:])] == SHAPES
        assert list(f["parameters/numel"][:]) == [int(np.prod(s)) for s in SHAPES]
        e = f["epochs"]
        assert e["norm"].dtype == np.float64 and e["norm"].shape == (epochs, len(NAMES))
        assert e["norm"].maxshape == (None, len(NAMES)), "rows must be appendable (unlimited first dimension)"
        assert np.all(np.isfinite(e["norm"][:])) and np.all(e["norm"][:] >= 0)
        assert list(e["epoch"][:]) == list(range(epochs))
        for column in ("lr", "loss", "accuracy", "test_loss", "test_accuracy", "seconds"):
            assert e[column].dtype == np.float64 and e[column].shape == (epochs,), column
        for column in ("steps", "samples"):
            assert e[column].dtype == np.int64 and e[column].shape == (epochs,), column
        assert np.all(np.isnan(e["test_loss"][:])) and np.all(e["seconds"][:] > 0)
        assert "steps" not in f and "snapshots" not in f and "profile" not in f
        return {k: e[k][:] for k in ("norm", "lr", "loss", "accuracy", "steps", "samples")}


def check_against_reference(stored, reference, rows):
    for row, r in zip(rows, reference["epochs"]):
        assert stored["lr"][row] == r["lr"] and stored["steps"][row] == r["steps"], (row, r)
        assert stored["samples"][row] == r["samples"]
        assert stored["loss"][row] == pytest.approx(r["loss"], rel=1e-12)
        assert stored["accuracy"][row] == pytest.approx(r["accuracy"], rel=1e-12)
        # float32 sums (as grad-dump keeps them) against float64 ones
        np.testing.assert_allclose(stored["norm"][row], r["norms"], rtol=2e-6, err_msg=f"epoch {row}")
        assert max(r["sum_error"].values()) < 1e-5, r["sum_error"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One run of 6 epochs with the default hook, shared by the tests that read it."""
    folder = tmp_path_factory.mktemp("recorded")
    ranks, reference = train(folder, "--epochs", "6")
    assert ranks.codes == [0, 0], ranks.describe()
    return folder, reference


def test_norms_equal_an_independent_recomputation(recorded):
    folder, reference = recorded
    stored = check_layout(folder / "grads.h5", 6, complete=1)
    check_against_reference(stored, reference, range(6))
    assert list(stored["lr"]) == [0.2, 0.2, 0.2, 0.02, 0.02, 0.02]


def test_a_wrapped_hook_sees_what_it_would_without_the_recorder(tmp_path):
    # The fp16 hook compresses what is sent; the recorder must still see the raw local gradient.
    ranks, reference = train(tmp_path, "--hook", "fp16", "--epochs", "2")
    assert ranks.codes == [0, 0], ranks.describe()
    check_against_reference(check_layout(tmp_path / "grads.h5", 2, complete=1), reference, range(2))


@needs_hook
def test_the_compressing_hook_under_the_recorder_sees_raw_gradients(tmp_path):
    # PowerSGD rank 1 sends a fraction of each gradient; the recorder sums what the rank computed.
    ranks, reference = train(tmp_path, "--hook", "powersgd", "--epochs", "2")
    assert ranks.codes == [0, 0], ranks.describe()
    check_against_reference(check_layout(tmp_path / "grads.h5", 2, complete=1), reference, range(2))


def write_independent_file(path, reference):
    """The same numbers, written with h5py as docs/formats.md shows."""
    epochs = reference["epochs"]
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.grads"
        f.attrs["format_version"] = "1.0"
        f.attrs["producer"] = "test 1"
        f.attrs["command_line"] = "test"
        f["parameters/name"] = np.array(reference["names"], dtype=h5py.string_dtype())
        f["parameters/ndim"] = np.array([len(s) for s in reference["shapes"]], dtype=np.int32)
        f["parameters/shape"] = np.array([list(s) + [0] * (2 - len(s)) for s in reference["shapes"]], dtype=np.int64)
        f["parameters/numel"] = np.array([int(np.prod(s)) for s in reference["shapes"]], dtype=np.int64)
        f["epochs/norm"] = np.array([e["norms"] for e in epochs], dtype=np.float64)
        f["epochs/lr"] = np.array([e["lr"] for e in epochs], dtype=np.float64)
        f["epochs/steps"] = np.array([e["steps"] for e in epochs], dtype=np.int64)


def test_regime_detect_gives_the_schedule_of_the_same_numbers(recorded, programs):
    tmp_path, reference = recorded
    write_independent_file(tmp_path / "same.h5", reference)
    settings = ["--interval", "1", "--eta", "0.3", "--low", "powersgd:2", "--high", "powersgd:1"]
    regime_detect(programs, "grads.h5", *settings, "-o", "sched.h5", cwd=tmp_path)
    regime_detect(programs, "same.h5", *settings, "-o", "same-sched.h5", cwd=tmp_path)
    with h5py.File(tmp_path / "sched.h5", "r") as a, h5py.File(tmp_path / "same-sched.h5", "r") as b:
        for name in ("epochs/critical", "epochs/reason", "epochs/level"):
            np.testing.assert_array_equal(a[name][:], b[name][:], err_msg=name)
        np.testing.assert_allclose(a["epochs/ratio"][:], b["epochs/ratio"][:], rtol=1e-5, equal_nan=True)
        assert [text(x) for x in a["levels"][:]] == [text(x) for x in b["levels"][:]]
        # the learning-rate drop at epoch 3 makes every parameter critical there
        assert a["epochs/critical"][3].all() and a["epochs/reason"][3, 0] == 4
    # Accordion's rule re-implemented with h5py alone agrees with the schedule.
    check = subprocess.run([sys.executable, os.path.join(TREE, "tests", "e2e", "check_schedule.py"),
                            "grads.h5", "sched.h5"], cwd=tmp_path, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_stopped_run_resumes(tmp_path, programs):
    # Killed after epoch 2: epochs 0-2 are in the file, marked incomplete.
    ranks, first = train(tmp_path, "--crash-after", "2", reference="first.json")
    assert ranks.codes == [3, 3], ranks.describe()
    stopped = check_layout(tmp_path / "grads.h5", 3, complete=0)
    check_against_reference(stopped, first, range(3))
    regime_detect(programs, "grads.h5", "--interval", "1", "-o", "partial.h5", cwd=tmp_path)
    # Resumed from a checkpoint of epoch 2 (epochs 0-1 done): epoch 2 is dropped and trained again.
    ranks, second = train(tmp_path, "--start", "2", reference="second.json")
    assert ranks.codes == [0, 0], ranks.describe()
    resumed = check_layout(tmp_path / "grads.h5", 4, complete=1)
    np.testing.assert_array_equal(resumed["norm"][:2], stopped["norm"][:2])
    check_against_reference(resumed, second, [2, 3])


def test_a_lock_file_linked_to_another_file_is_refused_and_left_alone(one_rank, tmp_path):
    """The recorder holds its output as the programs do: a hard link planted at the
    lock's name is refused, and the file it leads to keeps its bytes."""
    victim = tmp_path / "victim.txt"
    victim.write_text("PRECIOUS\n")
    os.link(victim, tmp_path / ".grads.h5.lock")
    with pytest.raises(accordion.FileError, match=r"lock file .* is not a regular file with one link"):
        accordion.GradientRecorder(one_rank, tmp_path / "grads.h5")
    assert victim.read_text() == "PRECIOUS\n"
    assert not (tmp_path / "grads.h5").exists()
