"""The package's build backend (PEP 517): one CMake run of the toolkit's build
compiles the package's library and the five programs against the torch of the
Python that installs the package, and the wheel is assembled here: the package,
the programs (run through console scripts on the environment's PATH, which check
torch first) and their man pages (share/man/man1). It needs nothing from PyPI,
so `pip install ./python` works offline; the toolkit's build needs its Debian
packages (scripts/setup.sh) and, for a torch with CUDA, a CUDA toolkit.

pip builds in an isolated environment that hides the target environment's
packages, torch included; torch is then looked up by running the same Python
with that isolation undone (without the PYTHONPATH and PYTHONNOUSERSITE pip
sets), which finds exactly the torch the package will run with.

Environment: ACCORDION_BUILD_DIR (CMake's build folder; default build/ beside
this package, one per torch version, kept so that a reinstall recompiles only
what changed; a build folder of the toolkit's own, e.g. build-pip/ from
scripts/build.sh --torch pip, is reused as it is when it was made for the same
torch), ACCORDION_CMAKE_ARGS (more options for CMake's configure, split as a
shell splits them: e.g. "-DHDF5_C_INCLUDE_DIR=... -DCMAKE_CXX_COMPILER=g++-13"
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
import stat
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
                  "cxx11_abi": int(bool(torch._C._GLIBCXX_USE_CXX11_ABI)), "cuda": torch.version.cuda or "",
                  "cmake_prefix_path": torch.utils.cmake_prefix_path}))
"""



def _programs(tools_cmake):
    """The programs tools/CMakeLists.txt adds, one folder each, in its order."""
    try:
        with open(tools_cmake, encoding="utf-8") as f:
            return tuple(re.findall(r"^add_subdirectory\(([a-z][a-z0-9-]*)\)", f.read(), re.M))
    except OSError:
        return ()


# The programs the wheel carries, in the toolkit's build's bin/: a new tool under tools/
# is in the wheel without a change here.
PROGRAMS = _programs(os.path.join(SOURCE, "tools", "CMakeLists.txt"))
# What the build's CMake options are called; the configure step below sets them.
_CCACHE_LAUNCHER = "env;CCACHE_SLOPPINESS=pch_defines,time_macros;ccache"


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


def _cached(build, name):
    """A CMake cache entry of a configured build folder, or None."""
    try:
        with open(os.path.join(build, "CMakeCache.txt"), encoding="utf-8") as f:
            for line in f:
                if line.startswith(name + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def _release(version):
    """The release part of a torch version: "2.11.0+cu130" and "2.11.0" give "2.11.0"."""
    match = re.match(r"[0-9]+(\.[0-9]+)*", version)
    return match.group(0) if match else version


def _configured_torch(build):
    """The LibTorch version CMake found for a build folder (TorchConfigVersion.cmake), or None."""
    torch_dir = _cached(build, "Torch_DIR")
    if not torch_dir:
        return None
    try:
        with open(os.path.join(torch_dir, "TorchConfigVersion.cmake"), encoding="utf-8") as f:
            match = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', f.read())
    except OSError:
        return None
    return match.group(1) if match else None


def _cuda_toolkit_given():
    """Whether CMake will find a CUDA toolkit (FindCUDAToolkit's places), or the user names one."""
    if "CUDAToolkit_ROOT" in os.environ.get("ACCORDION_CMAKE_ARGS", "") or os.environ.get("CUDAToolkit_ROOT"):
        return True
    candidates = [os.environ.get("CUDACXX", ""), shutil.which("nvcc") or ""]
    candidates += [os.path.join(os.environ[v], "bin", "nvcc") for v in ("CUDA_PATH", "CUDA_HOME") if v in os.environ]
    candidates.append("/usr/local/cuda/bin/nvcc")
    return any(c and os.path.exists(c) for c in candidates)


def _build_toolkit(torch):
    """Configures and builds the package's library and the programs in one CMake run;
    returns the build folder."""
    if not PROGRAMS:
        _fail(f"{SOURCE}/tools/CMakeLists.txt: names no programs (one add_subdirectory(<program>) line each)")
    if not shutil.which("cmake"):
        _fail("cmake: not found on PATH (apt-get install cmake, or the toolkit's scripts/setup.sh)")
    if torch["cuda"] and not _cuda_toolkit_given():
        _fail(f"torch {torch['version']} is built with CUDA {torch['cuda']}, and LibTorch's CMake files need that "
              "CUDA's toolkit to build against it, but no nvcc was found (PATH, CUDACXX, CUDA_PATH, "
              "/usr/local/cuda): install CUDA " + torch["cuda"].split(".")[0] + "'s toolkit, or pass its folder in "
              "ACCORDION_CMAKE_ARGS=-DCUDAToolkit_ROOT=DIR")
    tag = re.sub(r"[^A-Za-z0-9.]+", "-", torch["version"])
    build = os.environ.get("ACCORDION_BUILD_DIR") or os.path.join(HERE, "build", "torch-" + tag)
    fresh = not os.path.exists(os.path.join(build, "CMakeCache.txt"))
    configure = ["cmake", "-S", SOURCE, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DACC_PYTHON_MODULE=ON",
                 # Chosen again at every configure (an nvcc of torch's CUDA, ACC_TORCH_CUDA);
                 # ACCORDION_CMAKE_ARGS, later, may say ON or OFF.
                 "-DACC_TORCH_CUDA=" + torch["cuda"], "-DACC_CUDA_KERNELS=AUTO"]
    # pip's torch carries its CMake files; Debian's python3-torch has them in libtorch-dev,
    # where CMake looks by default.
    if os.path.isdir(torch.get("cmake_prefix_path") or ""):
        configure.append("-DCMAKE_PREFIX_PATH=" + torch["cmake_prefix_path"])
    if fresh:
        # A folder of the package's own: no tests. A folder the toolkit's build made keeps
        # its settings (its tests, its compiler launcher), so nothing is compiled again.
        configure.append("-DBUILD_TESTING=OFF")
        if not os.environ.get("CMAKE_GENERATOR") and shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        if shutil.which("ccache"):
            configure.append("-DCMAKE_CXX_COMPILER_LAUNCHER=" + _CCACHE_LAUNCHER)
            if torch["cuda"]:  # nvcc only for a CUDA torch (CMake would call the option unused)
                configure.append("-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache")
    os.environ.setdefault("CCACHE_BASEDIR", SOURCE)
    try:
        configure += shlex.split(os.environ.get("ACCORDION_CMAKE_ARGS", ""))
    except ValueError as e:
        _fail(f"ACCORDION_CMAKE_ARGS: cannot split it as a shell would ({e})")
    _run(configure, f"configuring {build} against torch {torch['version']} in {torch['dir']}")
    found = _configured_torch(build)
    if found is not None and _release(found) != _release(torch["version"]):
        _fail(f"{build}: configured for LibTorch {found} ({_cached(build, 'Torch_DIR')}), not for this Python's "
              f"torch {torch['version']}; set ACCORDION_BUILD_DIR to another folder, or leave it unset")
    _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1), "--target", "accordion_ops", *PROGRAMS],
         f"building {build} (the package's library and the programs)")
    made = [os.path.join(build, "python", "_accordion_ops.so")] + [os.path.join(build, "bin", p) for p in PROGRAMS]
    for path in made:
        if not os.path.exists(path):
            _fail(f"{path}: the build made no such file")
    return build


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


def _entry_points():
    lines = ["[console_scripts]"]
    lines += [f"{p} = accordion_programs:{p.replace('-', '_')}" for p in PROGRAMS]
    return "\n".join(lines) + "\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    version = _version()
    torch = _torch()
    build = _build_toolkit(torch)
    # The compiled part ties the wheel to one platform, not to a Python ABI
    # (no Python headers): py3-none-<platform>.
    platform = re.sub(r"[^A-Za-z0-9]+", "_", sysconfig.get_platform())
    wheel_name = f"{NAME}-{version}-py3-none-{platform}.whl"
    dist_info = f"{NAME}-{version}.dist-info"
    data_dir = f"{NAME}-{version}.data/data"  # installed under the environment's prefix
    files = []

    def add(name, path):
        with open(path, "rb") as f:
            files.append((name, f.read()))

    package = os.path.join(HERE, "accordion")
    for entry in sorted(os.listdir(package)):
        if entry.endswith(".py"):
            add("accordion/" + entry, os.path.join(package, entry))
    add("accordion_programs.py", os.path.join(HERE, "accordion_programs.py"))
    add("accordion/_accordion_ops.so", os.path.join(build, "python", "_accordion_ops.so"))
    # The programs sit in the package; the console scripts on PATH check torch and run them.
    for program in PROGRAMS:
        add("accordion/bin/" + program, os.path.join(build, "bin", program))
    man = os.path.join(SOURCE, "man")
    for entry in sorted(os.listdir(man)):
        if entry.endswith(".1"):
            add(f"{data_dir}/share/man/man1/{entry}", os.path.join(man, entry))
    # What the library and programs were built against: they refuse another torch.
    files.append(("accordion/_build_info.py",
                  f"TORCH_VERSION = {torch['version']!r}\nVERSION = {version!r}\n".encode()))
    files.append((f"{dist_info}/METADATA", _metadata(version).encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: accordion_build {version}\n"
                                         f"Root-Is-Purelib: false\nTag: py3-none-{platform}\n").encode()))
    files.append((f"{dist_info}/entry_points.txt", _entry_points().encode()))
    files.append((f"{dist_info}/top_level.txt", b"accordion\naccordion_programs\n"))
    record = [_record_line(name, data) for name, data in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=wheel_directory, suffix=".whl.tmp")
    os.close(fd)
    with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name.endswith(".so") or name.startswith("accordion/bin/")
            # A regular file's type bits too: pip keeps the executable bits only with them.
            info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, data)
    os.replace(temp, os.path.join(wheel_directory, wheel_name))
    return wheel_name
