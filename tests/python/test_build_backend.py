"""The package's build backend (python/build_backend/accordion_build.py): the CMake
configure it runs (the toolkit's whole build, with the options of
ACCORDION_CMAKE_ARGS), what it builds, its refusal of a build folder made for
another torch, and the console scripts' torch check (python/accordion_programs.py).
CMake itself is not run: the commands are recorded."""

import importlib.util
import os

import pytest

from conftest import TREE

BACKEND = os.path.join(TREE, "python", "build_backend", "accordion_build.py")
PROGRAMS_MODULE = os.path.join(TREE, "python", "accordion_programs.py")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_torch_config(folder, version):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "TorchConfigVersion.cmake").write_text(f'set(PACKAGE_VERSION "{version}")\n')


@pytest.fixture
def backend(monkeypatch, tmp_path):
    module = load(BACKEND, "accordion_build_under_test")
    build = tmp_path / "build"
    commands = []

    def run(command, what):
        commands.append(command)
        if command[:2] == ["cmake", "-S"] and module.recorded_torch:  # configure: what CMake would find
            config = tmp_path / "torch-cmake"
            write_torch_config(config, module.recorded_torch)
            (build / "CMakeCache.txt").write_text(f"Torch_DIR:PATH={config}\n")
        if command[:2] == ["cmake", "--build"]:  # build: the files the wheel takes
            (build / "python").mkdir(exist_ok=True)
            (build / "python" / "_accordion_ops.so").write_bytes(b"")
            (build / "bin").mkdir(exist_ok=True)
            for program in module.PROGRAMS:
                (build / "bin" / program).write_bytes(b"")

    monkeypatch.setattr(module, "_run", run)
    monkeypatch.setattr(module, "_cuda_toolkit_given", lambda: True)
    monkeypatch.setattr(module.shutil, "which", lambda name: "/usr/bin/" + name if name == "cmake" else None)
    build.mkdir()
    monkeypatch.setenv("ACCORDION_BUILD_DIR", str(build))
    module.recorded = commands
    module.recorded_torch = "2.11.0"
    module.build = build
    return module


TORCH = {"version": "2.11.0+cu130", "dir": "/site/torch", "cxx11_abi": 1, "cuda": "13.0",
         "cmake_prefix_path": TREE}  # any folder that exists


def test_configure_is_the_toolkits_build_with_the_options_of_accordion_cmake_args(backend, monkeypatch):
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DHDF5_C_INCLUDE_DIR='/opt/my hdf5/include' -DCMAKE_CXX_COMPILER=g++")
    backend._build_toolkit(TORCH)
    configure, build = backend.recorded
    assert configure[:3] == ["cmake", "-S", TREE] and "-DCMAKE_PREFIX_PATH=" + TREE in configure
    assert configure[-2:] == ["-DHDF5_C_INCLUDE_DIR=/opt/my hdf5/include", "-DCMAKE_CXX_COMPILER=g++"]
    # One run builds the package's library and the five programs, and nothing else (no tests).
    assert build[:2] == ["cmake", "--build"]
    assert build[build.index("--target") + 1:] == ["accordion_ops", *backend.PROGRAMS]
    assert "-DBUILD_TESTING=OFF" in configure


def test_a_folder_the_toolkits_build_made_keeps_its_settings(backend, monkeypatch):
    monkeypatch.delenv("ACCORDION_CMAKE_ARGS", raising=False)
    (backend.build / "CMakeCache.txt").write_text("CMAKE_CXX_COMPILER_LAUNCHER:STRING=ccache\n")
    monkeypatch.setattr(backend.shutil, "which", lambda name: "/usr/bin/" + name)  # ninja and ccache too
    backend._build_toolkit(TORCH)
    configure = backend.recorded[0]
    # Its tests, generator and launcher stay as they are: nothing is compiled again.
    assert not any(a.startswith(("-DBUILD_TESTING", "-DCMAKE_CXX_COMPILER_LAUNCHER", "-G")) for a in configure)
    assert "-DACC_CUDA_KERNELS=AUTO" in configure and configure[-1] == "-DCMAKE_PREFIX_PATH=" + TREE


def test_a_new_folder_gets_the_builds_compiler_cache(backend, monkeypatch):
    monkeypatch.delenv("ACCORDION_CMAKE_ARGS", raising=False)
    monkeypatch.setattr(backend.shutil, "which", lambda name: "/usr/bin/" + name)
    backend._build_toolkit(TORCH)
    configure = backend.recorded[0]
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache" in configure
    assert "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache" in configure
    assert configure[configure.index("-G") + 1] == "Ninja"


def test_the_kernels_are_chosen_at_every_configure_unless_accordion_cmake_args_says(backend, monkeypatch):
    # CMake takes the last of two -D for one name: the user's, after AUTO.
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DACC_CUDA_KERNELS=OFF")
    backend._build_toolkit(dict(TORCH, cuda=""))
    configure = backend.recorded[0]
    assert configure.index("-DACC_CUDA_KERNELS=AUTO") < configure.index("-DACC_CUDA_KERNELS=OFF")


def test_debians_torch_without_cmake_files_leaves_the_prefix_to_cmake(backend, tmp_path):
    backend.recorded_torch = "1.13.0"
    missing = tmp_path / "no-torch" / "share" / "cmake"  # made by nobody: the test's own folder
    backend._build_toolkit(dict(TORCH, version="1.13.0a0", cuda="", cmake_prefix_path=str(missing)))
    assert not any(a.startswith("-DCMAKE_PREFIX_PATH") for a in backend.recorded[0])


def test_a_folder_made_for_another_torch_is_refused_before_building(backend):
    backend.recorded_torch = "1.13.0"
    with pytest.raises(backend.BuildError, match=r"configured for LibTorch 1\.13\.0 .*not for this Python's torch "
                                                 r"2\.11\.0\+cu130; set ACCORDION_BUILD_DIR"):
        backend._build_toolkit(TORCH)
    assert len(backend.recorded) == 1  # configure only


def test_an_accordion_cmake_args_that_cannot_be_split_is_refused(backend, monkeypatch):
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DHDF5_C_INCLUDE_DIR='/opt/hdf5")
    with pytest.raises(backend.BuildError, match=r"ACCORDION_CMAKE_ARGS: cannot split it as a shell would"):
        backend._build_toolkit(TORCH)
    assert backend.recorded == []


def test_the_console_scripts_name_each_program():
    module = load(BACKEND, "accordion_build_entry_points")
    programs = load(PROGRAMS_MODULE, "accordion_programs_under_test")
    lines = module._entry_points().splitlines()
    assert lines[0] == "[console_scripts]" and len(lines) == 1 + len(module.PROGRAMS)
    for line in lines[1:]:
        name, target = (part.strip() for part in line.split("="))
        assert target.startswith("accordion_programs:") and callable(getattr(programs, target.split(":")[1]))
        assert name in module.PROGRAMS


def test_the_programs_are_the_folders_under_tools(tmp_path, capsys):
    module = load(BACKEND, "accordion_build_programs")
    tools = os.path.join(TREE, "tools")
    assert sorted(module.PROGRAMS) == sorted(d for d in os.listdir(tools) if os.path.isdir(os.path.join(tools, d)))
    listing = tmp_path / "CMakeLists.txt"
    listing.write_text("# One folder per program\nadd_subdirectory(regime-detect)\nadd_subdirectory(new-tool)\n")
    assert module._programs(str(listing)) == ("regime-detect", "new-tool")
    assert module._programs(str(tmp_path / "missing.txt")) == ()
    # A new program has its console script with no change to the module.
    programs = load(PROGRAMS_MODULE, "accordion_programs_new_tool")
    assert programs.new_tool.__name__ == "new_tool"
    assert programs.new_tool() == 1
    assert capsys.readouterr().err.startswith("new-tool: error: ")
    with pytest.raises(AttributeError):
        getattr(programs, "New-Tool")


def test_a_program_refuses_another_torch_in_one_line():
    programs = load(PROGRAMS_MODULE, "accordion_programs_mismatch")
    assert programs.mismatch("train-dist", "2.11.0+cu130", "2.11.0+cu130") is None
    line = programs.mismatch("train-dist", "2.11.0+cu130", "2.12.0+cu130")
    assert line.startswith("train-dist: error: built against torch 2.11.0+cu130, but this environment has torch "
                           "2.12.0+cu130; reinstall") and "\n" not in line
    assert "has no torch" in programs.mismatch("regime-detect", "2.11.0", None)


def test_a_cuda_torch_without_a_cuda_toolkit_is_refused_before_cmake(backend, monkeypatch):
    monkeypatch.setattr(backend, "_cuda_toolkit_given", lambda: False)
    with pytest.raises(backend.BuildError, match=r"torch 2\.11\.0\+cu130 is built with CUDA 13\.0, .* no nvcc was "
                                                 r"found .*install CUDA 13's toolkit"):
        backend._build_toolkit(TORCH)
    assert backend.recorded == []
    backend._build_toolkit(dict(TORCH, cuda=""))  # a CPU torch needs none


def test_a_cuda_toolkit_named_in_accordion_cmake_args_counts(monkeypatch):
    module = load(BACKEND, "accordion_build_toolkit_given")
    monkeypatch.setenv("ACCORDION_CMAKE_ARGS", "-DCUDAToolkit_ROOT=/opt/cuda-13")
    assert module._cuda_toolkit_given()


def test_the_wheel_carries_the_package_the_programs_and_the_man_pages(backend, monkeypatch, tmp_path):
    import stat
    import zipfile
    monkeypatch.setattr(backend, "_torch", lambda: TORCH)
    name = backend.build_wheel(str(tmp_path / "wheels"))
    with zipfile.ZipFile(tmp_path / "wheels" / name) as wheel:
        entries = {info.filename: info for info in wheel.infolist()}
        version = backend._version()
        for program in backend.PROGRAMS:
            mode = entries[f"accordion/bin/{program}"].external_attr >> 16
            # pip keeps the executable bits of a regular file only.
            assert stat.S_ISREG(mode) and mode & 0o111, program
            assert f"accordion_toolkit-{version}.data/data/share/man/man1/{program}.1" in entries
        assert "accordion/_accordion_ops.so" in entries and "accordion_programs.py" in entries
        assert "accordion/detect.py" in entries and "accordion/plot.py" in entries
        build_info = wheel.read("accordion/_build_info.py").decode()
        assert "TORCH_VERSION = '2.11.0+cu130'" in build_info
        entry_points = wheel.read(f"accordion_toolkit-{version}.dist-info/entry_points.txt").decode()
        assert "regime-detect = accordion_programs:regime_detect" in entry_points
        record = wheel.read(f"accordion_toolkit-{version}.dist-info/RECORD").decode()
        assert all(n in record for n in entries)
