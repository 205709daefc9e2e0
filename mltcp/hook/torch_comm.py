"""Timing PyTorch's gradient reductions: DDP's all-reduce, FSDP's reduce-scatter.

torch is imported inside the functions only: importing :mod:`mltcp.hook` costs nothing
and needs no torch; these run once the script hands the hook its model.

**DDP.**  ``DistributedDataParallel.register_comm_hook(state, hook)`` is PyTorch's way
to see each gradient bucket: ``hook(state, bucket)`` gets a ``GradBucket`` as the
bucket becomes ready during the backward pass and returns a future of the reduced
bucket.  The hook registered here calls PyTorch's own default
(``ddp_comm_hooks.default_hooks.allreduce_hook``: divide by the world size, all-reduce)
and only notes the time each bucket is handed over (``bucket.buffer()``'s bytes,
``bucket.is_last()``) and the time its future completes, so training is exactly what it
is without the hook.  DDP waits for every bucket's future before ``backward()``
returns, so an iteration's communication is always inside it.

DDP takes one comm hook, so a script that wants PyTorch's own compression gives it to
the timed hook instead (``inner_hook``, ``inner_state``): the timed hook calls
``inner_hook(inner_state, bucket)`` where it would call the default and times the future
that returns the same way.  The bytes it records are what goes on the wire where the
hook's traffic is known (:func:`wire_bytes`): fp16/bf16 compression sends 2 bytes an
element; PowerSGD sends what its state counts in ``total_numel_after_compression``
(the uncompressed tensors, Ps and Qs), or the whole bucket in its all-reduce phase.
For any other hook the records count the bucket's bytes, with a warning at attach.
Under ``torch.compile`` DDP's reducer still calls the hook outside Dynamo's graphs (a
compiled DDP is attached through its ``_orig_mod``); compiled autograd's
``python_reducer`` calls comm hooks per parameter, with no bucket, and is refused.

**FSDP.**  Two supported ways, one per FSDP:

* FSDP2 (``torch.distributed.fsdp.fully_shard``, PyTorch's current FSDP): the public
  ``FSDPModule.set_custom_reduce_scatter(comm)`` replaces the collective FSDP calls for
  each module's gradients; the one set here calls ``torch.distributed``'s reduce-scatter
  with the arguments FSDP passes (its reduce operation carries FSDP's averaging), so
  nothing changes but the timing.  FSDP2 sets no comm hook, so this is its only handle.
* FSDP1 (``FullyShardedDataParallel``): its public ``register_comm_hook(state, hook)``,
  with PyTorch's reference hooks for FSDP (``reduce_scatter_hook``/``allreduce_hook``
  with ``DefaultState``: the same pre- and post-division by the world size as FSDP's
  built-in reduction) timed around.  They live in a private module
  (``torch.distributed.algorithms._comm_hooks``), the one FSDP1's hooks are defined
  against; a PyTorch without it is refused with a one-line error.

Either way only the gradient reduction of the backward pass is timed: that is the
phase whose bytes grow with the model and repeat every iteration, the one the
datapath's budget counts.  FSDP's parameter all-gathers (forward, and backward for
re-sharded layers) are not marked.  FSDP's reductions are one per wrapped module and
their number per iteration is not known up front, so with FSDP the signal goes at the
iteration's end rather than at its last reduction.

**CUDA (NCCL).**  A CUDA collective's future completes when the work is queued, not
when the GPU has done it, so on CUDA a completion is a CUDA event recorded on the
collective's stream; the iteration's end waits for the GPU and converts the latest
event into CLOCK_MONOTONIC (to within the synchronisation's latency).  ``comm_start``
stays the moment the CPU handed the first bucket over.
"""

from __future__ import annotations

import sys
from typing import Any

from mltcp.core.errors import SpecError
from mltcp.hook.iteration import IterationHook, now


def _completion(tensor: Any) -> dict[str, Any]:
    """How a reduction whose result is ``tensor`` completes: now (CPU), or when the GPU
    reaches an event recorded on the current (the collective's) stream."""
    if tensor.is_cuda:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return {"gpu_event": event}
    return {"at": now()}


def cuda_completion(events: list[Any]) -> float:
    """CLOCK_MONOTONIC seconds at which the GPU passed the latest of ``events``: a
    reference event recorded now is waited for, then each event's distance to it is
    subtracted from the time the wait returned."""
    import torch

    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    for event in events:
        event.synchronize()
    ref.synchronize()
    t = now()
    before_ref_ms = min(event.elapsed_time(ref) for event in events)
    return t - max(0.0, before_ref_ms) / 1000


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def _check_rank(hook: IterationHook) -> None:
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if (hook.rank, hook.world_size) != (rank, world):
        raise SpecError("rank", f"the hook records rank {hook.rank} of {hook.world_size}, but "
                        f"this process is rank {rank} of {world}",
                        "create the hook after init_process_group(), or leave rank and "
                        "world_size unset")


# --------------------------------------------------------------------------- DDP


def attach_ddp(hook: IterationHook, model: Any, *, inner_hook: Any = None,
               inner_state: Any = None) -> None:
    """Register the timed all-reduce on a ``DistributedDataParallel`` model: PyTorch's
    default, or ``inner_hook(inner_state, bucket)`` (a DDP comm hook: fp16/bf16
    compression, PowerSGD, ...), timed; see the module's docstring."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    if inner_hook is None:
        if inner_state is not None:
            raise SpecError("inner_state", "is given without inner_hook",
                            "pass the comm hook it belongs to as inner_hook=")
    elif not callable(inner_hook):
        raise SpecError("inner_hook", f"a {type(inner_hook).__name__} is not callable",
                        "pass a DDP comm hook, a function (state, bucket) -> Future, such "
                        "as default_hooks.fp16_compress_hook")
    compiled = getattr(model, "_orig_mod", None)     # torch.compile(ddp): its DDP
    if isinstance(compiled, DistributedDataParallel):
        model = compiled
    if not isinstance(model, DistributedDataParallel):
        composing = "; inner_hook composes with DDP's comm hooks only" if inner_hook else ""
        raise SpecError("model", f"a {type(model).__name__} is not "
                        f"DistributedDataParallel{composing}",
                        "wrap it first: model = DistributedDataParallel(model); "
                        "for FSDP use attach_fsdp()")
    _refuse_registered(model)
    _check_rank(hook)
    if inner_hook is None:
        inner_hook, inner_state = default_hooks.allreduce_hook, model.process_group
    measure = wire_bytes(inner_hook, inner_state)

    # Not annotated: DDP checks a hook's annotations against its own types, and this
    # module's postponed annotations would be strings.
    def timed_allreduce(state, bucket):
        if isinstance(bucket, tuple):       # DDP's python_reducer: a hook per parameter
            raise SpecError("model", "DDP calls its comm hook per parameter gradient under "
                            "compiled autograd (torch._dynamo.config.optimize_ddp = "
                            "'python_reducer'), with no bucket to time",
                            "compile with the default optimize_ddp, or leave the model "
                            "unattached and mark the communication with comm_begin()/"
                            "comm_end()")
        handed = now()
        last = bucket.is_last()
        before = measure.before(bucket)
        reduced = inner_hook(inner_state, bucket)
        token = state._handed(measure.after(bucket, before), last=last, at=handed)

        def done(fut):
            tensor = fut.value()
            state._completed(token, **_completion(tensor))
            return tensor

        return reduced.then(done)

    timed_allreduce.mltcp_inner_hook = inner_hook
    try:
        model.register_comm_hook(hook, timed_allreduce)
    except RuntimeError as e:   # a built-in (C++) hook, which _comm_hooks does not list
        if "once" not in str(e):
            raise
        raise SpecError("inner_hook", "the model has a comm hook registered already (DDP "
                        "takes one)", _REGISTER_FIX) from None

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise SpecError("inner_hook", "the model's comm hook is MLTCP's timed hook "
                        "(attach_ddp) already, and DDP takes one", _REGISTER_FIX)

    # A comm hook registered later would fail in DDP's C++ reducer; say what to do instead.
    model.register_comm_hook = refuse
    model._register_builtin_comm_hook = refuse


_REGISTER_FIX = ("register none yourself: pass it to attach_ddp(model, inner_hook=hook, "
                 "inner_state=state), which calls it and times it")


def _refuse_registered(model: Any) -> None:
    """A DDP model with a Python comm hook already (``register_comm_hook`` lists it)."""
    registered = getattr(model, "_comm_hooks", None) or []
    for fn, _ in registered:
        if hasattr(fn, "mltcp_inner_hook"):
            raise SpecError("model", "has MLTCP's timed comm hook already (attach_ddp was "
                            "called on it before)", "use one IterationHook per model")
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise SpecError("inner_hook", f"the model has a comm hook registered already "
                        f"({name}; DDP takes one)", _REGISTER_FIX)


class _WireBytes:
    """The bytes one bucket puts on the wire through a comm hook.  ``before`` is read
    just before the hook runs, ``after`` just after it returned (its first collective
    is started; PowerSGD has counted what all of them will send)."""

    def before(self, bucket: Any) -> Any:
        return _nbytes(bucket.buffer())

    def after(self, bucket: Any, before: Any) -> int:
        return int(before)


class _Compressed(_WireBytes):
    """fp16/bf16 compression: the bucket's elements, all-reduced in ``dtype``."""

    def __init__(self, dtype: Any) -> None:
        import torch

        self.itemsize = int(torch.empty((), dtype=dtype).element_size())

    def before(self, bucket: Any) -> Any:
        return int(bucket.buffer().numel()) * self.itemsize


class _PowerSGD(_WireBytes):
    """PowerSGD (``powerSGD_hook``, ``batched_powerSGD_hook``, either inside
    ``fp16/bf16_compress_wrapper``): in its compression phase the hook adds the elements
    it all-reduces (the uncompressed tensors, the Ps and the Qs; P and Q for the batched
    hook) to ``state.total_numel_after_compression``, in the bucket's dtype; in its
    first ``start_powerSGD_iter`` iterations it all-reduces the bucket and counts
    nothing.  A compress wrapper has swapped the bucket's buffer for its 16-bit one by
    the time the hook returns, so the dtype is read then."""

    def __init__(self, state: Any) -> None:
        self.state = state

    def before(self, bucket: Any) -> Any:
        return self.state.total_numel_after_compression

    def after(self, bucket: Any, before: Any) -> int:
        buffer = bucket.buffer()
        sent = self.state.total_numel_after_compression - before
        return int(sent) * int(buffer.element_size()) if sent > 0 else _nbytes(buffer)


def wire_bytes(inner_hook: Any, inner_state: Any) -> _WireBytes:
    """How many bytes ``inner_hook`` puts on the wire per bucket; a hook this does not
    know is counted as the bucket's bytes, and a warning says so (once, at attach)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if isinstance(inner_state, powerSGD_hook.PowerSGDState):
        return _PowerSGD(inner_state)
    if inner_hook is default_hooks.fp16_compress_hook:
        return _Compressed(torch.float16)
    if inner_hook is default_hooks.bf16_compress_hook:
        return _Compressed(torch.bfloat16)
    if inner_hook is not default_hooks.allreduce_hook:
        name = getattr(inner_hook, "__qualname__", type(inner_hook).__name__)
        sys.stderr.write(f"mltcp.hook: attach_ddp does not know what inner_hook {name} "
                         "sends; the records' bytes are its buckets' uncompressed sizes, "
                         "not necessarily what it sends\n")
        sys.stderr.flush()
    return _WireBytes()


# --------------------------------------------------------------------------- FSDP


def attach_fsdp(hook: IterationHook, model: Any) -> None:
    """Time an FSDP2 (``fully_shard``) or FSDP1 (``FullyShardedDataParallel``) model's
    gradient reductions; see the module's docstring for how and why."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    fsdp2 = _fsdp2_module_type()
    if isinstance(model, FullyShardedDataParallel):
        _attach_fsdp1(hook, model)
    elif fsdp2 is not None and isinstance(model, fsdp2):
        _attach_fsdp2(hook, model, fsdp2)
    else:
        raise SpecError("model", f"a {type(model).__name__} is not an FSDP model",
                        "apply fully_shard() (or FullyShardedDataParallel) first; "
                        "for DDP use attach_ddp()")


def _fsdp2_module_type() -> type | None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:          # PyTorch before FSDP2 was public
        return None
    return FSDPModule


class TimedReduceScatter:
    """FSDP2's reduce-scatter (its ``ReduceScatter`` interface: ``allocate`` and the
    call), timed.  Duck-typed: the interface's base class is private to PyTorch."""

    def __init__(self, hook: IterationHook) -> None:
        self.hook = hook

    def allocate(self, size: Any, *, dtype: Any, device: Any) -> Any:
        import torch

        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any,
                 async_op: bool = False) -> Any:
        import torch.distributed as dist

        reduce_scatter = getattr(dist, "reduce_scatter_single", None) \
            or dist.reduce_scatter_tensor
        token = self.hook._handed(_nbytes(input_tensor), last=False)
        work = reduce_scatter(output_tensor, input_tensor, op=op, group=group,
                              async_op=async_op)
        if work is None:          # synchronous: done (CPU) or queued on this stream (CUDA)
            self.hook._completed(token, **_completion(output_tensor))
            return None

        def done(fut: Any) -> Any:
            self.hook._completed(token, **_completion(output_tensor))
            return fut.value()

        work.get_future().then(done)
        return work


def _attach_fsdp2(hook: IterationHook, model: Any, fsdp_module: type) -> None:
    if not hasattr(fsdp_module, "set_custom_reduce_scatter"):
        import torch

        raise SpecError("model", f"PyTorch {torch.__version__} has no "
                        "FSDPModule.set_custom_reduce_scatter", "use a newer PyTorch, or mark "
                        "the communication with comm_begin()/comm_end()")
    _check_rank(hook)
    comm = TimedReduceScatter(hook)
    for module in model.modules():
        if isinstance(module, fsdp_module):
            module.set_custom_reduce_scatter(comm)


def _attach_fsdp1(hook: IterationHook, model: Any) -> None:
    try:
        from torch.distributed.algorithms._comm_hooks import default_hooks
    except ImportError:
        import torch

        raise SpecError("model", f"PyTorch {torch.__version__} lacks FSDP1's reference comm "
                        "hooks", "use fully_shard() (FSDP2), or mark the communication with "
                        "comm_begin()/comm_end()") from None
    _check_rank(hook)
    state = default_hooks.DefaultState(model.process_group)

    def timed(state: Any, grad: Any, output: Any = None) -> None:
        token = hook._handed(_nbytes(grad), last=False)
        if output is None:                  # NO_SHARD: an all-reduce of the gradient
            default_hooks.allreduce_hook(state, grad)
            result = grad
        else:
            default_hooks.reduce_scatter_hook(state, grad, output)
            result = output
        hook._completed(token, **_completion(result))

    model.register_comm_hook(state, timed)
