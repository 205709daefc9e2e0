"""Cassini as a cluster scheduler: candidate placements ranked by compatibility.

The thesis's chapter 4 (section 4.4.2, "Putting it all together", Figure 4.9 and
Algorithm 2) and the cassini-talk slides ("Augmenting Themis with Cassini").  Cassini is not a
scheduler of its own: it plugs into one (Themis, Pollux).  Step 1, candidates; step 2,
Algorithm 2 (:class:`CassiniScheduler`): the base scheduler decides *who* runs (here a
queue order, FIFO by default: the thesis keeps Themis's choice of jobs and worker
counts) and offers several placements of equal worth for the job; Cassini keeps the one
whose links it shares with running jobs are most compatible.  The candidates here are
the placements of :mod:`mltcp.lab.cluster.schedulers.placement` (consolidated, first fit, first fit
from each leaf, random) with variations of the spines their cross-leaf ring flows take
(up to ``candidates`` of them, 10 as in the thesis's evaluation, section 4.5.1).  "Of
equal worth" is Themis's finish-time fairness, which all its candidates share; here a
candidate whose iteration alone is more than ``slack`` slower than the fastest
candidate's is not offered (a job that fits on one server stays there).  Every
candidate is source-routed, so the links it is ranked on are the links it runs on.
Step 3, the time-shifts, is the network scheme :mod:`.timeshifts`.  Over the Themis
stand-in (:mod:`.themis`: no head-of-line blocking, one rack where the job fits in one),
this is the thesis's Th+Cassini (:func:`themis_cassini`); :func:`cassini` runs it over a
blocking FIFO.

Where this differs from the thesis: scores are of the links the new job shares (the job
being placed is the only one whose placement differs between candidates; links elsewhere
are the same in every candidate), ties go to the faster-alone, fewer-server candidate; a
placement that closes a loop through the new job (after merging equivalent links,
:mod:`.links`) is discarded (Algorithm 2 lines 13-15); when every candidate
does, the base scheduler's first candidate is taken.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.scheduling import Allocation, ClusterView, Decision, QueuedJob
from mltcp.lab.cluster.papers.cassini.links import (
    CACHE_LIMIT,
    DEFAULT_STEP_DEG,
    Traffic,
    closes_loop,
    shared_links,
    solve_link,
    traffic,
)
from mltcp.lab.cluster.schedulers.orders import fifo
from mltcp.lab.cluster.schedulers.placement import Placement, consolidated, first_fit, spread
from mltcp.lab.cluster.schedulers.queue import OrderKey, ranked_queue, start_in_order

# --------------------------------------------------------------------------------------
# Step 1: candidate placements


def _first_fit_from(fabric: LeafSpine, free: np.ndarray, gpus: int, leaf: int
                    ) -> Placement | None:
    """First fit over the servers in order, starting at ``leaf``'s first (wrapping)."""
    start = leaf * fabric.servers_per_leaf
    order = list(range(start, fabric.servers)) + list(range(start))
    out, need = [], gpus
    for server in order:
        take = min(int(free[server]), need)
        if take:
            out.append((server, take))
            need -= take
        if need == 0:
            return tuple(out)
    return None


def candidate_allocations(fabric: LeafSpine, free: np.ndarray, gpus: int,
                          rng: random.Random, limit: int = 10) -> list[Allocation]:
    """Up to ``limit`` distinct placements of ``gpus`` GPUs on the free ones, in the base
    scheduler's order of preference: consolidated, first fit, first fit from each leaf,
    random; then the same with their ring flows on other spines.  Multi-server ones are
    source-routed (flow i's rail q on spine ``(i x rails + q + r) % spines``, variation r)."""
    if free.sum() < gpus:
        return []
    sets: list[Placement] = []
    for where in [consolidated(fabric, free, gpus, rng), first_fit(fabric, free, gpus, rng),
                  *(_first_fit_from(fabric, free, gpus, leaf)
                    for leaf in range(1, fabric.leaves))]:
        if where is not None and where not in sets:
            sets.append(where)
    for _ in range(2 * limit):
        if len(sets) >= limit:
            break
        where = spread(fabric, free, gpus, rng)
        if where is not None and where not in sets:
            sets.append(where)
    out: list[Allocation] = []
    for variation in range(fabric.spines):
        for where in sets:
            if len(out) >= limit:
                return out
            if len(where) == 1:
                if variation == 0:
                    out.append(Allocation(where))
                continue
            crosses = len({fabric.leaf_of(s) for s, _ in where}) > 1
            if variation and not crosses:
                continue
            out.append(Allocation(where, tuple((i + variation) % fabric.spines
                                               for i in range(len(where) * fabric.rails))))
    return out


def one_rack_first(fabric: LeafSpine, allocations: Sequence[Allocation]) -> list[Allocation]:
    """The candidates on one leaf (rack) if there are any, else all of them: Themis's
    only network term is a slowdown penalty for workers across racks (thesis §4.4.2), so
    a job that fits in a rack gets a rack, and every cross-rack placement is worth the
    same to it."""
    local = [a for a in allocations if len({fabric.leaf_of(s) for s, _ in a.gpus}) == 1]
    return local or list(allocations)


# --------------------------------------------------------------------------------------
# Step 2: Algorithm 2 over the candidates


def rank_candidates(fabric: LeafSpine, others: Sequence[Traffic],
                    candidates: Sequence[Traffic], step_deg: float = DEFAULT_STEP_DEG,
                    lockstep: float = 0.05, cache: dict | None = None
                    ) -> list[tuple[int, float]]:
    """Candidates (placements of one job, each its :class:`Traffic`) best first, with
    their scores: the mean compatibility score of the (merged) links the job shares with
    ``others``, 1.0 if it shares none.  Candidates whose job closes a loop in the
    affinity graph are left out (Algorithm 2 lines 13-15)."""
    reach = [(t, t.links()) for t in others]
    ranked = []
    for index, cand in enumerate(candidates):
        # Only the jobs connected to the candidate through shared links matter.
        group, frontier, seen, pool = [cand], cand.links(), cand.links(), reach
        while frontier:
            reached = [(t, ls) for t, ls in pool if ls & frontier]
            pool = [(t, ls) for t, ls in pool if not ls & frontier]
            group += [t for t, _ in reached]
            frontier = set().union(*(ls for _, ls in reached)) - seen
            seen = seen | frontier
        links = shared_links(fabric, group, lockstep, step_deg)
        if closes_loop(links.job_links, cand.name):
            continue
        scores = [solve_link(links.jobs[k], links.capacity[k], step_deg, k, cache).score
                  for k in links.job_links.get(cand.name, ())]
        ranked.append((index, sum(scores) / len(scores) if scores else 1.0))
    ranked.sort(key=lambda item: (-item[1], item[0]))
    return ranked


@dataclass
class CassiniScheduler:
    """A queue order whose jobs are placed by Cassini (steps 1 and 2): the next jobs in
    ``order`` (head-of-line ``blocking`` as FIFO runs it), each on the best-ranked of up
    to ``candidates`` placements (with ``rack_local``, only the one-rack ones where
    there are any: :func:`one_rack_first`, the candidates of the Themis stand-in,
    :mod:`.themis`).  ``round_s``: the scheduling rounds, at which a Cassini network
    re-aligns the jobs (drift correction)."""

    name: str = "cassini"
    order: OrderKey = field(default=lambda job, now: (job.request.arrival_s,))
    candidates: int = 10
    slack: float = 0.1
    round_s: float = 5.0
    blocking: bool = True
    step_deg: float = DEFAULT_STEP_DEG
    lockstep: float = 0.05
    rack_local: bool = False
    _profiles: dict = field(default_factory=dict, repr=False, compare=False)
    _solved: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate.integer(self.candidates, "cassini.candidates", 1, 1000, "10")
        validate.number(self.slack, "cassini.slack", 0, 10, "0.1")
        validate.number(self.round_s, "cassini.round_s", 0, 1e6, "5")
        validate.number(self.step_deg, "cassini.step_deg", 0, 180, "5", lo_open=True)
        validate.number(self.lockstep, "cassini.lockstep", 0, 0.5, "0.05")

    def decide(self, view: ClusterView) -> Decision:
        return Decision(start_in_order(view, ranked_queue(view, self.order), self.place,
                                       self.blocking))

    def place(self, view: ClusterView, job: QueuedJob) -> Allocation | None:
        """Cassini's pick among ``job``'s candidate placements (None: it does not fit).
        Running jobs are profiled on their paths: their source routes, or ECMP's for
        seed 0 (a view does not carry the run's seed; Cassini's own jobs are routed)."""
        allocations = candidate_allocations(view.fabric, view.free, job.gpus, view.rng,
                                            self.candidates)
        if self.rack_local:
            allocations = one_rack_first(view.fabric, allocations)
        if not allocations:
            return None
        profiles = [self._profile(view.fabric, _placed(job, a)) for a in allocations]
        alone = [p.period_s for p in profiles]
        keep = sorted((i for i, a in enumerate(allocations)
                       if alone[i] <= min(alone) * (1 + self.slack)),
                      key=lambda i: (alone[i], len(allocations[i].gpus), i))
        if not profiles[keep[0]].flows:
            return allocations[keep[0]]
        others = [self._profile(view.fabric, r.job).with_period(r.iteration_s)
                  for r in view.running]
        others += [self._profile(view.fabric, _placed(q, a)) for q, a in view.planned]
        ranked = rank_candidates(view.fabric, others, [profiles[i] for i in keep],
                                 self.step_deg, self.lockstep, self._solved)
        return allocations[keep[ranked[0][0] if ranked else 0]]

    def _profile(self, fabric: LeafSpine, job: PlacedJob) -> Traffic:
        key = (fabric, job.name, job.gpus, job.spines, job.compute_s, job.gradient_bytes)
        if key not in self._profiles:
            if len(self._profiles) > CACHE_LIMIT:
                self._profiles.clear()
            self._profiles[key] = traffic(job, fabric)
        return self._profiles[key]


def _placed(job: QueuedJob, where: Allocation) -> PlacedJob:
    req = job.request
    return PlacedJob(req.name, where.gpus, req.compute_s, req.gradient_bytes, job.remaining,
                     spines=where.spines)


def cassini(fabric: LeafSpine) -> CassiniScheduler:
    """Cassini over a FIFO queue (the registry's ``cassini``)."""
    return CassiniScheduler("cassini", fifo(fabric))


def themis_cassini(fabric: LeafSpine) -> CassiniScheduler:
    """Th+Cassini (thesis §4.5.1): the Themis stand-in's queue and candidates
    (:func:`mltcp.lab.cluster.papers.cassini.themis.themis`: arrival order, a job that
    fits starts, one rack where the job fits in one), the best-ranked of them taken (the
    registry's ``themis-cassini``)."""
    return CassiniScheduler("themis-cassini", fifo(fabric), blocking=False, rack_local=True)
