"""What `pip install ./python` puts in the environment besides the package: the
five programs as console scripts (which check torch, then run the program built
with the package), and their man pages."""

import importlib.metadata
import os
import re
import subprocess
import sys

import pytest
import torch

PROGRAMS = ("grad-dump", "regime-detect", "train-dist", "compress-bench", "comm-profile")


def distribution():
    try:
        return importlib.metadata.distribution("accordion-toolkit")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the package is not installed with pip (no accordion-toolkit distribution)")


def located(dist, f):
    path = str(dist.locate_file(f))
    if os.path.exists(path):
        return path
    # pip install --target records these paths relative to its temporary prefix
    # ("../../bin/..."); the files lie under the target folder.
    return str(dist.locate_file(os.path.join(*[part for part in f.parts if part != ".."])))


def installed(predicate):
    dist = distribution()
    return {f.name: located(dist, f) for f in (dist.files or []) if predicate(f)}


def console_scripts():
    scripts = installed(lambda f: f.parent.name == "bin" and "accordion" not in f.parts and f.name in PROGRAMS)
    assert sorted(scripts) == sorted(PROGRAMS), f"console scripts installed: {sorted(scripts)}"
    return scripts


def test_each_program_runs_from_the_environment_and_names_its_torch():
    release = re.match(r"[0-9.]+[0-9]", torch.__version__).group(0)
    for program, path in console_scripts().items():
        done = subprocess.run([path, "--version"], capture_output=True, text=True)
        assert done.returncode == 0, f"{program} --version: {done.stderr}"
        lines = done.stdout.splitlines()
        assert lines[0].startswith(f"{program} (Accordion toolkit) ")
        assert f"LibTorch {release}" in lines[1], f"{program} --version: {lines}"


def test_a_program_does_the_programs_work(tmp_path):
    detect = console_scripts()["regime-detect"]
    done = subprocess.run([detect, "missing.h5"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.startswith("regime-detect: error: missing.h5")


def test_the_man_pages_are_installed():
    pages = installed(lambda f: f.suffix == ".1" and f.parent.name == "man1")
    assert sorted(pages) == sorted(p + ".1" for p in PROGRAMS)
    for path in pages.values():
        with open(path, encoding="utf-8") as f:
            assert "\n.TH " in "\n" + f.read()


def test_a_program_refuses_another_torch_in_one_line(tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "version.py").write_text("__version__ = '0.0.1'\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path)] + sys.path))
    for program, path in console_scripts().items():
        done = subprocess.run([path, "--help"], env=env, capture_output=True, text=True)
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr == (f"{program}: error: built against torch {accordion_torch()}, but this environment has "
                               "torch 0.0.1; reinstall the toolkit against it: pip install --force-reinstall ./python "
                               "(from the toolkit's tree)\n")


def accordion_torch():
    import accordion
    return accordion.TORCH_VERSION
