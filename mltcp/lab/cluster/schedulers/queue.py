"""Queue schedulers: a queue order (who goes first) times a placement (which GPUs).

Most schedulers of the papers are such a pair: :class:`QueueScheduler` composes the
two, with the papers' choices for head-of-line blocking and preemption; the orders are
:mod:`.orders`', the placements :mod:`.placement`'s.  A scheduler that decides
differently (the RL scheduler of deepshare-rl, which picks among K candidate jobs and
node sets) implements :class:`~mltcp.lab.cluster.engine.scheduling.Scheduler` itself.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import (
    Allocation,
    ClusterView,
    Decision,
    QueuedJob,
    RunningJob,
)

PlacementFn = Callable[[ClusterView, QueuedJob], Allocation | None]
OrderKey = Callable[[QueuedJob | RunningJob, float], tuple]


@dataclass
class QueueScheduler:
    """A queue order x a placement.

    ``blocking``: the queue's head waits for GPUs and nobody passes it (FIFO as the papers
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
    """A placement of :mod:`mltcp.lab.cluster.schedulers.placement` (free GPUs in, GPUs per server
    out) as a :data:`PlacementFn` with ECMP routing."""

    def place(view: ClusterView, job: QueuedJob) -> Allocation | None:
        where = policy(view.fabric, view.free, job.gpus, view.rng)
        return None if where is None else Allocation(tuple(where))

    return place
