"""What a cluster scheduler sees and decides: the interface every scheduler implements.

At each scheduling moment (a job arrives, a job ends, a round's timer fires) the
simulator hands the scheduler a :class:`ClusterView` (free GPUs, running jobs with their
progress, the waiting queue) and applies its :class:`Decision`: jobs to preempt (back
to the queue, resuming later from their last finished iteration, as a checkpoint
restores) and jobs to start on an :class:`Allocation` (GPUs per server, and optionally
the spine each of the job's ring flows takes: source routing, for the schedulers that
pick paths; ECMP otherwise).

Most schedulers of the seeds are a *queue order* (who goes first) times a *placement*
(which GPUs): :class:`QueueScheduler` composes the two, with the seeds' choices for
head-of-line blocking and preemption.  A scheduler that decides differently (the RL
scheduler of the next issue, which picks among K candidate jobs and node sets) implements
:class:`Scheduler` itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.fabric import LeafSpine
from mltcp.lab.cluster.jobs import JobRequest, PlacedJob


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


PlacementFn = Callable[[ClusterView, QueuedJob], Allocation | None]
OrderKey = Callable[[QueuedJob | RunningJob, float], tuple]


@dataclass
class QueueScheduler:
    """A queue order x a placement.

    ``blocking``: the queue's head waits for GPUs and nobody passes it (FIFO as the seeds
    run it); False lets later jobs that fit go first (backfilling).  ``preemptive``: at
    every moment running jobs are ranked with the waiting ones by the same order, and a
    running job is preempted when a waiting job that ranks before it needs its GPUs
    (Tiresias-style LAS, SRTF)."""

    name: str
    order: OrderKey
    place: PlacementFn
    blocking: bool = True
    preemptive: bool = False
    round_s: float = 0.0

    def decide(self, view: ClusterView) -> Decision:
        queue = ranked_queue(view, self.order)
        preempt: list[str] = []
        if self.preemptive:
            preempt = self._preemptions(view, queue)
        return Decision(start_in_order(view, queue, self.place, self.blocking),
                        tuple(preempt))

    def _preemptions(self, view: ClusterView, queue: list[QueuedJob]) -> list[str]:
        """Running jobs that rank after waiting jobs the free GPUs cannot hold, latest
        ranked first, until the waiting jobs that rank higher fit by count."""
        now = view.now
        ranked = sorted(view.running, key=lambda r: (*self.order(r, now), r.request.arrival_s,
                                                     r.name), reverse=True)
        free = int(view.free.sum())
        out: list[str] = []
        for job in queue:
            if job.gpus <= free:
                free -= job.gpus
                continue
            while ranked and self.order(ranked[0], now) > self.order(job, now) \
                    and free < job.gpus:
                victim = ranked.pop(0)
                out.append(victim.name)
                view.release(victim)
                free += victim.job.gpu_count
            if free < job.gpus:
                break
            free -= job.gpus
        return out


def ranked_queue(view: ClusterView, order: OrderKey) -> list[QueuedJob]:
    """The waiting jobs by ``order``, ties by arrival then name."""
    return sorted(view.queue, key=lambda q: (*order(q, view.now), q.arrival_s, q.name))


def start_in_order(view: ClusterView, queue: Sequence[QueuedJob], place: PlacementFn,
                   blocking: bool) -> tuple[tuple[QueuedJob, Allocation], ...]:
    """Place ``queue``'s jobs in turn, each reserving its GPUs in ``view``; with
    ``blocking`` the first that does not fit stops the rest (head-of-line)."""
    starts: list[tuple[QueuedJob, Allocation]] = []
    for job in queue:
        where = place(view, job)
        if where is None:
            if blocking:
                break
            continue
        view.take(job, where)
        starts.append((job, where))
    return tuple(starts)


def placement_from(policy: Callable[[LeafSpine, np.ndarray, int, random.Random],
                                    Sequence[tuple[int, int]] | None]) -> PlacementFn:
    """A placement of :mod:`mltcp.lab.cluster.placement` (free GPUs in, GPUs per server
    out) as a :data:`PlacementFn` with ECMP routing."""

    def place(view: ClusterView, job: QueuedJob) -> Allocation | None:
        where = policy(view.fabric, view.free, job.gpus, view.rng)
        return None if where is None else Allocation(tuple(where))

    return place
