"""accordion.detect and Schedule.save: the schedule regime-detect writes for the same
input and options, byte for byte, and its refusals in the program's words."""

import json
import math
import os
import subprocess
import tempfile

import pytest

import accordion
from accordion import _library

PARAMETERS = [("fc1.weight", (8, 4)), ("fc1.bias", (8,)), ("fc2.weight", (2, 8))]
EPOCHS = 12


def norms_of(epoch, column):
    # Fast change early, slow later, a jump at epoch 6 for the first parameter.
    return (column + 1) * (3.0 / (epoch + 1) + (0.8 if column == 0 and epoch >= 6 else 0.0))


def lr_of(epoch):
    return 0.1 if epoch < 8 else 0.01


def write_grads(path):
    names = [n for n, _ in PARAMETERS]
    dims = [d for _, s in PARAMETERS for d in s]
    f = _library.call(_library.classes.GradsFile, path, names, [len(s) for _, s in PARAMETERS], dims,
                      "test_detect", "test_detect", "mlp", "synthetic", 64, 2, 1, -1, False)
    for e in range(EPOCHS):
        f.append_epoch(lr_of(e), 1.0, 0.5, math.nan, math.nan, 10, 640, 1.0,
                       [norms_of(e, c) for c in range(len(PARAMETERS))])
    f.finish()


def run_program(programs, folder, args):
    """regime-detect as a user runs it from PATH (argv[0] 'regime-detect'), in `folder`, writing sched.h5."""
    binary = os.path.abspath(os.path.join(programs, "regime-detect"))
    return subprocess.run(["regime-detect", *args], executable=binary, cwd=folder, capture_output=True,
                          text=True)


CASES = [
    {},
    {"eta": 0.3, "interval": 2},
    {"interval": 1, "low": "topk:0.1", "high": "topk:0.01", "granularity": "model"},
    {"mode": "batch", "interval": 2, "low": 128, "high": 512, "monotone": True},
]


@pytest.mark.parametrize("options", CASES, ids=["defaults", "eta-interval", "topk-model", "batch-monotone"])
def test_detect_writes_the_programs_file_byte_for_byte(programs, tmp_path, monkeypatch, options):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    write_grads("grads.h5")
    schedule = accordion.detect("grads.h5", **options)
    schedule.save("api.h5")
    args = accordion.detect_command("grads.h5", **options)
    done = run_program(programs, tmp_path, args)
    assert done.returncode == 0, done.stderr
    with open("sched.h5", "rb") as program, open("api.h5", "rb") as api:
        program_bytes, api_bytes = program.read(), api.read()
    assert len(api_bytes) == len(program_bytes) and api_bytes == program_bytes
    # And the schedule returned is the file's.
    loaded = accordion.load_schedule("sched.h5")
    assert schedule.epochs == loaded.epochs == EPOCHS
    assert schedule.critical_epochs() == loaded.critical_epochs()
    assert schedule.mode == (options.get("mode") or "compression")


def test_norms_given_as_a_dict_give_the_files_decisions(tmp_path):
    write_grads(str(tmp_path / "grads.h5"))
    from_file = accordion.detect(str(tmp_path / "grads.h5"), interval=2)
    norms = {name: [norms_of(e, c) for e in range(EPOCHS)] for c, (name, _) in enumerate(PARAMETERS)}
    from_norms = accordion.detect(norms, parameters=PARAMETERS, lr=[lr_of(e) for e in range(EPOCHS)], interval=2)
    assert from_norms.parameters == from_file.parameters
    for e in range(EPOCHS):
        assert from_norms.levels(e) == from_file.levels(e)
        assert from_norms.reasons(e) == from_file.reasons(e)


@pytest.mark.parametrize("options, kind", [
    ({"eta": -1}, accordion.UsageError),
    ({"interval": 0}, accordion.UsageError),
    ({"low": "powersgd:0"}, accordion.UsageError),
    ({"mode": "sideways"}, accordion.UsageError),
    ({"monotone": True}, accordion.UsageError),
    ({"grads": "missing.h5"}, accordion.FileError),
    ({"grads": "not-hdf5.h5"}, accordion.FileError),
], ids=["eta", "interval", "low", "mode", "monotone-compression", "missing", "not-hdf5"])
def test_detect_refuses_what_the_program_refuses_in_its_words(programs, tmp_path, monkeypatch, options, kind):
    monkeypatch.chdir(tmp_path)
    write_grads("grads.h5")
    (tmp_path / "not-hdf5.h5").write_text("a text file\n")
    grads = options.pop("grads", "grads.h5")
    with pytest.raises(kind) as raised:
        accordion.detect(grads, **options)
    done = run_program(programs, tmp_path, accordion.detect_command(grads, **options))
    assert done.returncode == (2 if kind is accordion.UsageError else 1)
    program_line = [line for line in done.stderr.splitlines() if line.startswith("regime-detect: error: ")][0]
    assert program_line[len("regime-detect: error: "):].startswith(str(raised.value))
    assert not os.path.exists(tmp_path / "sched.h5")


def test_critical_epochs_are_the_programs_critical_regimes(programs, tmp_path, monkeypatch):
    # fc1.bias alone jumps at epoch 4 and so makes epoch 5 critical for itself only: a
    # vector is always sent whole, so neither the program's regimes nor the package's
    # critical epochs count it.
    monkeypatch.chdir(tmp_path)
    names = [n for n, _ in PARAMETERS]
    dims = [d for _, s in PARAMETERS for d in s]
    f = _library.call(_library.classes.GradsFile, "grads.h5", names, [len(s) for _, s in PARAMETERS], dims,
                      "test_detect", "test_detect", "mlp", "synthetic", 64, 2, 1, -1, False)
    for e in range(10):
        bias = 5.0 if e >= 4 else 1.0
        f.append_epoch(0.1, 1.0, 0.5, math.nan, math.nan, 10, 640, 1.0, [1.0, bias, 1.0])
    f.finish()
    schedule = accordion.detect("grads.h5", interval=1)
    assert schedule.critical(5)["fc1.bias"] and not schedule.critical(5)["fc1.weight"]
    done = run_program(programs, tmp_path, ["grads.h5", "--interval", "1", "--json"])
    assert done.returncode == 0, done.stderr
    regimes = json.loads(done.stdout)["critical_regimes"]
    program_epochs = [e for r in regimes for e in range(r["first"], r["last"] + 1)]
    assert schedule.critical_epochs() == program_epochs == [0, 1]


def test_detect_writes_no_file(tmp_path, monkeypatch):
    write_grads(str(tmp_path / "grads.h5"))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.chdir(scratch)
    accordion.detect(str(tmp_path / "grads.h5"), interval=2)
    norms = {name: [norms_of(e, c) for e in range(EPOCHS)] for c, (name, _) in enumerate(PARAMETERS)}
    accordion.detect(norms, parameters=PARAMETERS, lr=0.1)
    assert list(scratch.iterdir()) == []


def test_norms_are_checked_as_the_reader_checks_them(tmp_path):
    norms = {name: [1.0, 2.0, 3.0] for name, _ in PARAMETERS}
    norms["fc2.weight"][1] = math.nan
    with pytest.raises(accordion.UsageError,
                       match=r"^accordion.detect\(norms\): gradient norm is NaN at epoch 1, parameter 'fc2.weight'"):
        accordion.detect(norms, parameters=PARAMETERS, lr=0.1)
    with pytest.raises(accordion.UsageError, match=r"learning rate of epoch 0 is -1"):
        accordion.detect({name: [1.0] for name, _ in PARAMETERS}, parameters=PARAMETERS, lr=-1.0)


def test_norms_without_parameters_are_refused(tmp_path):
    with pytest.raises(accordion.UsageError, match=r"grads: norms given as a dict need parameters="):
        accordion.detect({"fc1.weight": [1.0, 2.0]})
    with pytest.raises(accordion.UsageError, match=r"grads: the norms' names and parameters' names differ"):
        accordion.detect({"fc9.weight": [1.0, 2.0]}, parameters=[("fc1.weight", (2,))], lr=0.1)


def test_save_replaces_a_file_and_names_an_unwritable_one(tmp_path):
    write_grads(str(tmp_path / "grads.h5"))
    schedule = accordion.detect(str(tmp_path / "grads.h5"), interval=2)
    target = tmp_path / "sched.h5"
    target.write_text("old")
    schedule.save(target)
    assert accordion.load_schedule(target).epochs == EPOCHS
    with pytest.raises(accordion.FileError, match=r"no-such-folder/s\.h5: directory .*no-such-folder does not exist"):
        schedule.save(tmp_path / "no-such-folder" / "s.h5")
