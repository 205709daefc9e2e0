"""PyTorch DDP training of a real architecture on synthetic data, with the mltcp hook.

Run it under ``torchrun`` (or any launcher of ``torch.distributed``'s ``env://``
rendezvous: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), one process per
GPU or per CPU host::

    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --master-addr 10.0.0.1 \\
        --master-port 29500 -m mltcp.workloads.ddp --model resnet50 --batch 32

* **Models**: torchvision's ResNet and VGG families and a GPT-style transformer
  (:mod:`mltcp.workloads.models`), on synthetic data drawn from ``--seed`` and the rank:
  nothing is downloaded, and a run can be repeated.
* **Transport**: gloo on CPU hosts; NCCL on GPU hosts, over TCP sockets
  (``NCCL_IB_DISABLE=1``, ``NCCL_NET=Socket``) so that the TCP congestion control, and
  so MLTCP, carries the gradients (:mod:`mltcp.workloads.transport`).  The output says
  which.
* **Compute pad** (``--gpu-time-ms``): each iteration sleeps that long before its
  forward pass, a compute phase without traffic standing in for a GPU's, so that a CPU
  host can play an A100's compute/communication ratio with a model whose gradients give
  the bytes.  The CPU's own forward and backward still run on top of it.  The output
  says so whenever the pad is on.
* **Records**: every iteration is marked with :mod:`mltcp.hook` (its DDP communication
  hook times the gradient buckets); ``--hook-out``/``$MLTCP_HOOK_OUT`` keeps the
  records, ``--signal``/``$MLTCP_HOOK_SIGNAL`` signals each iteration's end to the
  agent.
* ``--describe`` prints the parameters and gradient bytes per iteration, and the bytes
  each host sends per iteration in a ring all-reduce of ``--workers`` ranks (the job's
  byte budget), without training.

Rank 0 prints progress; a bad flag or variable is one line naming it (exit 2), a missing
PyTorch or GPU one line too (exit 3), and so is Ctrl-C (exit 130, the records closed).
torchrun's own answer to Ctrl-C is a traceback; ``python -m mltcp.workloads.torchrun``
(:mod:`mltcp.workloads.torchrun`, torchrun's flags) answers in one line.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from mltcp import hook
from mltcp.core import signals
from mltcp.core.budget import JobDescription
from mltcp.core.errors import CapabilityError, SpecError
from mltcp.workloads import spec as spec_
from mltcp.workloads.spec import RunSpec, go_moment

RENDEZVOUS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def describe(run: RunSpec) -> dict[str, Any]:
    """The model's size and what one iteration communicates, for byte budgets."""
    from mltcp.workloads import models

    model = models.build(run.model)
    grad = models.gradient_bytes(model)
    out: dict[str, Any] = {"model": run.model.model, "parameters": models.parameters(model),
                           "gradient_bytes": grad}
    if run.model.model == spec_.TRANSFORMER:
        out["size"] = vars(run.model.size)
    if run.workers > 1:
        out["workers"] = run.workers
        out["bytes_per_host_per_iteration"] = JobDescription(grad, run.workers) \
            .bytes_per_iteration()
    return out


def train(run: RunSpec) -> int:
    """One rank's training; 0 when every iteration ran."""
    import torch
    import torch.distributed as dist

    from mltcp.workloads import transport

    net = transport.choose(run.backend, torch.cuda.is_available())
    missing = [name for name in RENDEZVOUS if not os.environ.get(name)]
    if missing:
        raise SpecError(", ".join(missing), "not set: there is no rendezvous",
                        f"run it under torchrun (torchrun --nproc-per-node 2 -m "
                        f"mltcp.workloads.ddp ...) or set {', '.join(RENDEZVOUS)} (env://)")
    # before the rendezvous: a bad hook setting stops this rank before its peers wait on it
    h = hook.from_env(out=run.hook_out, job=run.job, signal=run.signal)
    if net.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    try:
        # NCCL is told its GPU up front (else its first barrier guesses the device
        # and warns: seen on an H200 with torch 2.11)
        bound = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(net.backend, init_method="env://", **bound)
    except BaseException:
        h.close()
        raise
    try:
        return _train_ranks(run, h, net, device)
    finally:
        h.close()
        # The DDP model of _train_ranks is gone now (its frame ended), and with it the
        # last references to gloo's work objects; collect them while the interpreter is
        # whole.  Left to the interpreter's exit, a gloo thread may drop the last one
        # during finalization, need the GIL there and abort the process (std::terminate,
        # SIGABRT) after a successful run.
        gc.collect()
        dist.destroy_process_group()


def _train_ranks(run: RunSpec, h: hook.IterationHook, net: Any,
                 device: Any) -> int:
    """The rendezvoused part of :func:`train`: model, DDP, the timed iterations."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mltcp.workloads import models

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(run.seed)              # one initial model on every rank
    model = models.build(run.model).to(device)
    ddp = DistributedDataParallel(model, bucket_cap_mb=run.bucket_cap_mb,
                                  device_ids=[device.index] if device.type == "cuda"
                                  else None)
    h.attach_ddp(ddp)
    data = models.synthetic_batches(run.model, run.seed, rank, device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    if rank == 0:
        _announce(run, models.parameters(model), models.gradient_bytes(model), world,
                  net.description, h)
    dist.barrier()
    if run.start_at is not None:
        ready = time.time()
        wait = run.start_at - ready
        if rank == 0:       # "start: ready at" is what the hosts backend reads
            when = time.strftime('%H:%M:%S', time.localtime(run.start_at))
            go = f"for the go file {run.start_go}, at most " if run.start_go else ""
            print(f"start: ready at {ready:.3f}; " + (
                f"the first iteration waits {go}{wait:.1f} s, until {when} (--start-at)"
                if wait >= 0 else
                f"LATE: {-wait:.1f} s after {when} (--start-at); the first iteration starts "
                "now, not together with the other jobs"), flush=True)
        start_at = run.start_at
        if run.start_go and wait > 0:
            start_at = go_moment(run.start_go, run.start_at)
            if rank == 0:   # "start: go at": the moment the hosts backend measures skew from
                print(f"start: go at {start_at:.6f}, {run.start_at - start_at:.1f} s before "
                      "--start-at", flush=True)
        time.sleep(max(0.0, start_at - time.time()))
    pad_s = run.gpu_time_ms / 1000
    durations: list[float] = []
    for i in range(run.iterations):
        x, y = data[i % len(data)]
        with h.iteration():
            if pad_s:
                time.sleep(pad_s)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            if device.type == "cuda":      # the iteration ends when the GPU is done
                torch.cuda.synchronize(device)
        record = h.last
        durations.append(record.end - record.start)
        if rank == 0 and ((i + 1) % run.log_every == 0 or i + 1 == run.iterations):
            comm = ((record.comm_end - record.comm_start) * 1000
                    if record.comm_start is not None else 0.0)
            print(f"iteration {i + 1}/{run.iterations}: {durations[-1] * 1000:.1f} ms "
                  f"(communication {comm:.1f} ms, {record.bytes / 1e6:.2f} MB in "
                  f"{record.buckets} bucket{'' if record.buckets == 1 else 's'}), "
                  f"loss {loss.item():.3f}", flush=True)
    if rank == 0:
        print(f"done: {run.iterations} iterations, mean "
              f"{statistics.fmean(durations) * 1000:.1f} ms, median "
              f"{statistics.median(durations) * 1000:.1f} ms", flush=True)
    return 0


def _announce(run: RunSpec, params: int, grad: int, world: int, transport: str,
              h: hook.IterationHook) -> None:
    m = run.model
    shape = (f"d_model {m.size.d_model}, {m.size.layers} layers, {m.size.heads} heads, "
             f"seq {m.size.seq}, vocab {m.size.vocab}" if m.model == spec_.TRANSFORMER
             else f"{m.image_size}x{m.image_size} images, {m.classes} classes")
    print(f"{m.model} ({shape}): {params:,} parameters, {grad / 1e6:.2f} MB of gradients per "
          f"iteration; {world} ranks, batch {m.batch} per rank, synthetic data (seed "
          f"{run.seed})", flush=True)
    print(f"transport: {transport}", flush=True)
    if run.gpu_time_ms:
        print(f"compute pad ON: each iteration sleeps {run.gpu_time_ms:g} ms before its "
              "forward pass, standing in for GPU compute (--gpu-time-ms); the CPU's forward "
              "and backward run on top of it", flush=True)
    signal = f"end-of-iteration signal for job {h.job}" if h.signalling else "no signal"
    print(f"hook: records {'in ' + str(h.path) if h.path else 'not kept'}; {signal}",
          flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The command: 0 when every iteration ran; 2 for bad input, 3 for what the host
    lacks, 130 for Ctrl-C, each with one line on stderr.

    Ctrl-C (in a terminal it reaches torchrun and every rank of its process group) unwinds
    the rank: the hook's records are closed and the process group is destroyed in
    :func:`train`'s ``finally``, a second Ctrl-C during that is ignored, and the rank says
    so in one line instead of a traceback per rank.  SIGTERM keeps its default (the
    process ends at once): it is what a launcher sends to stop a rank that may be stuck
    inside a collective, where no Python handler would run."""
    try:
        with signals.unwinding((signal.SIGINT,), exiting=True):
            run = spec_.parse(argv)
            if run.describe:
                print(json.dumps(describe(run)))
                return 0
            return train(run)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            sys.stderr.write(f"{spec_.PROG}: interrupted (SIGINT)\n")
        return signals.exit_code(signal.SIGINT)
    except SpecError as exc:
        return spec_.fail(exc)
    except CapabilityError as exc:
        sys.stderr.write(f"{spec_.PROG}: error: {exc}\n")
        return 3
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("torch", "torchvision"):
            raise
        sys.stderr.write(f"{spec_.PROG}: error: needs {exc.name}: pip install "
                         "'mltcp[torch]'\n")
        return 3
    except Exception as exc:
        if not _out_of_gpu_memory(exc):
            raise
        sys.stderr.write(f"{spec_.PROG}: error: {_gpu_memory_line(run, exc)}\n")
        return 3


def _out_of_gpu_memory(exc: BaseException) -> bool:
    """PyTorch's out-of-memory error (``torch.OutOfMemoryError``), told apart without
    importing torch: the scenario bounds a rank's memory (1 TiB) but knows no GPU, so a
    model too large for this host's GPU is found here, by PyTorch."""
    kind = type(exc)
    return kind.__name__ == "OutOfMemoryError" and kind.__module__.split(".")[0] == "torch"


def _gpu_memory_line(run: RunSpec, exc: BaseException) -> str:
    said = str(exc).strip().splitlines()
    first = said[0].split(". Including non-PyTorch memory")[0] if said else "out of memory"
    m = run.model
    size = f"--d-model {m.size.d_model}, --layers {m.size.layers}" \
        if m.model == spec_.TRANSFORMER else f"--image-size {m.image_size}"
    return (f"--model {m.model} with --batch {m.batch} does not fit this GPU's memory "
            f"(PyTorch: {first}); give a smaller --batch or model ({size})")


if __name__ == "__main__":
    code = main()
    # A worker process ends here, its results written (the hook's records closed in
    # train()) and its output flushed below.  The interpreter's own finalization is
    # skipped: gloo's threads and c10d's static objects can still be tearing down there,
    # and a race among them aborted a rank after a successful run (std::terminate,
    # SIGABRT; once in a full CI run, with every reference already collected).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
