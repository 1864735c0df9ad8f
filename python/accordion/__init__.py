"""Accordion toolkit for PyTorch.

Record the gradient statistics of your own DistributedDataParallel training in
the file regime-detect reads, and read the schedules it writes:

    recorder = accordion.GradientRecorder(ddp_model, "grads.h5")
    ...                                      # train an epoch
    recorder.end_epoch(lr=lr, loss=loss, accuracy=accuracy)
    recorder.finish()

    schedule = accordion.load_schedule("sched.h5", model)
    schedule = accordion.detect("grads.h5", eta=0.5, interval=2)   # regime-detect in-process
    schedule.save("sched.h5")
    plan = schedule.batch(epoch, lr)          # batch schedules: batch size and lr

    state = accordion.CompressionState(ddp_model, "powersgd:2")   # or schedule=, accordion=True, gravac=
    ddp_model.register_comm_hook(state, accordion.compression_hook)

    state = accordion.compress_fsdp(model, mesh["replicate"], "powersgd:2")  # FSDP2 sharded over mesh["shard"]

Errors are accordion.Error (FileError, UsageError), whose message is one line
that starts with the file or setting at fault. Documentation: docs/python.md.
"""

from ._errors import Error, FileError, UsageError
from ._library import BUILT_FOR as TORCH_VERSION
from ._library import CUDA_KERNELS
from ._library import VERSION as __version__
from .detect import command as detect_command
from .detect import detect
from .fsdp import FsdpCompressionState, compress_fsdp
from .gravac import Gravac, GravacStep
from .hook import CompressionState, compression_hook
from .recorder import GradientRecorder
from .schedule import BatchEpoch, Schedule, load_schedule, parameter_mismatches, trainable_parameters

__all__ = ["detect", "detect_command", "Error", "FileError", "UsageError", "CompressionState", "compression_hook",
           "compress_fsdp", "FsdpCompressionState", "Gravac", "GravacStep",
           "GradientRecorder", "Schedule", "BatchEpoch", "load_schedule", "parameter_mismatches",
           "trainable_parameters", "TORCH_VERSION", "CUDA_KERNELS", "__version__"]
