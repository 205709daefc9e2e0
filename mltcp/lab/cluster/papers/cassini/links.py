"""Cassini's view of a cluster's links: each job's periodic demand and each shared
link's solution on its unified circle, as the scheduler (:mod:`.schedulers`) and the
time-shifting network (:mod:`.timeshifts`) both need them.

Thesis §4.3 (Cassini).  How a job's periodic demand is profiled: an iteration
computes for ``compute_s`` (no traffic), then each ring flow sends the job's ring bytes
at the rate it gets alone on its path (its links' capacities, shared only with the
job's own flows), so its Up phase lasts ``ring bytes / rate``.  The period is the job's
iteration alone, or, for a running job, the latest iteration time the simulator
measured (never less than alone).  Demands and capacities are in Gbit/s of payload,
periods in ms.

Where this differs from the thesis, and why:

* **Near-equal periods run in lock-step.**  Measured iteration times are never equal,
  and two jobs of 250 and 255 ms have a unified circle of 12.75 s on which they collide
  every few seconds whatever the rotation.  Drift correction only ever holds jobs back,
  so among jobs that share links the faster ones end up at the slower ones' pace
  anyway; periods within ``lockstep`` (5 %) of each other are therefore put on the
  circle as one period, the longest of them.  Distinct periods (240 and 155 ms) keep
  their LCM circle.
* **The circle's resolution adapts per link.**  A link's periods are rounded to the
  finest of 1, 2, 5, ... ms at which their LCM stays bounded, and its circle is divided
  so that the shortest period spans at least ``MIN_BINS_PER_PERIOD`` bins (the thesis's
  5 degree step on a long LCM circle can be longer than a whole Up phase;
  :func:`mltcp.lab.common.cassini.adapted_step_deg` only guarantees one bin).
* **Equivalent links are one link.**  A ring crosses a leaf's uplink and downlink; two
  jobs that share a leaf pair share both, which makes a loop in the affinity graph of
  almost every shared placement.  Links that carry the same jobs with the same demands
  have the same solution, so such loops constrain nothing: they are merged before the
  loop check.
* **Up phases in the middle of the room left.**  Among rotations of equal score the
  search returns the smallest angle, which puts Up phases back to back, where the
  least drift makes them collide; each job is moved to the middle of the run of
  rotations that keep the score (:meth:`LinkFit.centred`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import PlacedJob
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.common.cassini import (
    JobDemand,
    LinkSolution,
    Phase,
    best_rotations,
    compatibility_score,
    demand_on_circle,
    unified_perimeter_ms,
)
from mltcp.lab.models.fluid_engine import weighted_max_min

DEFAULT_STEP_DEG = 5.0
RESOLUTIONS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
MIN_BINS_PER_PERIOD = 8         # the shortest period spans at least this many bins
MAX_LINK_BINS = 720             # beyond this (a 0.5 degree step) periods are rounded coarser
CACHE_LIMIT = 4096


# --------------------------------------------------------------------------------------
# A job's periodic traffic


@dataclass(frozen=True)
class Traffic:
    """A placed job's periodic demand: ``flows`` holds, per ring flow, the links it
    crosses, how long its Up phase lasts alone (s) and its rate meanwhile (Gbit/s)."""

    name: str
    compute_s: float
    period_s: float
    flows: tuple[tuple[tuple[int, ...], float, float], ...] = ()

    def links(self) -> set[int]:
        return {k for links, _, _ in self.flows for k in links}

    def with_period(self, period_s: float) -> Traffic:
        """The same demand repeating every ``period_s`` (never shorter than alone)."""
        return Traffic(self.name, self.compute_s, max(period_s, self.period_s), self.flows)


def traffic(job: PlacedJob, fabric: LeafSpine, seed: int = 0) -> Traffic:
    """``job``'s profile on its GPUs and paths, as on a dedicated cluster (ECMP's paths
    for ``seed`` where the job is not source-routed)."""
    paths = job.flows(fabric, seed)
    if not paths or job.ring_bytes() <= 0:
        return Traffic(job.name, job.compute_s, job.compute_s)
    rates = weighted_max_min(np.ones(len(paths)), paths, fabric.capacities())
    nbytes = job.flow_bytes(fabric)
    flows = tuple((tuple(links), nbytes / float(rate), float(rate) * 8 / 1e9)
                  for links, rate in zip(paths, rates, strict=True))
    return Traffic(job.name, job.compute_s,
                   job.compute_s + max(comm for _, comm, _ in flows), flows)


def lockstep_periods(periods_s: Mapping[str, float], tolerance: float) -> dict[str, float]:
    """Periods within ``tolerance`` (relative) of a group's shortest become the group's
    longest: jobs that drift apart by less are held to the slowest one's pace."""
    groups: list[list[str]] = []
    for name in sorted(periods_s, key=lambda n: (periods_s[n], n)):
        if not groups or periods_s[name] > periods_s[groups[-1][0]] * (1 + tolerance):
            groups.append([])
        groups[-1].append(name)
    return {name: periods_s[group[-1]] for group in groups for name in group}


def _demand(t: Traffic, link: int, period_s: float) -> JobDemand:
    """``t``'s demand on ``link``: one Up phase per flow of ``t`` that crosses it."""
    phases = tuple(Phase(t.compute_s * 1000, comm * 1000, gbit)
                   for links, comm, gbit in t.flows if link in links)
    return JobDemand(t.name, period_s * 1000, phases)


@dataclass(frozen=True)
class SharedLinks:
    """The links that carry two or more of a set of jobs, links with the same jobs and
    demands merged into one (named by the first): ``jobs`` per merged link, each job's
    merged links, the circle period of every job on them (lock-stepped), and the
    groups of jobs connected through them (the affinity graph's components)."""

    jobs: dict[str, tuple[JobDemand, ...]]
    capacity: dict[str, float]
    job_links: dict[str, tuple[str, ...]]
    periods_s: dict[str, float]
    groups: tuple[tuple[str, ...], ...]


def shared_links(fabric: LeafSpine, traffics: Sequence[Traffic], lockstep: float,
                 step_deg: float = DEFAULT_STEP_DEG) -> SharedLinks:
    """Merged shared links of ``traffics`` (names unique), periods lock-stepped within
    each group of jobs that share links with each other (the whole group where some
    link's circle at ``step_deg`` would be unbounded)."""
    on: dict[int, list[Traffic]] = {}
    for t in traffics:
        for link in sorted(t.links()):
            on.setdefault(link, []).append(t)
    shared = {k: ts for k, ts in sorted(on.items()) if len(ts) >= 2}
    groups = _groups(shared)
    periods: dict[str, float] = {}
    for group in groups:
        own = lockstep_periods({t.name: t.period_s for t in group}, lockstep)
        names = {t.name for t in group}
        if not all(_has_circle([_demand(t, link, own[t.name]) for t in ts], step_deg)
                   for link, ts in shared.items() if ts[0].name in names):
            # Some link's periods have no bounded unified circle at any resolution
            # (e.g. 300, 400, 500 and 700 ms: 42 s at 100 ms): the whole group (a job's
            # period must be the same on all its links) goes in lock-step at its
            # longest, the pace drift correction holds such jobs to anyway.
            own = lockstep_periods(own, math.inf)
        periods.update(own)
    gbit = fabric.capacities() * 8 / 1e9
    merged: set[tuple] = set()
    jobs: dict[str, tuple[JobDemand, ...]] = {}
    capacity: dict[str, float] = {}
    job_links: dict[str, list[str]] = {}
    for link, ts in shared.items():
        demands = tuple(_demand(t, link, periods[t.name]) for t in ts)
        key = (demands, float(gbit[link]))
        if key in merged:
            continue
        merged.add(key)
        name = f"#{link}"
        jobs[name], capacity[name] = demands, key[1]
        for t in ts:
            job_links.setdefault(t.name, []).append(name)
    return SharedLinks(jobs, capacity, {j: tuple(ls) for j, ls in job_links.items()},
                       periods, tuple(tuple(t.name for t in g) for g in groups))


def _groups(shared: Mapping[int, Sequence[Traffic]]) -> list[list[Traffic]]:
    """Jobs connected through shared links, in order of first appearance."""
    parent: dict[str, str] = {}
    by_name: dict[str, Traffic] = {}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for ts in shared.values():
        for t in ts:
            by_name.setdefault(t.name, t)
            parent.setdefault(t.name, t.name)
        for t in ts[1:]:
            parent[find(t.name)] = find(ts[0].name)
    groups: dict[str, list[Traffic]] = {}
    for name, t in by_name.items():
        groups.setdefault(find(name), []).append(t)
    return list(groups.values())


def closes_loop(job_links: Mapping[str, Sequence[str]], job: str) -> bool:
    """Whether ``job``'s edges close a loop in the affinity graph (its links reach each
    other through the other jobs); loops among the others are not ``job``'s doing."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(a: tuple[str, str]) -> tuple[str, str]:
        parent.setdefault(a, a)
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for other, links in job_links.items():
        if other != job:
            for link in links:
                parent[find(("l", link))] = find(("j", other))
    seen: set[tuple[str, str]] = set()
    for link in job_links.get(job, ()):
        root = find(("l", link))
        if root in seen:
            return True
        seen.add(root)
    return False


def _circles(jobs: Sequence[JobDemand], step_deg: float) -> Iterator[tuple[float, float]]:
    """(resolution, angle step) of ``jobs``' unified circle at each resolution of
    :data:`RESOLUTIONS_MS` (up to the shortest period) where it has at most
    ``MAX_LINK_BINS`` bins, finest first."""
    shortest = min(j.period_ms for j in jobs)
    for resolution in RESOLUTIONS_MS:
        if resolution > shortest and resolution != RESOLUTIONS_MS[0]:
            return
        try:
            yield resolution, _link_step(jobs, step_deg, resolution)
        except SpecError:
            continue


def _has_circle(jobs: Sequence[JobDemand], step_deg: float) -> bool:
    """Whether ``jobs`` have a bounded unified circle (what :func:`solve_link` needs)."""
    return next(_circles(jobs, step_deg), None) is not None


def _link_step(jobs: Sequence[JobDemand], step_deg: float, resolution_ms: float) -> float:
    """The angle step of ``jobs``' unified circle at ``resolution_ms``: ``step_deg`` or
    finer, so that the shortest period spans ``MIN_BINS_PER_PERIOD`` bins."""
    perimeter = unified_perimeter_ms({j.name: j.period_ms for j in jobs}, resolution_ms)
    shortest = min(max(1, round(j.period_ms / resolution_ms)) * resolution_ms for j in jobs)
    bins = max(round(360 / step_deg), math.ceil(MIN_BINS_PER_PERIOD * perimeter / shortest))
    if bins > MAX_LINK_BINS:
        raise SpecError("periods_ms", f"the {perimeter:g} ms unified circle needs {bins} "
                        f"bins at {resolution_ms:g} ms", "round the periods more coarsely")
    return 360 / bins


@dataclass(frozen=True)
class LinkFit:
    """One link's best rotations (Table 4.1) and the circle they were found on (its
    angle step and the resolution its periods were rounded to)."""

    jobs: tuple[JobDemand, ...]
    capacity: float
    solution: LinkSolution
    step_deg: float
    resolution_ms: float

    @property
    def score(self) -> float:
        return self.solution.score

    def score_at(self, shifts_ms: Mapping[str, float]) -> float:
        """The link's compatibility score with its jobs delayed by ``shifts_ms``."""
        return compatibility_score(self.jobs, self.capacity, step_deg=self.step_deg,
                                   shifts_ms=shifts_ms, resolution_ms=self.resolution_ms)

    def centred(self) -> LinkFit:
        """The same score with every job but the first moved to the middle of the run of
        rotations that keep it (the search returns the smallest angle of a tie: Up phases
        back to back, which the least drift makes collide)."""
        shifts = dict(self.solution.shifts_ms)
        rotations = dict(self.solution.rotations_deg)
        rows = demand_on_circle(self.jobs, self.step_deg, resolution_ms=self.resolution_ms,
                                shifts_ms=shifts)
        n = rows.shape[1]
        total = rows.sum(axis=0)
        best = _scores(total[None, :], self.capacity)[0]
        for j, job in enumerate(self.jobs[1:], start=1):
            others = total - rows[j]
            turns = np.arange(n)
            rolled = rows[j][(turns[None, :] - turns[:, None]) % n]    # row k: k bins later
            keep = _scores(others[None, :] + rolled, self.capacity) >= best - 1e-9
            if keep.all():
                continue
            later = int(np.argmin(keep[1:]))            # rotations kept after this one
            earlier = int(np.argmin(keep[:0:-1]))       # and before it
            move = (later - earlier) // 2
            if move:
                rows[j] = np.roll(rows[j], move)
                total = others + rows[j]
                shifts[job.name] = (shifts[job.name] + move * self.solution.perimeter_ms / n) \
                    % job.period_ms
                rotations[job.name] = (rotations[job.name] + move * 360 / n) % 360
        return replace(self, solution=replace(self.solution, shifts_ms=shifts,
                                              rotations_deg=rotations))


def _scores(totals: np.ndarray, capacity: float) -> np.ndarray:
    """Table 4.1's score of each row of summed demand per bin."""
    over = totals - capacity
    return 1 - np.where(over > 1e-9 * capacity, over, 0.0).mean(axis=1) / capacity


def solve_link(jobs: Sequence[JobDemand], capacity: float, step_deg: float = DEFAULT_STEP_DEG,
               link: str = "", cache: dict | None = None) -> LinkFit:
    """Best rotations of ``jobs`` on one link, at the finest period resolution of
    :data:`RESOLUTIONS_MS` whose unified circle stays bounded.  Periods that have no
    bounded circle at any of them do not reach here: :func:`shared_links` puts such a
    link's group in lock-step."""
    key = (tuple(jobs), capacity, step_deg)
    if cache is not None and key in cache:
        return cache[key]
    fit = _solve_bounded(jobs, capacity, step_deg, link)
    if fit is None:
        raise SpecError("periods_ms", f"periods {', '.join(f'{j.period_ms:g}' for j in jobs)} "
                        "ms have no bounded unified circle", "lock-step them (shared_links)")
    if cache is not None:
        if len(cache) > CACHE_LIMIT:
            cache.clear()
        cache[key] = fit
    return fit


def _solve_bounded(jobs: Sequence[JobDemand], capacity: float, step_deg: float,
                   link: str) -> LinkFit | None:
    for resolution, step in _circles(jobs, step_deg):
        try:
            found = best_rotations(jobs, capacity, step, link, resolution_ms=resolution)
        except SpecError as err:
            if err.field not in ("periods_ms", "step_deg"):
                raise
            continue
        return LinkFit(tuple(jobs), capacity, found, step, resolution)
    return None
