"""accordion.plot: `python -m accordion.plot regimes` and `... runs` write PNGs of a
schedule's regimes and of train-dist runs, name the file at fault in one line
and exit 1 when one is missing or of another kind, and exit 2 on a usage error;
the functions behind them raise the package's errors."""

import os
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

import accordion
import accordion.plot
from conftest import regime_detect, write_grads

PNG = b"\x89PNG\r\n\x1a\n"


def plot(*arguments, cwd):
    return subprocess.run([sys.executable, "-m", "accordion.plot"] + [str(a) for a in arguments], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG


def write_metrics(path, epochs=4, scale=1.0, critical=False):
    """A train-dist metrics file (accordion.metrics) with what the plot reads, written with h5py."""
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "accordion.metrics"
        f.attrs["format_version"] = "1.1"
        f.attrs["complete"] = 1
        f.attrs["mode"] = "accordion" if critical else "compress"
        f["parameters/ndim"] = np.array([2, 1], dtype=np.int32)
        accuracy = np.linspace(0.5, 0.8, epochs) * scale
        accuracy[1] = np.nan  # not evaluated
        f["epochs/epoch"] = np.arange(epochs, dtype=np.int64)
        f["epochs/test_accuracy"] = accuracy
        f["epochs/accuracy"] = accuracy
        f["epochs/floats_sent_total"] = np.cumsum(np.full(epochs, 1e6 * scale))
        f["epochs/seconds"] = np.full(epochs, 2.0)
        f["epochs/batch_size"] = np.full(epochs, 64, dtype=np.int64)
        if critical:
            f["epochs/critical"] = (np.arange(epochs) < 2)[:, None].repeat(2, axis=1).astype(np.uint8)


@pytest.fixture
def files(tmp_path, programs):
    write_grads(tmp_path / "grads.h5")
    regime_detect(programs, "grads.h5", "--interval", "2", "-o", "sched.h5", cwd=tmp_path)
    write_metrics(tmp_path / "low.h5")
    write_metrics(tmp_path / "acc1.h5", scale=0.9, critical=True)
    write_metrics(tmp_path / "acc2.h5", epochs=3, scale=0.95, critical=True)
    return tmp_path


def test_the_commands_write_pngs(files):
    done = plot("regimes", "grads.h5", "sched.h5", "-o", "regimes.png", "--parameters", "2", cwd=files)
    assert done.returncode == 0, done.stderr
    assert is_png(files / "regimes.png")
    assert done.stderr == "accordion.plot: wrote regimes.png\n"
    done = plot("runs", "low=low.h5", "accordion=acc1.h5,acc2.h5", "-o", "runs.png", "--title", "two runs",
                cwd=files)
    assert done.returncode == 0, done.stderr
    assert is_png(files / "runs.png")


def test_the_commands_name_the_file_at_fault_and_exit_1(files):
    missing = plot("regimes", "nothing.h5", "sched.h5", cwd=files)
    assert (missing.returncode, missing.stderr) == (1, "accordion.plot: error: nothing.h5: no such file\n")
    foreign = plot("regimes", "sched.h5", "sched.h5", cwd=files)
    assert (foreign.returncode, foreign.stderr) == (1, "accordion.plot: error: sched.h5: not an accordion.grads file\n")
    unlabelled = plot("runs", "low.h5", cwd=files)
    assert (unlabelled.returncode, unlabelled.stderr) == \
        (1, "accordion.plot: error: low.h5: expected LABEL=FILE[,FILE...]\n")
    assert not any(name.endswith(".png") for name in os.listdir(files))


def test_help_explains_both_commands_and_usage_errors_exit_2(files):
    done = plot("--help", cwd=files)
    assert done.returncode == 0, done.stderr
    assert "python -m accordion.plot regimes GRADS.h5 SCHED.h5" in done.stdout
    assert "python -m accordion.plot runs LABEL=FILE" in done.stdout
    done = plot("regimes", "grads.h5", cwd=files)
    assert done.returncode == 2
    assert "accordion.plot regimes: error: the following arguments are required: SCHED.h5" in done.stderr


def main(capsys, *arguments):
    """accordion.plot.main() in this process: (exit status, stderr)."""
    try:
        status = accordion.plot.main([str(a) for a in arguments])
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().err


def test_every_refusal_in_one_line(files, capsys, monkeypatch):
    monkeypatch.chdir(files)
    for arguments, message in [
            (["regimes", "grads.h5", "grads.h5"], "grads.h5: not an accordion.schedule file"),
            (["regimes", "grads.h5", "sched.h5", "-o", "no/such/folder/r.png"],
             "no/such/folder/r.png: No such file or directory"),
            (["runs", "low=low.h5", "a=acc1.h5,gone.h5"], "gone.h5: no such file"),
            (["runs", "a=grads.h5"], "grads.h5: not an accordion.metrics file (train-dist --metrics writes one)"),
            (["runs", "=low.h5"], "=low.h5: expected LABEL=FILE[,FILE...]"),
            (["runs", "a="], "a=: expected LABEL=FILE[,FILE...]")]:
        assert main(capsys, *arguments) == (1, f"accordion.plot: error: {message}\n"), arguments
    for arguments in [[], ["draw"], ["runs"], ["regimes", "grads.h5", "sched.h5", "--parameters", "0"],
                      ["regimes", "grads.h5", "sched.h5", "--parameters", "two"]]:
        status, err = main(capsys, *arguments)
        assert status == 2, (arguments, err)
        assert re.search(r"^accordion\.plot( regimes| runs)?: error: ", err, re.M), (arguments, err)
    assert not any(name.endswith(".png") for name in os.listdir(files))


def test_the_functions_write_the_same_plots(files):
    output = accordion.plot.regimes(files / "grads.h5", files / "sched.h5", files / "r.png", parameters=2)
    assert output == files / "r.png" and is_png(output)
    accordion.plot.runs({"low": files / "low.h5", "accordion": [files / "acc1.h5", files / "acc2.h5"]},
                        files / "runs.png", title="two runs")
    assert is_png(files / "runs.png")


def test_the_functions_raise_the_packages_errors(files, monkeypatch):
    monkeypatch.chdir(files)
    with pytest.raises(accordion.FileError, match=r"^sched\.h5: not an accordion\.grads file$"):
        accordion.plot.regimes("sched.h5", "sched.h5", "r.png")
    with pytest.raises(accordion.FileError, match=r"^gone\.h5: no such file$"):
        accordion.plot.runs({"a": "gone.h5"}, "runs.png")
    with pytest.raises(accordion.UsageError, match=r"^parameters: "):
        accordion.plot.regimes("grads.h5", "sched.h5", "r.png", parameters=0)
    with pytest.raises(accordion.UsageError, match=r"^runs: nothing to plot"):
        accordion.plot.runs({}, "runs.png")
    with pytest.raises(accordion.UsageError, match=r"^a: no metrics files$"):
        accordion.plot.runs({"a": []}, "runs.png")


def test_the_module_needs_no_compiled_part_nor_torch(tmp_path):
    """Loaded by its path, as scripts/plot_regimes.py and plot_runs.py load it from the source tree."""
    code = ("import importlib.util, sys\n"
            "spec = importlib.util.spec_from_file_location('accordion_plot', sys.argv[1])\n"
            "module = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(module)\n"
            "assert 'torch' not in sys.modules and 'accordion' not in sys.modules, sorted(sys.modules)\n"
            "assert not any(m.startswith('matplotlib') for m in sys.modules)  # imported when drawing\n"
            "assert issubclass(module.UsageError, module.Error)\n")
    done = subprocess.run([sys.executable, "-c", code, accordion.plot.__file__], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
