"""The toolkit's CUDA kernels in the package's library: built where the programs'
build on the same machine built them (a CUDA torch and an nvcc of its CUDA), for
the same GPU architectures, and bound to the CUDA runtime torch loads. Then the
package's configure decision itself, for an nvcc of another CUDA than torch's."""

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


def _configure(tmp_path, cuda_version, kernels):
    torch_dir = os.path.dirname(torch.__file__)
    command = ["cmake", "-S", os.path.join(TREE, "python"), "-B", str(tmp_path / "build"),
               "-DACC_TORCH_DIR=" + torch_dir, "-DACC_TORCH_CXX11_ABI=" + str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
               "-DACC_TORCH_CUDA=" + cuda_version, "-DACC_CUDA_KERNELS=" + kernels]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _nvcc_major():
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
    if not torch.version.cuda or nvcc is None or shutil.which("cmake") is None:
        pytest.skip("needs a CUDA torch, nvcc and cmake")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    return int(re.search(r"release (\d+)\.", version).group(1))


def test_an_nvcc_of_another_cuda_builds_no_kernels(tmp_path):
    other = f"{_nvcc_major() - 1}.8"  # a torch of the CUDA before this nvcc's
    done = _configure(tmp_path, other, "AUTO")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"CUDA kernels: off, nvcc \S+ \(.*\) is not of torch's CUDA {re.escape(other)}", done.stdout)
    with open(tmp_path / "build" / "CMakeCache.txt", encoding="utf-8") as f:
        assert _cached(f.read(), "ACC_CUDA_KERNELS") == "OFF"


def test_kernels_asked_for_with_an_nvcc_of_another_cuda_stop_configure(tmp_path):
    other = f"{_nvcc_major() - 1}.8"
    done = _configure(tmp_path, other, "ON")
    assert done.returncode != 0
    error = " ".join(done.stderr.split())  # CMake wraps its messages
    assert "ACC_CUDA_KERNELS=ON: nvcc" in error and f"is not of torch's CUDA {other}" in error


def test_without_nvcc_the_package_builds_without_kernels(tmp_path, monkeypatch):
    if not torch.version.cuda or shutil.which("cmake") is None:
        pytest.skip("needs a CUDA torch and cmake")
    monkeypatch.delenv("CUDACXX", raising=False)
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if not os.path.exists(os.path.join(d, "nvcc"))]
    cmake = os.path.dirname(shutil.which("cmake"))
    monkeypatch.setenv("PATH", os.pathsep.join(path + ([cmake] if cmake not in path else [])))
    done = _configure(tmp_path, torch.version.cuda, "AUTO")
    assert done.returncode == 0, done.stderr
    assert "CUDA kernels: off, no working nvcc found" in done.stdout


def test_an_nvcc_that_cannot_compile_builds_no_kernels(tmp_path, monkeypatch):
    # As an nvcc that refuses the host compiler's version does.
    if not torch.version.cuda or shutil.which("cmake") is None:
        pytest.skip("needs a CUDA torch and cmake")
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc fatal : unsupported GNU version' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("CUDACXX", str(nvcc))
    done = _configure(tmp_path, torch.version.cuda, "AUTO")
    assert done.returncode == 0, done.stderr
    assert "CUDA kernels: off, no working nvcc found" in done.stdout


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
