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


def attach_ddp(hook: IterationHook, model: Any) -> None:
    """Register the timed default all-reduce on a ``DistributedDataParallel`` model."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        raise SpecError("model", f"a {type(model).__name__} is not DistributedDataParallel",
                        "wrap it first: model = DistributedDataParallel(model); "
                        "for FSDP use attach_fsdp()")
    _check_rank(hook)
    group = model.process_group

    # Not annotated: DDP checks a hook's annotations against its own types, and this
    # module's postponed annotations would be strings.
    def timed_allreduce(state, bucket):
        buffer = bucket.buffer()
        token = state._handed(_nbytes(buffer), last=bucket.is_last())
        reduced = default_hooks.allreduce_hook(group, bucket)

        def done(fut):
            tensor = fut.value()
            state._completed(token, **_completion(tensor))
            return tensor

        return reduced.then(done)

    model.register_comm_hook(hook, timed_allreduce)


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
