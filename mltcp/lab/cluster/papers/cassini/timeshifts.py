"""Cassini's step 3 in the cluster simulator: time-shifts, and drift correction.

Thesis §4.4 (Algorithm 1) and §4.4.2.  For the jobs sharing
links, Algorithm 1 gives one time-shift per job; each job is held back so that its
iterations start at its shift on a common frame.  Shifts drift (noise, stragglers,
iteration times that are not what the circle assumed), so the agents measure the drift
and re-apply them: at every scheduling moment (each of the scheduler's rounds,
``round_s``, and every arrival and end) each job's phase is compared with its target and
the jobs that are early are held back.  Links are shared by standard congestion control
(max-min fair) meanwhile: Cassini changes no congestion control.  The simulator tells a
network with a ``delays`` method when each running job's Up phase starts and applies the
holds it answers (:meth:`mltcp.lab.cluster.engine.simulator.Run._hold_back`).

Where this differs from the thesis, and why:

* **Delays, not start times.**  The frame the jobs are aligned on is chosen at each
  moment to hold them back as little as possible in total (a job can be delayed, not
  advanced); a job within ``tolerance`` of its target is left alone.
* **Drift correction only where the plan interleaves.**  A group of jobs whose plan
  leaves some link over capacity (score under ``compatible``) gets its shifts when a
  job of it starts, and is not held to them afterwards: contention sets its
  iteration times, and holding its jobs to the circle drags them all to the slowest
  one's pace (on random placements of four jobs, correcting such groups made them
  slower than fair sharing alone; see :class:`CassiniNetwork`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from mltcp.core import validate
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import RunningJob
from mltcp.lab.cluster.papers.cassini.links import (
    CACHE_LIMIT,
    DEFAULT_STEP_DEG,
    LinkFit,
    Traffic,
    shared_links,
    solve_link,
    traffic,
)
from mltcp.lab.common.cassini import CassiniLoopWarning, JobDemand, time_shifts

# --------------------------------------------------------------------------------------
# Step 3: time-shifts and drift correction


@dataclass(frozen=True)
class ShiftPlan:
    """Algorithm 1's shifts for one set of running jobs: each sharing job's shift and
    circle period (s) and compute time (its Up phase's offset), the groups of jobs
    aligned together (the affinity graph's components) and each group's links."""

    shift_s: dict[str, float]
    period_s: dict[str, float]
    compute_s: dict[str, float]
    groups: tuple[tuple[str, ...], ...]
    links: tuple[tuple[LinkFit, ...], ...]

    def compatible(self, threshold: float) -> list[int]:
        """The groups whose every link scores at least ``threshold`` in the plan."""
        return [g for g, fits in enumerate(self.links)
                if all(f.score >= threshold for f in fits)]


def shift_plan(fabric: LeafSpine, traffics: Sequence[Traffic], step_deg: float = DEFAULT_STEP_DEG,
               lockstep: float = 0.05, cache: dict | None = None) -> ShiftPlan:
    """Per shared link the best rotations (centred, :meth:`LinkFit.centred`), then one
    shift per job (Algorithm 1); a loop keeps the breadth-first tree's constraints (the
    links it breaks are not honoured)."""
    links = shared_links(fabric, traffics, lockstep, step_deg)
    fits = {k: _centred_fit(links.jobs[k], links.capacity[k], step_deg, k, cache)
            for k in links.jobs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CassiniLoopWarning)
        shifts = time_shifts(links.job_links, {k: f.solution for k, f in fits.items()}) \
            if fits else {}
    compute = {t.name: t.compute_s for t in traffics}
    group_links = tuple(tuple(f for f in fits.values() if f.jobs[0].name in group)
                        for group in links.groups)
    return ShiftPlan({j: s / 1000 for j, s in shifts.items()},
                     {j: links.periods_s[j] for j in shifts},
                     {j: compute[j] for j in shifts}, links.groups, group_links)


def _centred_fit(jobs: tuple[JobDemand, ...], capacity: float, step_deg: float, link: str,
                 cache: dict | None) -> LinkFit:
    key = ("centred", jobs, capacity, step_deg)
    if cache is not None and key in cache:
        return cache[key]
    fit = solve_link(jobs, capacity, step_deg, link, cache).centred()
    if cache is not None:
        cache[key] = fit
    return fit


def _anchors(plan: ShiftPlan, group: Sequence[str], names: Sequence[str],
             comm_start_s: Sequence[float]) -> dict[str, float]:
    """Where each job of ``group`` that runs puts the frame: its Up phase's start less
    its shift and compute time (aligned jobs agree modulo their periods)."""
    where = {n: i for i, n in enumerate(names)}
    return {j: comm_start_s[where[j]] - plan.shift_s[j] - plan.compute_s[j] for j in group
            if j in where and math.isfinite(comm_start_s[where[j]])}


def drifted(plan: ShiftPlan, names: Sequence[str], comm_start_s: Sequence[float],
            margin: float) -> list[int]:
    """The groups whose jobs, where they are now, score more than ``margin`` below the
    plan on their links (on average): those the agents re-align."""
    out = []
    for g, (group, fits) in enumerate(zip(plan.groups, plan.links, strict=True)):
        anchors = _anchors(plan, group, names, comm_start_s)
        if len(anchors) < 2:
            continue
        starts = {j: a + plan.shift_s[j] for j, a in anchors.items()}   # iterations now
        ref = min(starts.values())
        now_ms = {j: (t - ref) % plan.period_s[j] * 1000 for j, t in starts.items()}
        scores = [(f.score, f.score_at(now_ms)) for f in fits
                  if all(d.name in now_ms for d in f.jobs)]
        if scores and sum(p - c for p, c in scores) / len(scores) > margin:
            out.append(g)
    return out


def holds(plan: ShiftPlan, names: Sequence[str], comm_start_s: Sequence[float],
          tolerance: float, groups: Sequence[int] | None = None) -> list[float]:
    """How long to hold back each job (in ``names`` order) so that the jobs of
    ``groups`` (all by default) start communicating at ``frame + shift + compute``
    (modulo their periods).  The frame is chosen among the jobs' own (one job of the
    group is not held) to hold the group back least in total; holds within
    ``tolerance`` of zero or of a whole period are dropped (the job is on target, or
    barely late)."""
    out = [0.0] * len(names)
    where = {n: i for i, n in enumerate(names)}
    for g in range(len(plan.groups)) if groups is None else groups:
        anchors = _anchors(plan, plan.groups[g], names, comm_start_s)
        if len(anchors) < 2:
            continue
        best: tuple[float, float, dict[str, float]] | None = None
        for frame in anchors.values():
            held = {j: _snap((frame - a) % plan.period_s[j], plan.period_s[j], tolerance)
                    for j, a in anchors.items()}
            key = (sum(held.values()), max(held.values()))
            if best is None or key < best[:2]:
                best = (*key, held)
        for j, hold in best[2].items():
            out[where[j]] = hold
    return out


def _snap(hold: float, period: float, tolerance: float) -> float:
    return 0.0 if hold <= tolerance * period or hold >= (1 - tolerance) * period else hold


@dataclass(frozen=True)
class CassiniNetwork(Network):
    """Cassini's time-shifts over standard congestion control (``f`` None; an ``f``
    runs them over MLTCP instead).  At every scheduling moment the simulator asks for
    :meth:`delays`; the plan is recomputed when the running set changes (cached).

    Which groups of jobs are held back, and when:

    * a group whose plan is ``compatible`` (every link scores at least that) is kept on
      it: at every moment its jobs off target by more than ``tolerance`` of a period
      are held (the agents' drift correction);
    * any other group gets its shifts when one of its jobs has just started (no
      iteration finished yet), if its jobs where they are score more than ``margin``
      below the plan; it is not kept on it afterwards: its Up phases overlap by plan,
      contention sets its iteration times, and holding them to the circle would drag
      the group to its slowest job's pace.
    """

    name: str = "cassini"
    f: Aggressiveness | None = None
    tolerance: float = 0.02
    compatible: float = 0.99
    margin: float = 0.01
    step_deg: float = DEFAULT_STEP_DEG
    lockstep: float = 0.05
    _plans: dict = field(default_factory=dict, repr=False, compare=False)
    _solved: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate.number(self.tolerance, "cassini.tolerance", 0, 0.5, "0.02")
        validate.number(self.compatible, "cassini.compatible", -10, 1, "0.99")
        validate.number(self.margin, "cassini.margin", 0, 2, "0.01")
        validate.number(self.step_deg, "cassini.step_deg", 0, 180, "5", lo_open=True)
        validate.number(self.lockstep, "cassini.lockstep", 0, 0.5, "0.05")

    def delays(self, fabric: LeafSpine, seed: int, running: Sequence[RunningJob],
               comm_start_s: Sequence[float], now: float) -> list[float]:
        """Seconds to hold back each running job's next communication (the simulator's
        hook, :meth:`mltcp.lab.cluster.engine.simulator.Run._hold_back`)."""
        key = (fabric, seed, tuple((r.name, r.job.gpus, r.job.spines, r.job.compute_s,
                                    r.job.gradient_bytes) for r in running))
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) > CACHE_LIMIT:
                self._plans.clear()
            plan = self._plans[key] = shift_plan(
                fabric, [traffic(r.job, fabric, seed) for r in running], self.step_deg,
                self.lockstep, self._solved)
        names = [r.name for r in running]
        kept = plan.compatible(self.compatible)
        fresh = {r.name for r in running if r.iteration_s == 0}
        shifted = [g for g in drifted(plan, names, comm_start_s, self.margin)
                   if g not in kept and fresh.intersection(plan.groups[g])]
        return holds(plan, names, comm_start_s, self.tolerance, kept + shifted)


def cassini_network(fabric: object = None) -> CassiniNetwork:
    """Cassini's time-shifts with drift correction over fair sharing (the registry's
    ``cassini``; the fabric comes with each call of :meth:`CassiniNetwork.delays`)."""
    return CassiniNetwork()
