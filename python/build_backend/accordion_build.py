"""The package's build backend (PEP 517): CMake builds the compiled part against
the torch of the Python that installs the package, and the wheel is assembled
here. It needs nothing from PyPI, so `pip install ./python` works offline.

pip builds in an isolated environment that hides the target environment's
packages, torch included; torch is then looked up by running the same Python
with that isolation undone (without the PYTHONPATH and PYTHONNOUSERSITE pip
sets), which finds exactly the torch the package will run with.

Environment: ACCORDION_BUILD_DIR (CMake's build folder; default build/ beside
this package, one per torch version, kept so that a reinstall recompiles only
what changed), ACCORDION_CMAKE_ARGS (more options for CMake's configure, split as
a shell splits them: e.g. "-DHDF5_C_INCLUDE_DIR=... -DCMAKE_CXX_COMPILER=g++-13"
where HDF5 or the compiler is not the system's), CMAKE_GENERATOR (default Ninja
when ninja is on PATH).
"""

import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

NAME = "accordion_toolkit"  # the distribution: pip install ./python, pip uninstall accordion-toolkit
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
SOURCE = os.path.dirname(HERE)  # the toolkit's tree

_TORCH_PROBE = r"""
import json, os, torch
print(json.dumps({"version": torch.__version__, "dir": os.path.dirname(torch.__file__),
                  "cxx11_abi": int(bool(torch._C._GLIBCXX_USE_CXX11_ABI)), "cuda": torch.version.cuda or ""}))
"""


class BuildError(Exception):
    pass


def _fail(message):
    raise BuildError("accordion: error: " + message)


def _version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"^project\(accordion VERSION ([0-9.]+)", f.read(), re.M)
    if not match:
        _fail(f"{SOURCE}/CMakeLists.txt: no 'project(accordion VERSION ...)' line; is python/ inside the toolkit's tree?")
    return match.group(1)


def _torch():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    probe = subprocess.run([sys.executable, "-c", _TORCH_PROBE], env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        _fail(f"torch: {sys.executable} cannot import it ({last}); install PyTorch into this environment first "
              "(pip install torch, or Debian's python3-torch with a venv made with --system-site-packages)")
    return json.loads(probe.stdout.strip().splitlines()[-1])


def _run(command, what):
    print("accordion-build: " + what, file=sys.stderr, flush=True)
    # Output to stderr: pip keeps the hook's stdout for itself.
    done = subprocess.run(command, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        _fail(f"{what} failed (exit {done.returncode}); the messages are above")


def _build_library(torch):
    if not shutil.which("cmake"):
        _fail("cmake: not found on PATH (apt-get install cmake)")
    tag = re.sub(r"[^A-Za-z0-9.]+", "-", torch["version"])
    build = os.environ.get("ACCORDION_BUILD_DIR") or os.path.join(HERE, "build", "torch-" + tag)
    configure = ["cmake", "-S", HERE, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                 "-DACC_TORCH_DIR=" + torch["dir"], "-DACC_TORCH_CXX11_ABI=" + str(torch["cxx11_abi"]),
                 # Chosen again at every configure; ACCORDION_CMAKE_ARGS, later, may say ON or OFF.
                 "-DACC_TORCH_CUDA=" + torch["cuda"], "-DACC_CUDA_KERNELS=AUTO"]
    if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja") and not os.path.exists(
            os.path.join(build, "Makefile")):
        configure += ["-G", "Ninja"]
    if shutil.which("ccache"):
        configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=ccache")
        if torch["cuda"]:  # nvcc only for a CUDA torch (CMake would call the option unused)
            configure.append("-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache")
        os.environ.setdefault("CCACHE_BASEDIR", SOURCE)
    try:
        configure += shlex.split(os.environ.get("ACCORDION_CMAKE_ARGS", ""))
    except ValueError as e:
        _fail(f"ACCORDION_CMAKE_ARGS: cannot split it as a shell would ({e})")
    _run(configure, f"configuring {build} against torch {torch['version']} in {torch['dir']}")
    _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1)], f"building {build}")
    library = os.path.join(build, "_accordion_ops.so")
    if not os.path.exists(library):
        _fail(f"{library}: the build made no library")
    return library


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME.replace('_', '-')}\nVersion: {version}\n"
            "Summary: Accordion toolkit for PyTorch: gradient statistics recorded from a DDP "
            "communication hook, schedules read for training\n"
            "Requires-Python: >=3.8\n")


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # Without this hook pip would compile the whole library once just to read the metadata.
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(version))
    return dist_info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    torch = _torch()
    library = _build_library(torch)
    # The compiled part ties the wheel to one platform, not to a Python ABI
    # (no Python headers): py3-none-<platform>.
    platform = re.sub(r"[^A-Za-z0-9]+", "_", sysconfig.get_platform())
    wheel_name = f"{NAME}-{version}-py3-none-{platform}.whl"
    dist_info = f"{NAME}-{version}.dist-info"
    files = []
    package = os.path.join(HERE, "accordion")
    for entry in sorted(os.listdir(package)):
        if entry.endswith(".py"):
            with open(os.path.join(package, entry), "rb") as f:
                files.append(("accordion/" + entry, f.read()))
    with open(library, "rb") as f:
        files.append(("accordion/_accordion_ops.so", f.read()))
    # What the library was built against: the package refuses another torch at import.
    files.append(("accordion/_build_info.py",
                  f"TORCH_VERSION = {torch['version']!r}\nVERSION = {version!r}\n".encode()))
    files.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: accordion_build {version}\n"
                                         f"Root-Is-Purelib: false\nTag: py3-none-{platform}\n").encode()))
    files.append((f"{dist_info}/top_level.txt", b"accordion\n"))
    record = [_record_line(name, data) for name, data in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=wheel_directory, suffix=".whl.tmp")
    os.close(fd)
    with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    os.replace(temp, os.path.join(wheel_directory, wheel_name))
    return wheel_name
