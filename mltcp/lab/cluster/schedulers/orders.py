"""Queue orders: who of the waiting (and, for preemptive schedulers, running) jobs goes
first.  Each is a key: smaller goes first, ties by arrival then name.

* ``fifo``: arrival order;
* ``srtf``: shortest remaining time first: remaining iterations x the expected
  iteration time (the measured one for a running job, else compute plus the gradient
  all-reduce at the NIC rate on as many servers as its GPUs need);
* ``srsf``: shortest remaining service first: SRTF's time x the job's GPUs (Ada-SRSF's
  base order, ada-srsf section IV);
* ``las``: least attained service first: GPU-seconds held so far (Tiresias' LAS, the
  baseline of deepshare-rl's RL scheduler, section 5).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, ring_comm_s
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import QueuedJob, RunningJob
from mltcp.lab.cluster.schedulers.queue import OrderKey


def expected_iteration_s(job: JobRequest, fabric: LeafSpine) -> float:
    """Compute plus a ring all-reduce over the fewest servers that hold the job's GPUs,
    at the payload rate of a server's NICs together, all its rails (what the job would
    take alone, consolidated)."""
    servers = math.ceil(job.gpus / fabric.gpus_per_server)
    return job.compute_s + ring_comm_s(fabric, job.gradient_bytes, servers)


def fifo(fabric: LeafSpine) -> OrderKey:
    return lambda job, now: (job.request.arrival_s,)


def srtf(fabric: LeafSpine) -> OrderKey:
    def key(job: QueuedJob | RunningJob, now: float) -> tuple:
        req = job.request
        per = job.iteration_s if isinstance(job, RunningJob) and job.iteration_s > 0 \
            else expected_iteration_s(req, fabric)
        return ((req.iterations - job.done) * per,)
    return key


def srsf(fabric: LeafSpine) -> OrderKey:
    time_key = srtf(fabric)
    return lambda job, now: (time_key(job, now)[0] * job.request.gpus,)


def las(fabric: LeafSpine) -> OrderKey:
    return lambda job, now: (job.attained_gpu_s,)


ORDERS: dict[str, Callable[[LeafSpine], OrderKey]] = {
    "fifo": fifo, "srtf": srtf, "srsf": srsf, "las": las}


def order(name: str, fabric: LeafSpine) -> OrderKey:
    if name not in ORDERS:
        raise SpecError("scheduler.order", f"unknown order {name!r}",
                        f"use one of: {', '.join(ORDERS)}")
    return ORDERS[name](fabric)
