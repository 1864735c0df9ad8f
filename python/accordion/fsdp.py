"""Compressed replica exchange for FSDP2's hybrid sharding: each FSDP module's
gradient shard, reduce-scattered within its replica by fully_shard, is averaged
across the replicas by the toolkit's compressors (the DDP hook's exchange: error
feedback per parameter shard, PowerSGD's warm start, the same wire formats and
the same count of floats sent), in the all-reduce hook FSDP2 gives each module."""

import math

import torch
import torch.distributed as dist

from . import _library
from ._errors import UsageError
from .hook import CompressionState

_EXAMPLE = ("e.g. mesh = init_device_mesh('cpu', (2, 2), mesh_dim_names=('replicate', 'shard')), "
            "fully_shard(module, mesh=mesh['shard']) and replicate_group=mesh['replicate']")
# The dtypes FSDP2 reduces gradients in that the exchange takes (16-bit ones as float32 copies).
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def compress_fsdp(model, replicate_group, compress=None, *, schedule=None, extend_last=False, accordion=False,
                  gravac=None, low=_library.DEFAULT_LOW, high=_library.DEFAULT_HIGH, eta=_library.DEFAULT_ETA,
                  interval=_library.DEFAULT_INTERVAL, seed=0, error_feedback=True, start_step=0, auto=False,
                  levels=None, margin=None, drift=None, one_exchange=False):
    """Makes FSDP2's hybrid sharding exchange each gradient shard across the replicas
    through the toolkit's compressors; call it once, on every rank, after fully_shard:

        mesh = init_device_mesh("cuda", (nodes, gpus), mesh_dim_names=("replicate", "shard"))
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["shard"])          # shards within a replica only
        fully_shard(model, mesh=mesh["shard"])
        state = accordion.compress_fsdp(model, mesh["replicate"], "powersgd:2")

    `replicate_group`: the replica dimension (a 1-D DeviceMesh or its process group),
    whose ranks hold the same shard index in each replica. The levels come from
    `compress` (a compressor spec for every parameter of two or more dimensions;
    vectors are sent uncompressed), `schedule` (a compression schedule from
    regime-detect, by parameter name; call set_epoch(epoch) each epoch) or
    `accordion=True` (decided online from rank 0's raw local gradients, seen at
    its reduce-scatter's input, as CompressionState decides; call set_epoch(epoch,
    lr) each epoch) or `gravac` (a family such as 'topk' or an accordion.Gravac:
    GraVAC's factor chosen every step for the whole model, every rank of the world
    deciding together; take_gravac_steps() says which) or `auto=True`
    (CompressionState's automatic mode, with its `levels`, `margin` and `drift`: each
    replica group measures its own link at once, global rank 0 plans on the first
    shard's rows, priced as exchanged after the backward pass, and every rank takes its
    levels; call set_epoch(epoch, lr) each epoch). `low`, `high`, `eta`, `interval`,
    `seed`, `error_feedback` and `start_step` are CompressionState's.
    `one_exchange=True` exchanges every module's shards together, once per step at the
    end of the backward pass (each module's hook hands FSDP zeros and the averages are
    added to the gradients then), instead of one exchange per module inside its hook:
    each collective's latency is paid once a step rather than once a module, at the
    cost of a copy of the shards; the same averages either way.
    Returns the FsdpCompressionState (floats_sent, levels, set_epoch, state_dict)."""
    return FsdpCompressionState(model, replicate_group, compress, schedule=schedule, extend_last=extend_last,
                                accordion=accordion, gravac=gravac, low=low, high=high, eta=eta, interval=interval,
                                seed=seed, error_feedback=error_feedback, start_step=start_step, auto=auto,
                                levels=levels, margin=margin, drift=drift, one_exchange=one_exchange)


class _Module:
    """One FSDP module's parameters as its reduce-scatter output lays them out: each
    parameter's rows on this rank (dim 0, as fully_shard shards), padded to the shard
    size of rank 0 of the shard group."""

    def __init__(self, label, parts, dtypes, group, params):
        self.label = label
        self.parts = parts  # (name, padded numel, shape of this rank's rows, the parameter's shape)
        self.dtypes = dtypes  # {name: the parameter's dtype}
        self.numel = sum(padded for _, padded, _, _ in parts)
        self.group = group  # FSDP's parameter group
        self.params = params  # {name: its FSDPParam}


class FsdpCompressionState(CompressionState):
    """The state of compress_fsdp: levels, floats sent and error memories of the
    replica exchange, as CompressionState keeps them for DDP (by parameter name; a
    parameter's memories are those of this rank's shard)."""

    def __init__(self, model, replicate_group, compress=None, *, schedule=None, extend_last=False, accordion=False,
                 gravac=None, low=_library.DEFAULT_LOW, high=_library.DEFAULT_HIGH, eta=_library.DEFAULT_ETA,
                 interval=_library.DEFAULT_INTERVAL, seed=0, error_feedback=True, start_step=0, auto=False,
                 levels=None, margin=None, drift=None, one_exchange=False):
        modules, shard_group = _fsdp_modules(model)
        if not isinstance(one_exchange, bool):
            raise UsageError(f"one_exchange: must be True or False, not {one_exchange!r}")
        given = [key for key, value in (("compress", compress), ("schedule", schedule), ("accordion", accordion),
                                        ("gravac", gravac), ("auto", auto))
                 if value is not None and value is not False]
        if len(given) != 1:  # before any collective: the group's checks below take some
            raise UsageError("compress_fsdp: give one of compress (a compressor spec such as 'powersgd:2'), "
                             "schedule (a compression schedule from regime-detect), accordion=True (decided "
                             "online), gravac (a compressor family such as 'topk', decided every step) or "
                             "auto=True (levels chosen by predicted step time), not "
                             f"{' and '.join(given) if given else 'none of them'}")
        group = _replica_group(replicate_group, shard_group)
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        layouts, managed = _layouts(modules, named)
        for name, _ in named:
            if name not in managed:
                raise UsageError(f"model: parameter '{name}' is not sharded by fully_shard (no FSDP module manages "
                                 "it), so no replica exchange would reach it; apply fully_shard to the model's root "
                                 "module too")
        self.shard_rank, self.shard_world_size = dist.get_rank(shard_group), dist.get_world_size(shard_group)
        if gravac is not None:
            # A rank without rows would exchange nothing and take no part in the world's
            # decisions; every rank learns of such a shard, and refuses alike.
            holds = [None] * dist.get_world_size()
            dist.all_gather_object(holds, (self.shard_rank, any(math.prod(shape) for m in layouts
                                                                for _, _, shape, _ in m.parts)))
            empty = sorted({shard for shard, rows in holds if not rows})
            if empty:
                raise UsageError(f"model: shard {empty[0]} of {self.shard_world_size} holds no rows of any trainable "
                                 "parameter; GraVAC decides every step from every rank's shards, so "
                                 "compress_fsdp(gravac=...) needs each shard to hold some (shard the model over "
                                 "fewer ranks)")
        # GraVAC: every rank of the world, each shard of the model, decides together;
        # each shard is still averaged over its replicas only.
        self._configure("compress_fsdp", group, named, compress, schedule=schedule, extend_last=extend_last,
                        accordion=accordion, gravac=gravac, low=low, high=high, eta=eta, interval=interval,
                        seed=seed, error_feedback=error_feedback, start_step=start_step,
                        decisions=dist.group.WORLD if gravac is not None else None, auto=auto, levels=levels,
                        margin=margin, drift=drift)
        self._modules = layouts
        # GraVAC and one_exchange: (module index, [(name, copy of its shard, level)]) until the step ends.
        self._deferred = []
        self._step_end_queued = False
        self._one_exchange = one_exchange
        self._sums = self._online.sums if self._online is not None else None  # rank 0 online only
        for index, (_, module, group) in enumerate(modules):
            module.set_all_reduce_hook(lambda output, index=index: self._exchange_shard(index, output))
            if self._sums is not None and self.shard_world_size > 1:
                # Rank 0's raw local gradients are the reduce-scatter's input.
                _listen(module, group, lambda flat, index=index: self._record(index, flat))

    # Online, global rank 0 (the first shard of the first replica) records, as
    # train-dist's rank 0, and every rank of the world takes its decision.
    def _recording_rank_sums(self):
        return _library.classes.GradientSums() if dist.get_rank() == 0 else None

    def _deciding_group(self):
        return dist.group.WORLD

    # The automatic mode prices the first shard's rows, the most any shard sends, each
    # exchanged inside FSDP's all-reduce hook, which holds the backward pass until it
    # returns: no exchange overlaps it.
    _overlapped = False

    def _planned_shapes(self, named):
        return [(name, (-(-p.shape[0] // self.shard_world_size),) + tuple(p.shape[1:]) if p.dim() else ())
                for name, p in named]

    def _record(self, index, flat):
        """Adds the raw local gradients in `flat`, module `index`'s reduce-scatter
        input, to the epoch's sums."""
        whole = _whole_gradients(self._modules[index], flat, self.shard_world_size)
        if whole is not None:  # None: a parameter without gradient; the exchange refuses the step
            _library.call(self._sums.add, *whole)

    # FSDP calls each module's hook once per step and tells no step's end: a step ends
    # when a module comes round again, or at set_epoch().
    @property
    def steps(self):
        """Steps whose shards were exchanged (the one under way included)."""
        return self._steps_done + (1 if self._seen else 0)

    @steps.setter
    def steps(self, value):
        self._steps_done, self._seen = int(value), set()

    def set_epoch(self, epoch, lr=None):
        self.steps = self.steps  # the step under way has ended
        super().set_epoch(epoch, lr)

    def _exchange_shard(self, index, output):
        """FSDP's all-reduce hook of module `index`: `output`, its flat reduce-scatter
        output (averaged within the replica), becomes the average over the replicas."""
        module = self._modules[index]
        if index in self._seen:
            self.steps = self.steps  # a new step
        self._seen.add(index)
        if output.numel() != module.numel:
            raise UsageError(f"model: {module.label} reduced {output.numel()} gradient values, not the "
                             f"{module.numel} of its parameters' shards: a parameter got no gradient this step; "
                             "compress_fsdp needs one for every trainable parameter of a module in every step")
        if output.dtype not in _DTYPES:
            raise UsageError(f"model: {module.label} reduces its gradients in {output.dtype}; the replica exchange "
                             "takes float32, bfloat16 or float16 (MixedPrecisionPolicy's reduce_dtype)")
        if self._levels is None:
            raise UsageError("compress_fsdp: online Accordion decides each epoch's levels at set_epoch(epoch, lr); "
                             "call it before the epoch's first step")
        if self._sums is not None and self.shard_world_size == 1:
            self._record(index, output)  # one shard: no reduce-scatter, the output is the local gradient
        dense = self._steps_done < self.start_step
        names, shards, levels = [], [], []
        offset = 0
        for name, padded, shape, _ in module.parts:
            numel = math.prod(shape)
            if numel:  # a rank past a parameter's last row holds none of it: nothing to exchange
                names.append(name)
                # The real rows only: the padding is no gradient.
                shards.append(output[offset:offset + numel].view(shape))
                levels.append(_library.NO_COMPRESSION if dense else self._levels[name])
            offset += padded
        gravac = _library.call(self._sync.whole_step, dense)
        if gravac or self._one_exchange:
            # GraVAC decides once per step from every module's shards, and one_exchange
            # sends them together, while FSDP needs this module's back when the hook
            # returns: copies go to the exchange, the shard leaves the hook as zeros, and
            # the average is added to the gradients FSDP made of it once every module has
            # come (_end_step).
            copies = [shard.clone() for shard in shards]
            output.zero_()
            self._deferred.append((index, list(zip(names, copies, levels))))
            if names and gravac:
                _library.call(self._sync.add_bucket, names, copies, levels, dense)
            if not self._step_end_queued:
                # After FSDP's own end of the backward pass (queued at its start), which
                # reduces the modules left and hands every gradient over.
                self._step_end_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(lambda: self._end_step(dense, gravac))
        elif names:
            _library.call(self._sync.add_bucket, names, shards, levels, dense)
            _library.call(self._sync.finish_step, self.epoch)

    def _end_step(self, dense, gravac):
        """At the end of the backward pass: the step's shards averaged (GraVAC's, at the
        factor it chooses, or one_exchange's, all modules in one exchange), and each
        added to the gradient FSDP made of the zeros its hook handed back, as FSDP
        would have made it of the average."""
        self._step_end_queued = False
        deferred, self._deferred = self._deferred, []
        if gravac:
            expected = [i for i, module in enumerate(self._modules) if module.parts]
            missing = [self._modules[i].label for i in expected if i not in self._seen]
            if missing:
                raise UsageError(f"model: {missing[0]} reduced no gradients in this step; GraVAC decides once per "
                                 "step from every module's shards, so compress_fsdp(gravac=...) needs every FSDP "
                                 "module with trainable parameters to reduce its gradients in every step")
        else:
            parts = [part for _, shards in deferred for part in shards]
            if parts:
                names, copies, levels = (list(column) for column in zip(*parts))
                _library.call(self._sync.add_bucket, names, copies, levels, dense)
        _library.call(self._sync.finish_step, self.epoch)
        with torch.no_grad():
            for index, shards in deferred:
                module = self._modules[index]
                after = _after_hook(module.group, shards[0][1].dtype) if shards else None
                for name, average, _ in shards:
                    grad = module.params[name].sharded_param.grad
                    grad._local_tensor.add_(after(average))
        self.steps = self.steps  # the step has ended

    # A state's owner and layout (CompressionState.state_dict()) name the shard too.
    def _owner(self):
        return {**super()._owner(), "shard_rank": self.shard_rank, "shard_world_size": self.shard_world_size}

    def _layout(self):
        return {**super()._layout(), "shard_world_size": self.shard_world_size}

    def _describe(self, layout):
        replicas, shards = layout["world_size"], layout.get("shard_world_size")
        return f"{replicas} replica{'s' if replicas != 1 else ''} x {shards} shard{'s' if shards != 1 else ''}"

    def _check_owner(self, owner):
        saved = (owner.get("shard_rank"), owner.get("shard_world_size"))
        if saved != (self.shard_rank, self.shard_world_size):
            raise UsageError(f"state_dict: saved by shard {saved[0]} of {saved[1]}, loaded on shard "
                             f"{self.shard_rank} of {self.shard_world_size}; each shard's error memories are its "
                             "own, so a state loads only on the shard and replica that saved it")
        super()._check_owner(owner)

    def load_state_dict(self, state_dict):
        """As CompressionState's; a change of layout (replicas x shards) drops each
        rank's memories with a warning and goes on with the rest."""
        if not isinstance(state_dict, dict) or state_dict.get("shard_world_size") is None:
            raise UsageError("state_dict: names no shard (shard_rank, shard_world_size); it is not a "
                             "compress_fsdp state's state_dict()")
        super().load_state_dict(state_dict)


def _after_hook(group, dtype):
    """What FSDP does to a shard in `dtype` (its reduce_dtype) between the all-reduce
    hook and the gradient (foreach_reduce, torch 2.11): divides by the rest of the
    average's divisor where it divides in two parts (an fp16 reduce_dtype), and casts
    to the parameters' dtype."""
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import _get_gradient_divide_factors
    _, post, _, _ = _get_gradient_divide_factors(group._reduce_scatter_process_group, None, dtype, group.device.type,
                                                  group.gradient_divide_factor, group.force_sum_reduction_for_comms)
    orig = group._orig_dtype

    def after(shard):
        if post is not None and post != 1:
            shard = shard / post
        return shard.to(orig) if orig is not None and shard.dtype != orig else shard
    return after


class _LocalGradients:
    """FSDP's reduce-scatter of one parameter group (`comm`, the module's own) that
    first hands its input, this rank's raw local gradients, to each of `listeners`
    (compress_fsdp's online Accordion and GradientRecorder share it)."""

    def __init__(self, comm):
        self.comm, self.listeners = comm, []

    def allocate(self, size, *, dtype, device):
        return self.comm.allocate(size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        for listen in self.listeners:
            listen(input_tensor)
        return self.comm(output_tensor=output_tensor, input_tensor=input_tensor, group=group, op=op,
                         async_op=async_op)


def _listen(module, group, listen):
    """Has `listen(flat)` called with FSDP module `module`'s reduce-scatter input (its
    parameter group `group`) before each reduce-scatter."""
    comm = group._reduce_scatter_comm
    if not isinstance(comm, _LocalGradients):
        comm = _LocalGradients(comm)
        module.set_custom_reduce_scatter(comm)
    comm.listeners.append(listen)


def _whole_gradients(module, flat, shards):
    """([name], [gradient]) of the raw local gradients in `flat`, the reduce-scatter
    input of `module` (a _Module) over `shards` ranks: each parameter's rows padded
    and cut into the shards' chunks, one chunk after the other, joined back into the
    whole parameter's gradient (padding cut off), in the parameter's dtype: a 16-bit
    reduce_dtype's gradients are summed as grad-dump sums, in the parameter's. None
    where `flat` is not that size: a parameter got no gradient, and FSDP left it out."""
    if flat.numel() != shards * module.numel:
        return None
    chunks = flat.view(shards, -1)
    names, gradients, offset = [], [], 0
    for name, padded, _, shape in module.parts:
        rows, cols = shape[0], math.prod(shape[1:])
        names.append(name)
        whole = chunks[:, offset:offset + padded].reshape(-1, cols)[:rows].reshape(shape)
        gradients.append(whole.to(module.dtypes[name]))
        offset += padded
    return names, gradients


def _label(name):
    return f"module '{name}'" if name else "the root module"


def _has_fsdp2():
    try:
        from torch.distributed.fsdp import FSDPModule  # noqa: F401
    except Exception:  # 1.13 has none; under Python 3.11 its fsdp package does not even import
        return False
    return True


def _is_fsdp(model):
    """Whether `model` holds a module sharded by FSDP, fully_shard's (FSDP2) or
    FullyShardedDataParallel (FSDP1)."""
    if not _has_fsdp2() or not isinstance(model, torch.nn.Module):
        return False
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    return any(isinstance(m, (FSDPModule, FullyShardedDataParallel)) for m in model.modules())


def _fsdp_modules(model, what="compress_fsdp"):
    """[(name, FSDP module, its parameter group)] of the modules fully_shard gave
    parameters, and their shard group; UsageError for what `what` (compress_fsdp,
    which exchanges the shards, or GradientRecorder, which reads the reduce-scatter's
    input) cannot take."""
    exchange = what == "compress_fsdp"
    if not _has_fsdp2():
        raise UsageError(f"{what}: needs PyTorch 2.x with FSDP2 (torch.distributed.fsdp.fully_shard); "
                         f"this is torch {torch.__version__}")
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model: must be a torch.nn.Module sharded with fully_shard, not {type(model).__name__}")
    for name, module in model.named_modules():
        if isinstance(module, FullyShardedDataParallel):
            if exchange:
                raise UsageError(f"model: {_label(name)} is FullyShardedDataParallel (FSDP1); compress_fsdp "
                                 "exchanges the shards in FSDP2's per-module all-reduce hook: shard it with "
                                 "fully_shard(module, mesh=mesh['shard']) instead")
            raise UsageError(f"model: {_label(name)} is FullyShardedDataParallel (FSDP1); GradientRecorder reads "
                             "the local gradients at the input of FSDP2's per-module reduce-scatter: shard it with "
                             "fully_shard(module) instead")
    modules, shard_ranks = [], None
    for name, module in model.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        group = module._get_fsdp_state()._fsdp_param_group  # None: no parameters of its own
        if group is None:
            continue
        info = group.mesh_info
        if exchange and (hasattr(info, "replicate_process_group") or not hasattr(info, "shard_process_group")):
            raise UsageError(f"model: {_label(name)} is sharded over a 2-D mesh, FSDP's own hybrid sharding, which "
                             "already all-reduces the shards across the replicas; shard it over the shard dimension "
                             f"alone for compress_fsdp to exchange them ({_EXAMPLE})")
        if not hasattr(info, "shard_process_group"):
            raise UsageError(f"model: {_label(name)} is replicated, not sharded, so no reduce-scatter hands over "
                             f"its local gradients; shard it with fully_shard(module, mesh=...) for {what}")
        if exchange and group._all_reduce_hook is not None:
            raise UsageError(f"model: {_label(name)} already has an all-reduce hook (set_all_reduce_hook); FSDP "
                             "runs one per module, and compress_fsdp's is the replica exchange")
        for p in group.fsdp_params:
            if exchange and p.offload_to_cpu:
                raise UsageError(f"model: {_label(name)} offloads its parameters to the CPU (CPUOffloadPolicy), "
                                 "which compress_fsdp does not support yet; shard it without offload_policy")
            if p.fsdp_placement.dim != 0:
                raise UsageError(f"model: {_label(name)} shards its parameter '{p._module_info.param_name}' on "
                                 f"dimension {p.fsdp_placement.dim} (shard_placement_fn); {what} takes "
                                 "shards of rows, fully_shard's default dimension 0")
        ranks = dist.get_process_group_ranks(info.shard_process_group)
        if shard_ranks is not None and ranks != shard_ranks:
            raise UsageError(f"model: {_label(name)} is sharded over ranks {ranks}, other modules over "
                             f"{shard_ranks}; {what} needs one shard mesh for the whole model")
        shard_ranks = ranks
        modules.append((name, module, group))
    if not modules and not exchange:
        raise UsageError(f"model: GradientRecorder reads the local gradients at FSDP2's reduce-scatter; no module of "
                         f"this {type(model).__name__} has parameters sharded by fully_shard")
    if not modules:
        raise UsageError(f"model: {what} exchanges the gradient shards of FSDP2's fully_shard; give it the "
                         f"model after fully_shard(module, mesh=mesh['shard']), not a {type(model).__name__} "
                         "without sharded parameters")
    return modules, modules[0][2].mesh_info.shard_process_group


def _layouts(modules, named):
    """Each FSDP module's _Module, and the names of the parameters they manage."""
    name_of = {id(p): name for name, p in named}
    layouts, managed = [], set()
    for module_name, _, group in modules:
        parts, dtypes, params = [], {}, {}
        for p in group.fsdp_params:
            name = name_of.get(id(p.sharded_param))
            if name is None:  # frozen: FSDP reduces no gradient of it
                continue
            managed.add(name)
            parts.append((name, math.prod(p.padded_sharded_param_size), tuple(p.sharded_size),
                          tuple(p.sharded_param.shape)))
            dtypes[name] = p.sharded_param.dtype
            params[name] = p
        layouts.append(_Module(_label(module_name), parts, dtypes, group, params))
    return layouts, managed


def _replica_group(replicate_group, shard_group):
    """The process group of `replicate_group` (a 1-D DeviceMesh or a ProcessGroup),
    checked against the shard group: one rank of each replica, all with this rank's
    shard index, and together with the shard group the whole world."""
    if replicate_group is None:
        raise UsageError("replicate_group: missing; compress_fsdp exchanges each gradient shard across the "
                         "replicas over the replica dimension of the mesh the model is sharded on "
                         f"({_EXAMPLE})")
    group = replicate_group
    if hasattr(group, "get_group") and hasattr(group, "ndim"):  # a DeviceMesh
        if group.ndim != 1:
            raise UsageError(f"replicate_group: a {group.ndim}-D mesh; give its replica dimension alone ({_EXAMPLE})")
        group = group.get_group()
    if not isinstance(group, dist.ProcessGroup):
        raise UsageError(f"replicate_group: must be the replica dimension of the mesh (a 1-D DeviceMesh or its "
                         f"ProcessGroup), not {type(replicate_group).__name__}")
    me = dist.get_rank()
    replicas, shards = dist.get_process_group_ranks(group), dist.get_process_group_ranks(shard_group)
    if me not in replicas:
        raise UsageError(f"replicate_group: ranks {replicas}, which do not include this rank ({me}); give each "
                         f"rank the replica group it belongs to ({_EXAMPLE})")
    if set(replicas) & set(shards) != {me}:
        raise UsageError(f"replicate_group: ranks {replicas} hold several shards of this rank's replica (its shard "
                         f"group is ranks {shards}); the replica group joins one rank of each replica ({_EXAMPLE})")
    if len(replicas) * len(shards) != dist.get_world_size():
        raise UsageError(f"replicate_group: its {len(replicas)} ranks times the shard group's {len(shards)} make "
                         f"{len(replicas) * len(shards)}, not the world's {dist.get_world_size()} ranks; the "
                         f"replica group spans the mesh's replica dimension ({_EXAMPLE})")
    mine = (dist.get_rank(shard_group), len(shards))
    everyone = [None] * len(replicas)
    dist.all_gather_object(everyone, mine, group=group)
    for rank, theirs in zip(replicas, everyone):
        if tuple(theirs) != mine:
            raise UsageError(f"replicate_group: rank {rank} holds shard {theirs[0]} of {theirs[1]}, this rank "
                             f"({me}) shard {mine[0]} of {mine[1]}; the replica group joins the ranks of one shard "
                             f"index ({_EXAMPLE})")
    return group
