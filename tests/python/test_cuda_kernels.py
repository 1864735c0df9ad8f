"""The toolkit's CUDA kernels in the package's library: built where the programs'
build on the same machine built them (a CUDA torch and an nvcc of its CUDA), for
the same GPU architectures, and bound to the CUDA runtime torch loads. Then the
build's decision itself (cmake/AccCudaKernelsChoice.cmake), for an nvcc of another
CUDA than torch's, none, or one that cannot run."""

import os
import re
import shutil
import subprocess

import pytest
import torch

import accordion

from conftest import TREE, needs_hook


def _cached(cache, name):
    match = re.search(rf"^{name}:[A-Z]+=(.*)$", cache, re.M)
    return match.group(1) if match else None


def test_the_package_has_the_kernels_the_programs_build_has(programs):
    cache_file = os.path.join(os.path.dirname(programs), "CMakeCache.txt")
    if not os.path.exists(cache_file):
        pytest.skip(f"{cache_file}: not there (the programs' build folder is where ACC_BIN's parent is)")
    with open(cache_file, encoding="utf-8") as f:
        cache = f.read()
    if _cached(cache, "ACC_CUDA_KERNELS") == "ON":
        expected = _cached(cache, "ACC_CUDA_ARCHITECTURES").replace(";", ",")
    else:
        expected = ""
    assert accordion.CUDA_KERNELS == expected


def test_the_kernels_use_the_cuda_runtime_torch_loaded():
    if not accordion.CUDA_KERNELS:
        pytest.skip("the package was built without CUDA kernels")
    with open("/proc/self/maps", encoding="utf-8") as f:
        runtimes = {line.split()[-1] for line in f if re.search(r"/libcudart\.so", line)}
    # One copy in the process: the kernels' launches and torch's streams share one runtime.
    assert len(runtimes) == 1, runtimes
    assert os.path.realpath(next(iter(runtimes))).startswith(os.path.realpath(os.path.dirname(
        os.path.dirname(torch.__file__)))), runtimes


CHOICE = os.path.join(TREE, "cmake", "AccCudaKernelsChoice.cmake")


def _choose(tmp_path, nvcc, torch_cuda):
    """The build's decision (cmake/AccCudaKernelsChoice.cmake, run with cmake -P): (ok, reason)."""
    if shutil.which("cmake") is None:
        pytest.skip("needs cmake")
    script = tmp_path / "choose.cmake"
    script.write_text(f'include("{CHOICE}")\n'
                      f'acc_cuda_kernels_choice("{nvcc}" "{torch_cuda}" ok reason)\n'
                      'message("${ok}|${reason}")\n')
    done = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    ok, reason = done.stderr.strip().split("|", 1)
    return ok, " ".join(reason.split())


def _nvcc():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if nvcc is None:
        pytest.skip("needs nvcc")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    return nvcc, int(re.search(r"release (\d+)\.", version).group(1))


def test_an_nvcc_of_torchs_cuda_builds_the_kernels(tmp_path):
    nvcc, major = _nvcc()
    assert _choose(tmp_path, nvcc, f"{major}.0") == ("ON", "")
    assert _choose(tmp_path, nvcc, "") == ("ON", "")  # a LibTorch whose CUDA is not known: any working nvcc


def test_an_nvcc_of_another_cuda_builds_no_kernels(tmp_path):
    nvcc, major = _nvcc()
    other = f"{major - 1}.8"  # a torch of the CUDA before this nvcc's
    ok, reason = _choose(tmp_path, nvcc, other)
    assert ok == "OFF" and re.search(rf"nvcc \S+ \(.*\) is not of torch's CUDA {re.escape(other)}", reason)


def test_without_nvcc_no_kernels_are_built(tmp_path):
    assert _choose(tmp_path, "", "13.0") == ("OFF", "no working nvcc found (CUDA 13.0's toolkit, on PATH or as CUDACXX)")


def test_an_nvcc_that_cannot_run_builds_no_kernels(tmp_path):
    # As an nvcc that refuses the host compiler's version does.
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc fatal : unsupported GNU version' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    ok, reason = _choose(tmp_path, str(nvcc), "13.0")
    assert ok == "OFF" and reason.startswith("no working nvcc found")


def test_parameters_on_a_gpu_without_the_kernels_get_a_note(monkeypatch):
    from accordion import _library

    monkeypatch.delenv("ACC_CUDA_KERNELS", raising=False)
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    note = _library.missing_kernels_note({cpu, gpu}, kernels="")
    assert note and "built without the toolkit's CUDA kernels" in note and "pip install -v --force-reinstall" in note
    assert _library.missing_kernels_note({gpu}, kernels="90") is None  # built with them
    assert _library.missing_kernels_note({cpu}, kernels="") is None  # nothing on a GPU
    monkeypatch.setenv("ACC_CUDA_KERNELS", "0")  # the ATen operations meant
    assert _library.missing_kernels_note({gpu}, kernels="") is None


@needs_hook
def test_compression_state_warns_with_the_note_for_its_parameters_devices(one_rank, monkeypatch):
    from accordion import _library

    seen = []
    monkeypatch.setattr(_library, "missing_kernels_note", lambda devices: seen.append(set(devices)) or "the note")
    with pytest.warns(UserWarning, match="^the note$"):
        accordion.CompressionState(one_rank, "signsgd")
    assert seen == [{torch.device("cpu")}]
