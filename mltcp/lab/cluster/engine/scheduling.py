"""The interface between the cluster simulator and a scheduler: what it sees, what it
decides.

At each scheduling moment (a job arrives, a job ends, a round's timer fires) the
simulator hands the scheduler a :class:`ClusterView` (free GPUs, running jobs with their
progress, the waiting queue) and applies its :class:`Decision`: jobs to preempt (back
to the queue, resuming later from their last finished iteration, as a checkpoint
restores) and jobs to start on an :class:`Allocation` (GPUs per server, and optionally
the spine each of the job's ring flows takes: source routing, for the schedulers that
pick paths; ECMP otherwise).  Any object with ``name``, ``round_s`` and ``decide`` is a
:class:`Scheduler`; the generic ones are in :mod:`mltcp.lab.cluster.schedulers`, the
papers' own with their reproductions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine


@dataclass(frozen=True)
class Allocation:
    """GPUs per server, servers in ring order; ``spines``: the spine of each ring flow on
    each rail, flow-major (flow i goes from the i-th server to the next), None = ECMP's
    pick."""

    gpus: tuple[tuple[int, int], ...]
    spines: tuple[int, ...] | None = None

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)


@dataclass(frozen=True)
class QueuedJob:
    """A job waiting for GPUs: its request and how far it got before (a preempted job
    keeps its finished iterations and the GPU-seconds it was given)."""

    request: JobRequest
    done: int = 0                   # iterations finished before a preemption
    attained_gpu_s: float = 0.0     # GPU-seconds held so far (LAS's service)

    @property
    def name(self) -> str:
        return self.request.name

    @property
    def arrival_s(self) -> float:
        return self.request.arrival_s

    @property
    def gpus(self) -> int:
        return self.request.gpus

    @property
    def remaining(self) -> int:
        return self.request.iterations - self.done


@dataclass(frozen=True)
class RunningJob:
    """A job on its GPUs: ``done`` iterations finished so far in all (before and since its
    latest start), ``attained_gpu_s`` GPU-seconds held so far, ``iteration_s`` its latest
    iteration time (0 before its first ends)."""

    job: PlacedJob
    request: JobRequest
    done: int
    attained_gpu_s: float
    iteration_s: float

    @property
    def name(self) -> str:
        return self.job.name


@dataclass
class ClusterView:
    """The cluster at a scheduling moment.  ``free`` is a copy: a scheduler may
    reserve GPUs in it while it decides (:meth:`take`)."""

    fabric: LeafSpine
    now: float
    free: np.ndarray
    running: tuple[RunningJob, ...]
    queue: tuple[QueuedJob, ...]
    rng: random.Random
    planned: list[tuple[QueuedJob, Allocation]] = field(default_factory=list)

    def take(self, job: QueuedJob, where: Allocation) -> None:
        """Reserve ``where`` for ``job`` in this view (later placements see it taken)."""
        for server, n in where.gpus:
            if self.free[server] < n:
                raise SpecError("scheduler", f"placed {job.name} on {n} GPU(s) of server "
                                f"{server}, which has {int(self.free[server])} free",
                                "place jobs only on free GPUs")
            self.free[server] -= n
        self.planned.append((job, where))

    def release(self, running: RunningJob) -> None:
        """Count ``running``'s GPUs as free in this view (it is being preempted)."""
        for server, n in running.job.gpus:
            self.free[server] += n


@dataclass(frozen=True)
class Decision:
    start: tuple[tuple[QueuedJob, Allocation], ...] = ()
    preempt: tuple[str, ...] = ()


class Scheduler(Protocol):
    """``decide`` is called at every scheduling moment; ``round_s`` > 0 asks for a moment
    every ``round_s`` seconds as well (preemptive and round-based schedulers)."""

    name: str
    round_s: float

    def decide(self, view: ClusterView) -> Decision: ...
