"""Placement on time-shared GPUs, as the ada-srsf paper's released simulator places jobs.

In the paper's simulator (github.com/HKBU-HPML/dl-scheduling, ``online/job_master.py``,
``job_scheduler.allocate.pick_gpus``) a GPU takes any job whose training memory fits in
what it has left (``gpu.rest_mem >= job.train_mem``), so a GPU holds several jobs whose
compute tasks queue on it; a job gets one worker on each of ``n`` distinct GPUs.  Each
GPU's *makespan* (``gpu.makespan``, the paper's ``L_g``) is the remaining work of its
jobs: on placement it grows by the job's compute ``(t_f + t_b) x iterations`` plus, for
a job on several servers, ``model_size x 7.8125 x iterations`` ms (``pick_gpus``: 7.8125
ms per MB is the 1 GbE β an earlier version of the code used, not 10 GbE's 0.856; kept as
the code has it); it shrinks as the GPU finishes the job's compute tasks and as the
job's all-reduces end.  The placements (the run script's ``pick_gpu`` names):

* ``bp`` (FF, first fit): the GPUs with room, in cluster order, first ``n``;
* ``random`` (RAND): the GPUs with room shuffled, first ``n``;
* ``lwfK`` (LWF-κ): ``n <= κ``: the GPUs with room sorted by (makespan, server), first
  ``n``; ``n > κ``: the servers sorted by their GPUs' mean makespan (a stable sort of
  the previous sort's order, which the code keeps), then each server's GPUs with room
  by makespan, first ``n`` of them all;
* LS (list scheduling): LWF-κ with every job within κ (the script's ``lwf32``: no job
  asks for more than 32 GPUs).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from mltcp.core import validate

# online/job_master.py, pick_gpus: the per-MB communication term of a job's workload.
LWF_COMM_S_PER_MB = 7.8125e-3


@dataclass
class GpuPool:
    """The GPUs' memory left and makespans (GPU ``g`` is GPU ``g % per_server`` of
    server ``g // per_server``: the code's node-major GPU list), and the server order
    LWF's server sort left behind."""

    servers: int
    per_server: int
    memory_mb: float
    rng: random.Random
    rest_mb: list[float] = field(init=False)
    makespan_s: list[float] = field(init=False)
    server_order: list[int] = field(init=False)

    def __post_init__(self) -> None:
        n = self.servers * self.per_server
        self.rest_mb = [float(self.memory_mb)] * n
        self.makespan_s = [0.0] * n
        self.server_order = list(range(self.servers))

    def server_of(self, gpu: int) -> int:
        return gpu // self.per_server

    def with_room(self, mem_mb: float, gpus: range | list[int] | None = None) -> list[int]:
        """The GPUs (of ``gpus``, default all, in that order) with ``mem_mb`` left."""
        pool = range(len(self.rest_mb)) if gpus is None else gpus
        return [g for g in pool if self.rest_mb[g] >= mem_mb]


Placement = Callable[[GpuPool, int, float], list[int] | None]


def first_fit(pool: GpuPool, n: int, mem_mb: float) -> list[int] | None:
    """FF (the code's ``bp``): the first ``n`` GPUs with room, in cluster order."""
    room = pool.with_room(mem_mb)
    return room[:n] if len(room) >= n else None


def random_fit(pool: GpuPool, n: int, mem_mb: float) -> list[int] | None:
    """RAND: ``n`` GPUs with room drawn at random (the run's seeded generator)."""
    room = pool.with_room(mem_mb)
    pool.rng.shuffle(room)
    return room[:n] if len(room) >= n else None


def lwf(kappa: int) -> Placement:
    """LWF-κ as the code's ``lwfK``; κ at least the largest job is LS."""
    kappa = validate.integer(kappa, "placement.kappa", 1, 1 << 20, "1")

    def place(pool: GpuPool, n: int, mem_mb: float) -> list[int] | None:
        if n <= kappa:
            room = sorted(pool.with_room(mem_mb),
                          key=lambda g: (pool.makespan_s[g], pool.server_of(g)))
        else:
            per = pool.per_server
            mean = {s: sum(pool.makespan_s[s * per:(s + 1) * per]) / per
                    for s in range(pool.servers)}
            pool.server_order.sort(key=lambda s: mean[s])
            room = []
            for s in pool.server_order:
                room.extend(sorted(pool.with_room(mem_mb, range(s * per, (s + 1) * per)),
                                   key=lambda g: pool.makespan_s[g]))
        return room[:n] if len(room) >= n else None

    return place


PLACEMENTS: dict[str, Callable[[int], Placement]] = {
    "ff": lambda gpus: first_fit,
    "rand": lambda gpus: random_fit,
    "ls": lambda gpus: lwf(gpus),
    "lwf-1": lambda gpus: lwf(1),
}
