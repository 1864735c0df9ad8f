"""The package's build backend (python/build_backend/accordion_build.py): the CMake
configure it runs, with the options of ACCORDION_CMAKE_ARGS, and its error for a
value it cannot split. CMake itself is not run: the commands are recorded."""

import importlib.util
import os

import pytest

from conftest import TREE

BACKEND = os.path.join(TREE, "python", "build_backend", "accordion_build.py")


@pytest.fixture
def backend(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("accordion_build_under_test", BACKEND)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    commands = []
    monkeypatch.setattr(module, "_run", lambda command, what: commands.append(command))
    monkeypatch.setattr(module.shutil, "which", lambda name: "/usr/bin/" + name if name == "cmake" else None)
    build = tmp_path / "build"
    build.mkdir()
    (build / "_accordion_ops.so").write_bytes(b"")
    monkeypatch.setenv("ACCORDION_BUILD_DIR", str(build))
    module.recorded = commands
    return module


TORCH = {"version": "2.11.0+cu130", "dir": "/site/torch", "cxx11_abi": 1, "cuda": "13.0"}


def test_configure_takes_the_options_of_accordion_cmake_args(backend, monkeypatch):
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DHDF5_C_INCLUDE_DIR='/opt/my hdf5/include' -DCMAKE_CXX_COMPILER=g++")
    backend._build_library(TORCH)
    configure, build = backend.recorded
    assert configure[:2] == ["cmake", "-S"] and "-DACC_TORCH_DIR=/site/torch" in configure
    assert configure[-2:] == ["-DHDF5_C_INCLUDE_DIR=/opt/my hdf5/include", "-DCMAKE_CXX_COMPILER=g++"]
    assert build[:2] == ["cmake", "--build"]


def test_without_accordion_cmake_args_configure_is_unchanged(backend, monkeypatch):
    monkeypatch.delenv("ACCORDION_CMAKE_ARGS", raising=False)
    backend._build_library(TORCH)
    configure = backend.recorded[0]
    assert configure[-3:] == ["-DACC_TORCH_CXX11_ABI=1", "-DACC_TORCH_CUDA=13.0", "-DACC_CUDA_KERNELS=AUTO"]


def test_the_kernels_are_chosen_at_every_configure_unless_accordion_cmake_args_says(backend, monkeypatch):
    # CMake takes the last of two -D for one name: the user's, after AUTO.
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DACC_CUDA_KERNELS=OFF")
    backend._build_library(dict(TORCH, cuda=""))
    configure = backend.recorded[0]
    assert "-DACC_TORCH_CUDA=" in configure
    assert configure.index("-DACC_CUDA_KERNELS=AUTO") < configure.index("-DACC_CUDA_KERNELS=OFF")


def test_an_accordion_cmake_args_that_cannot_be_split_is_refused(backend, monkeypatch):
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DHDF5_C_INCLUDE_DIR='/opt/hdf5")
    with pytest.raises(backend.BuildError, match=r"ACCORDION_CMAKE_ARGS: cannot split it as a shell would"):
        backend._build_library(TORCH)
    assert backend.recorded == []
