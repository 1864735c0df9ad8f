"""The console scripts of the toolkit's programs (grad-dump, regime-detect,
train-dist, compress-bench, comm-profile, and any other under tools/) that `pip install ./python` puts on the
environment's PATH. Each runs the program the package carries (accordion/bin/),
built against one torch, after checking that the environment still has that
torch: after an upgrade a program would otherwise stop at its first symbol with
the dynamic linker's message. Importing torch would take seconds, so its version
is read from torch/version.py; the package itself (and so torch) is not imported.
"""

import importlib.util
import os
import re
import sys

_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "accordion")


def _read_version(path, name):
    try:
        with open(path, encoding="utf-8") as f:
            match = re.search(r"^" + name + r"\s*=\s*['\"]([^'\"]+)['\"]", f.read(), re.M)
    except OSError:
        return None
    return match.group(1) if match else None


def torch_version():
    """The version of the torch this environment imports, or None where it has none."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return _read_version(os.path.join(list(spec.submodule_search_locations)[0], "version.py"), "__version__")


def mismatch(program, built_for, found):
    """The one line that says a program cannot run with this environment's torch, or None where it can."""
    if found == built_for:
        return None
    have = f"torch {found}" if found else "no torch"
    return (f"{program}: error: built against torch {built_for}, but this environment has {have}; reinstall the "
            "toolkit against it: pip install --force-reinstall ./python (from the toolkit's tree)")


def run(program, argv=None):
    """Replaces this process with the program, or returns 1 after one line on stderr."""
    built_for = _read_version(os.path.join(_PACKAGE, "_build_info.py"), "TORCH_VERSION")
    binary = os.path.join(_PACKAGE, "bin", program)
    if built_for is None or not os.access(binary, os.X_OK):
        print(f"{program}: error: {binary}: not installed with the package; reinstall it: "
              "pip install --force-reinstall ./python", file=sys.stderr)
        return 1
    line = mismatch(program, built_for, torch_version())
    if line:
        print(line, file=sys.stderr)
        return 1
    args = sys.argv[1:] if argv is None else list(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(binary, [program] + args)
    return 1  # not reached: execv returns only by raising


def __getattr__(name):
    """The console script of a program, by the name its entry point gives
    (comm_profile for comm-profile): every program the wheel carries has one, so a
    new program needs no change here."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise AttributeError(name)
    program = name.replace("_", "-")

    def console_script():
        return run(program)

    console_script.__name__ = name
    return console_script
