"""Loads the compiled part (the toolkit's C++ library as torch custom classes) and
turns its errors into this package's exceptions."""

import os
import re

import torch

from ._errors import Error, FileError, UsageError

try:
    from ._build_info import TORCH_VERSION as BUILT_FOR
    from ._build_info import VERSION
except ImportError:  # the source tree, not an installed package
    raise ImportError("accordion: error: the package is not built; install it with "
                      "`pip install ./python` from the toolkit's tree") from None

# The library links against one torch's C++ ABI: another torch would crash or
# fail to load with an unreadable symbol error, so say what to do instead.
if torch.__version__ != BUILT_FOR:
    raise ImportError(f"accordion: error: this package was built against torch {BUILT_FOR} but this Python "
                      f"imports torch {torch.__version__}; reinstall it here: "
                      "pip install --force-reinstall ./python")

torch.ops.load_library(os.path.join(os.path.dirname(__file__), "_accordion_ops.so"))
classes = torch.classes.accordion
# The GPU architectures the toolkit's CUDA kernels were built for ("75-real,80-real,...");
# "" where the library has none and the device codecs use ATen operations on a GPU.
CUDA_KERNELS = torch.ops.accordion.cuda_kernels()
# No compression, and Accordion's default levels (the programs' --low and --high), as
# the toolkit's compressor registry spells them.
NO_COMPRESSION, DEFAULT_LOW, DEFAULT_HIGH = torch.ops.accordion.default_levels()
# Accordion's rule's defaults, as regime-detect's and train-dist's --eta and --interval.
DEFAULT_ETA = torch.ops.accordion.default_eta()
DEFAULT_INTERVAL = torch.ops.accordion.default_interval()
# Why an epoch is or is not critical, per /epochs/reason code, in regime-detect's words.
REASONS = tuple(torch.ops.accordion.reason_names())
# GraVAC's defaults, as train-dist's --gravac-* options have them.
_gravac_numbers, _gravac_names = torch.ops.accordion.gravac_defaults(), torch.ops.accordion.gravac_default_names()
GRAVAC_DEFAULTS = dict(zip(("theta_min", "theta_max", "epsilon", "window", "omega", "theta_s"), _gravac_numbers),
                       **dict(zip(("policy", "throughput", "gain"), _gravac_names)))
GRAVAC_DEFAULTS["window"] = int(GRAVAC_DEFAULTS["window"])
# GraVAC's step record (regime::GravacStep): its fields, and its choices' names by code.
GRAVAC_STEP_FIELDS = tuple(torch.ops.accordion.gravac_step_fields())
GRAVAC_CHOICES = tuple(torch.ops.accordion.gravac_choice_names())


def parameter_lists(parameters):
    """[(name, shape)] as the library takes parameters: names, each shape's number of
    dimensions, and every dimension in one list."""
    parameters = [(str(name), tuple(int(d) for d in shape)) for name, shape in parameters]
    return ([name for name, _ in parameters], [len(shape) for _, shape in parameters],
            [d for _, shape in parameters for d in shape])


def missing_kernels_note(devices, kernels=None):
    """What to tell a user whose parameters lie on a GPU while the library has no CUDA
    kernels (built where no nvcc of torch's CUDA was found); None where nothing is
    missing, or ACC_CUDA_KERNELS=0 in the environment says the ATen operations are meant."""
    kernels = CUDA_KERNELS if kernels is None else kernels
    if kernels or os.environ.get("ACC_CUDA_KERNELS") == "0" or not any(d.type == "cuda" for d in devices):
        return None
    return ("accordion: this package was built without the toolkit's CUDA kernels, so on the GPU its "
            "compressors run as ATen operations (signSGD, QSGD and fp16 several times slower); to build them, "
            f"reinstall with an nvcc of torch's CUDA {torch.version.cuda} on PATH (pip install -v --force-reinstall "
            "./python; its output says why they were left out), or set ACC_CUDA_KERNELS=0 to keep the ATen "
            "operations without this warning")

_TAGGED = re.compile(r"\[accordion:(usage|file|error)\] (.*)", re.S)
_KINDS = {"usage": UsageError, "file": FileError, "error": Error}


def call(function, *args):
    """Calls into the library, raising its errors as this package's exceptions
    with the message alone (the library names the file or setting first)."""
    try:
        return function(*args)
    except RuntimeError as e:
        match = _TAGGED.search(str(e))
        if not match:
            raise
        # Only the message's first line: TorchScript may append its own context.
        message = match.group(2).strip().splitlines()[0]
        raise _KINDS[match.group(1)](message) from None
