"""Cassini: the centralized, scheduler-side way to interleave ML jobs on shared links.

MLTCP makes communication phases of training jobs slide apart *by themselves*, inside
congestion control, with no coordinator. Cassini (thesis chapter 4) reaches the same goal
from the opposite end: a central scheduler that knows every job's periodic traffic pattern
and every job's path computes, once, a time-shift per job (how long to delay the job's next
iteration). Each job applies its shift once at its start (or at the start of a scheduling
epoch) and from then on the Up phases of jobs that share a link fall into each other's Down
phases. It needs no switch or NIC support and no change to congestion control, but it needs
a global view, an up-to-date traffic profile per job and a placement that the scheduler is
free to choose. This module is that baseline, in pure Python and numpy, so that experiments
can compare MLTCP against it.

The pieces, in the thesis's order:

* **Geometric abstraction (section 4.3).** Time is rolled around a circle whose perimeter
  is a job's iteration time, so every iteration's Up/Down phases land on the same arcs.
  Jobs with different iteration times are drawn on a *unified circle* whose perimeter is
  the LCM of their iteration times (section 4.3.2): a 40 ms job appears three times and a
  60 ms job twice on a 120 ms circle. :func:`unified_perimeter_ms` computes that LCM and
  :func:`demand_on_circle` discretises each job's demand into angle bins (the thesis uses
  5 degree bins in its evaluation, section 4.5.1).
* **Compatibility score (section 4.3.6, Table 4.1).** With the circles overlaid and each
  job rotated by its angle, the excess of the summed demand over the link capacity is
  averaged over all angle bins and divided by the capacity; the score is one minus that.
  Score 1 means fully compatible (no bin is ever over capacity); heavily oversubscribed
  links can go negative. :func:`compatibility_score` evaluates it and
  :func:`best_rotations` searches for the rotations that maximise it.
* **Rotation to time-shift (equation 4.5).** ``shift = rotation / 360 * perimeter``,
  reduced modulo the job's own iteration time.
* **Affinity graph and Algorithm 1 (section 4.4.1).** A job that crosses several shared
  links gets one rotation per link, but it can be delayed only once. The bipartite
  affinity graph (jobs <-> links carrying at least two jobs) is traversed breadth-first
  from a reference job; a neighbour's shift is its parent's shift minus the parent's
  per-link shift plus its own per-link shift. On a loop-free graph this preserves every
  link's optimal *relative* shifts exactly (Theorem 1). :func:`time_shifts` implements it.
* **Algorithm 2 (section 4.4.2).** Given candidate placements, discard those whose
  affinity graph has a loop, score each remaining candidate by the average compatibility
  of its shared links, and rank them. :func:`rank_placements` implements it, and
  :func:`schedule` computes the shifts for one placement.

Search. Table 4.1 is an optimisation over one rotation per job. Fixing the first job at
0 loses nothing (a common rotation of every circle does not change the score) and
equation 4.4 limits every other job to the first of its repetitions on the unified
circle. When the remaining joint search space is small (at most ``EXHAUSTIVE_LIMIT``
combinations, e.g. three jobs of equal period at 5 degrees) every combination is scored
in vectorised batches, which gives the exact optimum on the angle grid. Beyond that the
search is *heuristic* (the thesis does not say how its solver scales; an exhaustive
search over ten jobs at 5 degrees would be 72**9 combinations): a greedy insertion, then
coordinate descent (each job in turn moves to its best rotation, all its rotations scored
in one numpy operation, with the others held still, until no job moves), then iterated
local search (perturb two or three jobs at random, descend again, keep the result when
it is not worse) for a bounded number of seeded rounds, stopping early at score 1. Ties
in the score are broken towards less overlap (smaller sum of squared total demand),
which keeps the descent moving on plateaus where the excess does not change. On random
five-job links the heuristic matched the exhaustive optimum in 39 of 40 cases (0.0007
below it in the other); ten jobs on one link at 5 degrees take a few hundred
milliseconds at most.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError

DEFAULT_STEP_DEG = 5.0
DEFAULT_RESOLUTION_MS = 1.0
DEFAULT_MAX_PERIMETER_MS = 100_000.0
MAX_BINS = 36_000
# When jobs' periods differ a lot, their unified circle is long and a fixed angular step
# can be longer than a whole period; the circle is then divided finer, so that the
# shortest period spans at least this many bins.
MIN_BINS_PER_PERIOD = 8
EXHAUSTIVE_LIMIT = 50_000
DEFAULT_ROUNDS = 100
MAX_SWEEPS = 25
_CHUNK = 4096
_REL_TOL = 1e-9


class CassiniLoopWarning(UserWarning):
    """The affinity graph has a loop and some link's optimal relative shifts were lost."""


# --------------------------------------------------------------------------------------
# Inputs


def _finite(field_name: str, value: object, fix: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise SpecError(field_name, f"must be a number (got {value!r})", fix)
    number = float(value)
    if not math.isfinite(number):
        raise SpecError(field_name, f"must be finite (got {value!r})", fix)
    return number


@dataclass(frozen=True)
class Phase:
    """One communication phase inside a job's iteration.

    ``start_ms`` is the offset from the start of the iteration, ``duration_ms`` how long
    the phase lasts and ``demand`` the bandwidth it wants meanwhile, in the same unit as
    the link capacity it is compared with (e.g. Mbit/s). Phases of a job may overlap;
    their demands then add up.
    """

    start_ms: float
    duration_ms: float
    demand: float

    def __post_init__(self) -> None:
        start = _finite("Phase.start_ms", self.start_ms, "give the offset in ms, e.g. 0.0")
        if start < 0:
            raise SpecError("Phase.start_ms", f"must be >= 0 (got {start})",
                            "give the offset from the iteration start, 0 <= start < period")
        duration = _finite("Phase.duration_ms", self.duration_ms, "give a duration in ms")
        if duration <= 0:
            raise SpecError("Phase.duration_ms", f"must be > 0 (got {duration})",
                            "drop phases without communication or give a positive duration")
        demand = _finite("Phase.demand", self.demand, "give the bandwidth, e.g. 1000.0")
        if demand < 0:
            raise SpecError("Phase.demand", f"must be >= 0 (got {demand})",
                            "give the bandwidth the phase wants, in the capacity's unit")
        object.__setattr__(self, "start_ms", start)
        object.__setattr__(self, "duration_ms", duration)
        object.__setattr__(self, "demand", demand)


@dataclass(frozen=True)
class JobDemand:
    """A job's periodic bandwidth demand on every link it crosses.

    ``period_ms`` is the iteration time; every phase must lie inside one iteration
    (``0 <= start`` and ``start + duration <= period``).
    """

    name: str
    period_ms: float
    phases: tuple[Phase, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("JobDemand.name", f"must be a non-empty string (got {self.name!r})",
                            "name the job, e.g. 'vgg16'")
        where = f"{self.name}.period_ms"
        period = _finite(where, self.period_ms, "give the iteration time in ms")
        if period <= 0:
            raise SpecError(where, f"must be > 0 (got {period})",
                            "give the job's iteration time in ms")
        object.__setattr__(self, "period_ms", period)
        phases = tuple(self.phases)
        for i, phase in enumerate(phases):
            where = f"{self.name}.phases[{i}]"
            if not isinstance(phase, Phase):
                raise SpecError(where, f"must be a Phase (got {type(phase).__name__})",
                                "build it with Phase(start_ms, duration_ms, demand)")
            if phase.start_ms >= period:
                raise SpecError(f"{where}.start_ms",
                                f"{phase.start_ms} ms is outside the {period} ms period",
                                "give the offset within one iteration, 0 <= start < period")
            end = phase.start_ms + phase.duration_ms
            if end > period * (1 + _REL_TOL):
                raise SpecError(f"{where}.duration_ms",
                                f"phase ends at {end} ms, after the {period} ms period",
                                "split a phase that wraps into one at the end and one at 0")
        object.__setattr__(self, "phases", phases)

    @property
    def volume(self) -> float:
        """Demand integrated over one iteration (demand unit x ms)."""
        return sum(p.demand * p.duration_ms for p in self.phases)


# --------------------------------------------------------------------------------------
# Unified circle


def _named_periods(periods_ms: Mapping[str, float] | Sequence[float]) -> list[tuple[str, float]]:
    if isinstance(periods_ms, Mapping):
        items = [(str(k), v) for k, v in periods_ms.items()]
    elif isinstance(periods_ms, str | bytes) or not isinstance(periods_ms, Iterable):
        raise SpecError("periods_ms", f"must be a list or mapping of ms (got {periods_ms!r})",
                        "pass the iteration times, e.g. [40, 60]")
    else:
        items = [(f"periods_ms[{i}]", v) for i, v in enumerate(periods_ms)]
    if not items:
        raise SpecError("periods_ms", "is empty", "pass at least one iteration time")
    out = []
    for name, value in items:
        period = _finite(name, value, "give the iteration time in ms")
        if period <= 0:
            raise SpecError(name, f"must be > 0 (got {period})", "give the iteration time in ms")
        out.append((name, period))
    return out


def _lcm_all(units: Iterable[int]) -> int:
    result = 1
    for unit in units:
        result = math.lcm(result, unit)
    return result


def unified_perimeter_ms(periods_ms: Mapping[str, float] | Sequence[float],
                         resolution_ms: float = DEFAULT_RESOLUTION_MS,
                         max_perimeter_ms: float = DEFAULT_MAX_PERIMETER_MS) -> float:
    """Perimeter of the unified circle: the LCM of the iteration times (section 4.3.2).

    Each period is first rounded to a multiple of ``resolution_ms`` (measured iteration
    times are never exact integers, and the LCM of raw floats is meaningless). Pass a
    mapping ``name -> period`` to get job names in error messages. Raises
    :class:`SpecError` when the LCM exceeds ``max_perimeter_ms``, naming the jobs that
    cause it and a coarser resolution that would fit.
    """
    named = _named_periods(periods_ms)
    res = _finite("resolution_ms", resolution_ms, "give a resolution in ms, e.g. 1.0")
    if res <= 0:
        raise SpecError("resolution_ms", f"must be > 0 (got {res})", "use e.g. 1.0 ms")
    limit = _finite("max_perimeter_ms", max_perimeter_ms, "give a limit in ms")
    if limit <= 0:
        raise SpecError("max_perimeter_ms", f"must be > 0 (got {limit})", "use e.g. 100000")
    units = []
    for name, period in named:
        unit = round(period / res)
        if unit < 1:
            raise SpecError("resolution_ms", f"{res} ms is coarser than {name} ({period} ms)",
                            "use a resolution_ms below the shortest iteration time")
        units.append(unit)
    lcm = _lcm_all(units)
    if lcm * res <= limit * (1 + _REL_TOL):
        return lcm * res
    culprits = [name for i, (name, _) in enumerate(named)
                if _lcm_all(units[:i] + units[i + 1:]) * res <= limit]
    if not culprits:
        culprits = [name for name, _ in named]
    described = ", ".join(f"{n} ({p:g} ms)" for n, p in named if n in culprits)
    shortest = min(p for _, p in named)
    suggestion = None
    for factor in (2, 5, 10, 20, 50, 100, 200, 500, 1000):
        coarser = res * factor
        if coarser > shortest:
            break
        if _lcm_all(max(1, round(p / coarser)) for _, p in named) * coarser <= limit:
            suggestion = coarser
            break
    fix = (f"use resolution_ms={suggestion:g}" if suggestion is not None
           else "use a coarser resolution_ms") + " or raise max_perimeter_ms"
    raise SpecError("periods_ms",
                    f"LCM at {res:g} ms resolution is {lcm * res:g} ms, over "
                    f"max_perimeter_ms={limit:g}, because of {described}", fix)


def _bins(step_deg: float) -> int:
    step = _finite("step_deg", step_deg, "use a divisor of 360 such as 5")
    if step <= 0 or step > 180:
        raise SpecError("step_deg", f"must be in (0, 180] degrees (got {step})",
                        "use a divisor of 360 such as 1, 5 or 10")
    exact = 360.0 / step
    n_bins = round(exact)
    if abs(exact - n_bins) > 1e-9 * exact:
        raise SpecError("step_deg", f"{step} degrees does not divide 360 into whole bins",
                        "use a divisor of 360 such as 1, 2.5, 5 or 10")
    if n_bins > MAX_BINS:
        raise SpecError("step_deg", f"{step} degrees gives {n_bins} bins, over {MAX_BINS}",
                        "use a coarser step such as 1 or 5 degrees")
    return n_bins


@dataclass(frozen=True)
class _Circle:
    """Jobs discretised on one unified circle."""

    jobs: tuple[JobDemand, ...]
    periods: tuple[float, ...]      # periods used on the circle (rounded to the resolution)
    perimeter_ms: float
    n_bins: int
    rows: np.ndarray                # (jobs, bins) mean demand per bin, unrotated

    @property
    def step_deg(self) -> float:
        return 360.0 / self.n_bins

    def shift_of(self, job: int, bins: int) -> float:
        """Time-shift (equation 4.5) of a rotation by ``bins`` bins."""
        shift = bins * self.perimeter_ms / self.n_bins
        period = self.jobs[job].period_ms
        shift = math.fmod(shift, period)
        return 0.0 if period - shift <= _REL_TOL * period else shift


def _check_jobs(jobs: Sequence[JobDemand], field_name: str = "jobs") -> tuple[JobDemand, ...]:
    if isinstance(jobs, JobDemand) or not isinstance(jobs, Iterable):
        raise SpecError(field_name, "must be a list of JobDemand", "wrap a single job in a list")
    jobs = tuple(jobs)
    if not jobs:
        raise SpecError(field_name, "is empty", "pass at least one JobDemand")
    seen = set()
    for i, job in enumerate(jobs):
        if not isinstance(job, JobDemand):
            raise SpecError(f"{field_name}[{i}]", f"must be a JobDemand (got {type(job).__name__})",
                            "build it with JobDemand(name, period_ms, phases)")
        if job.name in seen:
            raise SpecError(f"{field_name}[{i}].name", f"job {job.name!r} appears twice",
                            "give every job on a link a unique name")
        seen.add(job.name)
    return jobs


def _cumulative(job: JobDemand, period: float, x: np.ndarray) -> np.ndarray:
    """Integral of the job's demand over [0, x), the pattern repeating every ``period``."""
    if not job.phases:
        return np.zeros_like(x)
    scale = period / job.period_ms
    starts = np.array([p.start_ms for p in job.phases]) * scale
    durations = np.array([p.duration_ms for p in job.phases]) * scale
    demands = np.array([p.demand for p in job.phases])
    turns = np.floor(x / period)
    within = x - turns * period
    covered = np.clip(within[:, None] - starts[None, :], 0.0, durations[None, :])
    return turns * float(demands @ durations) + covered @ demands


def _rounded_periods(jobs: Sequence[JobDemand], resolution_ms: float) -> tuple[float, ...]:
    """The periods as the unified circle uses them: multiples of ``resolution_ms``."""
    res = float(resolution_ms)
    return tuple(max(1, round(j.period_ms / res)) * res for j in jobs)


def adapted_step_deg(jobs: Sequence[JobDemand], step_deg: float = DEFAULT_STEP_DEG,
                     resolution_ms: float = DEFAULT_RESOLUTION_MS) -> float:
    """``step_deg``, or a finer step where at ``step_deg`` some job's period would span
    less than one bin of the jobs' unified circle (heterogeneous periods: a long LCM).
    The finer step gives the shortest period ``MIN_BINS_PER_PERIOD`` bins.  Where every
    period spans a bin already, the step (and so every result) is left as it is.
    Raises the ``step_deg`` SpecError when even ``MAX_BINS`` bins are too coarse (a
    coarser ``resolution_ms`` shortens the circle)."""
    jobs = _check_jobs(jobs)
    n_bins = _bins(step_deg)
    perimeter = unified_perimeter_ms({j.name: j.period_ms for j in jobs}, resolution_ms)
    shortest = min(_rounded_periods(jobs, resolution_ms))
    if n_bins * shortest / perimeter >= 1:
        return step_deg
    needed = math.ceil(MIN_BINS_PER_PERIOD * perimeter / shortest)
    if needed > MAX_BINS:
        raise SpecError("step_deg", f"a {shortest:g} ms period spans under one bin of the "
                        f"{perimeter:g} ms unified circle even at {MAX_BINS} bins",
                        "use a coarser resolution_ms so the periods have a smaller LCM")
    return 360.0 / needed


def _make_circle(jobs: Sequence[JobDemand], step_deg: float, perimeter_ms: float | None,
                 resolution_ms: float) -> _Circle:
    jobs = _check_jobs(jobs)
    n_bins = _bins(step_deg)
    if perimeter_ms is None:
        perimeter = unified_perimeter_ms({j.name: j.period_ms for j in jobs}, resolution_ms)
        periods = _rounded_periods(jobs, resolution_ms)
    else:
        perimeter = _finite("perimeter_ms", perimeter_ms, "give the circle's perimeter in ms")
        if perimeter <= 0:
            raise SpecError("perimeter_ms", f"must be > 0 (got {perimeter})",
                            "leave it None to use the LCM of the iteration times")
        for job in jobs:
            turns = perimeter / job.period_ms
            if abs(turns - round(turns)) > 1e-6 * turns or round(turns) < 1:
                raise SpecError("perimeter_ms",
                                f"{perimeter:g} ms is not a multiple of {job.name}'s "
                                f"{job.period_ms:g} ms period",
                                "leave it None to use the LCM of the iteration times")
        periods = tuple(j.period_ms for j in jobs)
    for job, period in zip(jobs, periods, strict=True):
        bins_per_period = n_bins * period / perimeter
        if bins_per_period < 1:
            raise SpecError("step_deg",
                            f"{job.name}'s {period:g} ms period covers {bins_per_period:.2g} "
                            f"bins of the {perimeter:g} ms unified circle",
                            "use a smaller step_deg, or a coarser resolution_ms so the "
                            "periods have a smaller LCM")
    circle = _Circle(jobs, periods, perimeter, n_bins, np.empty((0, n_bins)))
    rows = np.vstack([_row(circle, i, 0.0) for i in range(len(jobs))])
    return _Circle(jobs, periods, perimeter, n_bins, rows)


def _row(circle: _Circle, index: int, shift_ms: float) -> np.ndarray:
    """Mean demand per bin of job ``index`` delayed by ``shift_ms`` (rotated on the circle)."""
    edges = np.arange(circle.n_bins + 1) * (circle.perimeter_ms / circle.n_bins) - shift_ms
    integral = _cumulative(circle.jobs[index], circle.periods[index], edges)
    row = np.diff(integral) / (circle.perimeter_ms / circle.n_bins)
    # Differences of large integrals leave ~1e-13 noise; snap it to the exact levels so
    # that idle bins read 0 and a bin inside one phase reads that phase's demand.
    levels = np.array([0.0, *(p.demand for p in circle.jobs[index].phases)])
    scale = _REL_TOL * max(1.0, float(levels.max()))
    nearest = levels[np.abs(row[:, None] - levels[None, :]).argmin(axis=1)]
    return np.where(np.abs(row - nearest) <= scale, nearest, row)


def _shifts_from(circle: _Circle, rotations_deg: object, shifts_ms: object) -> list[float]:
    if rotations_deg is not None and shifts_ms is not None:
        raise SpecError("rotations_deg", "given together with shifts_ms",
                        "pass either rotations in degrees or shifts in ms")
    values, unit, name = (rotations_deg, "deg", "rotations_deg")
    if shifts_ms is not None:
        values, unit, name = (shifts_ms, "ms", "shifts_ms")
    if values is None:
        return [0.0] * len(circle.jobs)
    names = [j.name for j in circle.jobs]
    if isinstance(values, Mapping):
        unknown = sorted(set(map(str, values)) - set(names))
        if unknown and unit == "deg":   # shifts of jobs elsewhere (a schedule's) are fine
            raise SpecError(name, f"unknown job(s) {', '.join(unknown)}",
                            f"use names of the jobs passed: {', '.join(names)}")
        raw = [values.get(n, 0.0) for n in names]
    elif isinstance(values, Iterable) and not isinstance(values, str | bytes):
        raw = list(values)
        if len(raw) != len(names):
            raise SpecError(name, f"has {len(raw)} values for {len(names)} jobs",
                            "give one value per job, in the jobs' order, or a mapping")
    else:
        raise SpecError(name, f"must be a mapping or a list (got {values!r})",
                        "e.g. {'job-b': 30.0}")
    pairs = zip(names, raw, strict=True)
    out = [_finite(f"{name}[{n}]", v, f"give a number in {unit}") for n, v in pairs]
    if unit == "deg":
        out = [deg / 360.0 * circle.perimeter_ms for deg in out]
    return out


def demand_on_circle(jobs: Sequence[JobDemand], step_deg: float = DEFAULT_STEP_DEG,
                     perimeter_ms: float | None = None, *,
                     resolution_ms: float = DEFAULT_RESOLUTION_MS,
                     shifts_ms: Mapping[str, float] | Sequence[float] | None = None,
                     ) -> np.ndarray:
    """Each job's demand per angle bin of the unified circle, shape ``(len(jobs), bins)``.

    Bin ``b`` covers angles ``[b * step_deg, (b + 1) * step_deg)``, i.e. the time span
    ``[b, b + 1) * perimeter / bins``; its value is the job's mean demand over that span
    (exact, not sampled), with the job's pattern repeated ``perimeter / period`` times.
    ``perimeter_ms`` defaults to :func:`unified_perimeter_ms` of the jobs (periods rounded
    to ``resolution_ms``); a given perimeter must be a multiple of every period.
    ``shifts_ms`` delays jobs (rotates their circles) before discretising.
    """
    circle = _make_circle(jobs, step_deg, perimeter_ms, resolution_ms)
    shifts = _shifts_from(circle, None, shifts_ms)
    if not any(shifts):
        return circle.rows.copy()
    return np.vstack([_row(circle, i, s) for i, s in enumerate(shifts)])


def _check_capacity(capacity: object, field_name: str = "capacity") -> float:
    value = _finite(field_name, capacity, "give the link capacity in the demands' unit")
    if value <= 0:
        raise SpecError(field_name, f"must be > 0 (got {value})",
                        "give the link capacity in the demands' unit, e.g. 1000.0")
    return value


def _excess(total: np.ndarray, capacity: float) -> np.ndarray:
    """Excess(demand) of Table 4.1 per bin; float noise of ~1e-9 C counts as no excess."""
    over = total - capacity
    return np.where(over > _REL_TOL * capacity, over, 0.0)


def _score(total: np.ndarray, capacity: float) -> np.ndarray | float:
    """Table 4.1: 1 - mean over angles of Excess(demand) / C, along the last axis."""
    return 1.0 - _excess(total, capacity).mean(axis=-1) / capacity


def compatibility_score(jobs: Sequence[JobDemand], capacity: float,
                        rotations_deg: Mapping[str, float] | Sequence[float] | None = None,
                        step_deg: float = DEFAULT_STEP_DEG, *,
                        shifts_ms: Mapping[str, float] | Sequence[float] | None = None,
                        perimeter_ms: float | None = None,
                        resolution_ms: float = DEFAULT_RESOLUTION_MS) -> float:
    """Compatibility score of ``jobs`` sharing a link of ``capacity`` (section 4.3.6).

    ``score = 1 - sum_a Excess(demand_a) / (|A| * C)`` where ``demand_a`` is the summed
    demand of all jobs in angle bin ``a`` and ``Excess`` is its part above the capacity
    ``C``: 1 means fully compatible, lower is worse, and strongly oversubscribed links go
    below 0. Jobs are rotated by ``rotations_deg`` (degrees on the unified circle; a
    mapping by job name or a list in the jobs' order; missing jobs stay at 0), or delayed
    by ``shifts_ms`` (a mapping may hold other jobs too, e.g. a whole schedule's shifts).
    Any angle works, not only multiples of ``step_deg``.
    """
    cap = _check_capacity(capacity)
    circle = _make_circle(jobs, step_deg, perimeter_ms, resolution_ms)
    shifts = _shifts_from(circle, rotations_deg, shifts_ms)
    total = sum(_row(circle, i, s) for i, s in enumerate(shifts))
    return float(_score(np.asarray(total), cap))


# --------------------------------------------------------------------------------------
# Rotation search (Table 4.1)


@dataclass(frozen=True)
class LinkSolution:
    """Best rotations found for the jobs sharing one link.

    ``rotations_deg`` are angles on the link's unified circle (first job at 0) and
    ``shifts_ms`` the matching time-shifts (equation 4.5), each in ``[0, period)``.
    ``exact`` is True when the search was exhaustive over the angle grid (the optimum),
    False when the heuristic search was used; ``evaluations`` counts the full-circle score
    evaluations it made.
    """

    link: str
    score: float
    rotations_deg: dict[str, float]
    shifts_ms: dict[str, float]
    periods_ms: dict[str, float] = field(default_factory=dict)
    perimeter_ms: float = 0.0
    exact: bool = True
    evaluations: int = 0


def _better(a: tuple[float, float], b: tuple[float, float], tol: float) -> bool:
    """Lexicographic: less excess, then (on a tie) less overlap."""
    if a[0] < b[0] - tol:
        return True
    return abs(a[0] - b[0]) <= tol and a[1] < b[1] - _REL_TOL * max(1.0, abs(b[1]))


def _pick(excess: np.ndarray, sumsq: np.ndarray, tol: float) -> int:
    """Index of the lexicographic minimum (excess, then sumsq, then lowest index)."""
    near = np.flatnonzero(excess <= excess.min() + tol)
    return int(near[np.argmin(sumsq[near])])


class _Search:
    """Rotation search over one link's circle; ``rolled[j][k]`` is job j rotated k bins."""

    def __init__(self, circle: _Circle, capacity: float) -> None:
        self.capacity = capacity
        n = circle.n_bins
        self.tol = 1e-9 * capacity * n
        self.counts = []
        self.rolled = []
        for period, row in zip(circle.periods, circle.rows, strict=True):
            # Equation 4.4: rotations within the job's first repetition on the circle.
            count = min(n, math.ceil(n * period / circle.perimeter_ms - 1e-9))
            index = (np.arange(n)[None, :] - np.arange(count)[:, None]) % n
            self.counts.append(count)
            self.rolled.append(row[index])
        self.evaluations = 0

    def _measure(self, totals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.evaluations += totals.shape[0]
        over = totals - self.capacity
        excess = np.maximum(over, 0.0, out=over).sum(axis=1)   # noise is handled by tol
        return excess, np.einsum("ij,ij->i", totals, totals)

    def total(self, rotation: Sequence[int]) -> np.ndarray:
        return sum(r[k] for r, k in zip(self.rolled, rotation, strict=True))

    def exhaustive(self) -> list[int]:
        if len(self.counts) == 1:
            self._measure(self.rolled[0][:1])
            return [0]
        shape = tuple(self.counts[1:])
        combos = math.prod(shape)
        base = self.rolled[0][0]
        best: tuple[float, float] | None = None
        best_rot = [0] * len(self.counts)
        for start in range(0, combos, _CHUNK):
            flat = np.arange(start, min(combos, start + _CHUNK))
            picks = np.unravel_index(flat, shape)
            totals = base + sum(self.rolled[j + 1][p] for j, p in enumerate(picks))
            excess, sumsq = self._measure(np.atleast_2d(totals))
            i = _pick(excess, sumsq, self.tol)
            key = (float(excess[i]), float(sumsq[i]))
            if best is None or _better(key, best, self.tol):
                best = key
                best_rot = [0] + [int(p[i]) for p in picks]
        return best_rot

    def descend(self, rotation: list[int]) -> tuple[list[int], tuple[float, float]]:
        """Coordinate descent: move one job at a time to its best rotation."""
        rotation = list(rotation)
        total = self.total(rotation)
        for _ in range(MAX_SWEEPS):
            moved = False
            total = self.total(rotation)          # no drift from repeated +/-
            for j in range(1, len(rotation)):
                candidates = (total - self.rolled[j][rotation[j]])[None, :] + self.rolled[j]
                excess, sumsq = self._measure(candidates)
                k = _pick(excess, sumsq, self.tol)
                here = (float(excess[rotation[j]]), float(sumsq[rotation[j]]))
                if k != rotation[j] and _better((float(excess[k]), float(sumsq[k])),
                                                here, self.tol):
                    rotation[j] = k
                    total = candidates[k]
                    moved = True
            if not moved:
                break
        excess, sumsq = self._measure(total[None, :])
        return rotation, (float(excess[0]), float(sumsq[0]))

    def greedy(self, order: Sequence[int]) -> list[int]:
        """Insert jobs one by one, each at its best rotation against those already placed."""
        rotation = [0] * len(self.counts)
        total = self.rolled[0][0].copy()
        for j in order:
            candidates = total[None, :] + self.rolled[j]
            excess, sumsq = self._measure(candidates)
            rotation[j] = _pick(excess, sumsq, self.tol)
            total = candidates[rotation[j]]
        return rotation

    def heuristic(self, rounds: int, rng: np.random.Generator) -> list[int]:
        """Iterated local search: greedy + descent, then perturb 2-3 jobs and descend again.

        A perturbed solution replaces the current one when it is not worse (so the search
        can walk along plateaus); the best one seen is returned.
        """
        volume = [float(r[0].sum()) for r in self.rolled]
        order = sorted(range(1, len(self.counts)), key=lambda j: (-volume[j], j))
        best_rot, best = self.descend(self.greedy(order))
        current_rot, current = best_rot, best
        movable = np.arange(1, len(self.counts))
        for _ in range(rounds):
            if best[0] <= self.tol:
                break                               # score 1 cannot be beaten
            start = list(current_rot)
            size = min(movable.size, int(rng.integers(2, 4)))
            for j in rng.choice(movable, size=size, replace=False):
                start[j] = int(rng.integers(self.counts[j]))
            rotation, key = self.descend(start)
            if not _better(current, key, self.tol):
                current_rot, current = rotation, key
                if _better(key, best, self.tol):
                    best_rot, best = rotation, key
        return best_rot


def best_rotations(jobs: Sequence[JobDemand], capacity: float,
                   step_deg: float = DEFAULT_STEP_DEG, link: str = "", *,
                   resolution_ms: float = DEFAULT_RESOLUTION_MS,
                   perimeter_ms: float | None = None,
                   rounds: int = DEFAULT_ROUNDS, seed: int = 0) -> LinkSolution:
    """Rotations of ``jobs`` on one link that maximise the compatibility score (Table 4.1).

    The first job stays at 0; every other job is searched over the angle bins of its first
    repetition on the unified circle (equation 4.4). Up to ``EXHAUSTIVE_LIMIT`` joint
    combinations are all scored (``exact=True``: the optimum on the grid). Beyond that the
    search is heuristic (``exact=False``, it can miss the optimum): greedy insertion,
    coordinate descent and ``rounds`` rounds of iterated local search seeded by ``seed``,
    so results are reproducible (see the module docstring). Ties prefer less overlap,
    then smaller angles. Rotations become time-shifts with equation 4.5.
    """
    cap = _check_capacity(capacity)
    if not validate.is_integer(rounds) or rounds < 0:
        raise SpecError("rounds", f"must be an integer >= 0 (got {rounds!r})",
                        f"use e.g. {DEFAULT_ROUNDS}")
    circle = _make_circle(jobs, step_deg, perimeter_ms, resolution_ms)
    search = _Search(circle, cap)
    exact = math.prod(search.counts[1:]) <= EXHAUSTIVE_LIMIT
    if exact:
        rotation = search.exhaustive()
    else:
        rotation = search.heuristic(rounds, np.random.default_rng(seed))
    score = float(_score(search.total(rotation), cap))
    names = [j.name for j in circle.jobs]
    pairs = list(zip(names, rotation, strict=True))
    return LinkSolution(
        link=link,
        score=score,
        rotations_deg={n: k * circle.step_deg for n, k in pairs},
        shifts_ms={n: circle.shift_of(i, k) for i, (n, k) in enumerate(pairs)},
        periods_ms={j.name: j.period_ms for j in circle.jobs},
        perimeter_ms=circle.perimeter_ms,
        exact=exact,
        evaluations=search.evaluations,
    )


# --------------------------------------------------------------------------------------
# Affinity graph and Algorithm 1 (section 4.4.1)


@dataclass(frozen=True)
class AffinityGraph:
    """Bipartite graph G = (U, V, E) of section 4.4.1.

    ``jobs`` (U) are the jobs that share at least one link with another job, ``links`` (V)
    the links that carry two or more jobs, and ``edges`` (E) the ``(job, link)`` pairs
    where the job crosses the link. Links used by a single job constrain nothing and are
    left out, and so are jobs that only use such links.
    """

    jobs: tuple[str, ...]
    links: tuple[str, ...]
    edges: tuple[tuple[str, str], ...]

    def links_of(self, job: str) -> tuple[str, ...]:
        """Shared links that ``job`` crosses, in edge order."""
        return tuple(link for j, link in self.edges if j == job)

    def jobs_on(self, link: str) -> tuple[str, ...]:
        """Jobs that cross ``link``, in edge order."""
        return tuple(j for j, lk in self.edges if lk == link)

    def components(self) -> list[tuple[str, ...]]:
        """Jobs of each connected subgraph, in the order of ``jobs``."""
        parent = {("j", j): ("j", j) for j in self.jobs}
        parent.update({("l", lk): ("l", lk) for lk in self.links})
        for job, link in self.edges:
            _union(parent, ("j", job), ("l", link))
        groups: dict[tuple[str, str], list[str]] = {}
        for job in self.jobs:
            groups.setdefault(_find(parent, ("j", job)), []).append(job)
        return [tuple(g) for g in groups.values()]


def _find(parent: dict, node: tuple[str, str]) -> tuple[str, str]:
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def _union(parent: dict, a: tuple[str, str], b: tuple[str, str]) -> bool:
    ra, rb = _find(parent, a), _find(parent, b)
    if ra == rb:
        return False
    parent[rb] = ra
    return True


def _check_job_links(job_links: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    if not isinstance(job_links, Mapping):
        raise SpecError("job_links", f"must be a mapping job -> links (got {job_links!r})",
                        "e.g. {'j1': ['l1'], 'j2': ['l1', 'l2']}")
    out = {}
    for job, links in job_links.items():
        if not isinstance(job, str) or not job:
            raise SpecError("job_links", f"job names must be non-empty strings (got {job!r})",
                            "key the mapping by job name")
        if isinstance(links, str | bytes) or not isinstance(links, Iterable):
            raise SpecError(f"job_links[{job}]", f"must be a list of link names (got {links!r})",
                            "wrap a single link in a list, e.g. ['l1']")
        names = []
        for link in links:
            if not isinstance(link, str) or not link:
                raise SpecError(f"job_links[{job}]", f"link names must be strings (got {link!r})",
                                "name links with non-empty strings")
            if link not in names:
                names.append(link)
        out[job] = tuple(names)
    return out


def affinity_graph(job_links: Mapping[str, Sequence[str]]) -> AffinityGraph:
    """Build the affinity graph from each job's links (path), as in Algorithm 2 lines 3-12."""
    paths = _check_job_links(job_links)
    carriers: dict[str, list[str]] = {}
    for job, links in paths.items():
        for link in links:
            carriers.setdefault(link, []).append(job)
    shared = [link for link, jobs in carriers.items() if len(jobs) >= 2]
    shared_set = set(shared)
    edges = tuple((job, link) for job, links in paths.items() for link in links
                  if link in shared_set)
    jobs = tuple(job for job, links in paths.items() if shared_set.intersection(links))
    return AffinityGraph(jobs=jobs, links=tuple(shared), edges=edges)


def has_loop(graph: AffinityGraph) -> bool:
    """Whether the affinity graph contains a cycle (e.g. two jobs sharing two links)."""
    parent = {("j", j): ("j", j) for j in graph.jobs}
    parent.update({("l", lk): ("l", lk) for lk in graph.links})
    return any(not _union(parent, ("j", job), ("l", link)) for job, link in graph.edges)


def _gcd_ms(a: float, b: float) -> float:
    """GCD of two periods, at microsecond resolution."""
    return math.gcd(round(a * 1000), round(b * 1000)) / 1000 or min(a, b)


def _resolve(job_links: Mapping[str, Sequence[str]], link_solutions: Mapping[str, LinkSolution],
             periods_ms: Mapping[str, float] | None,
             ) -> tuple[dict[str, tuple[str, ...]], AffinityGraph, dict[str, float]]:
    paths = _check_job_links(job_links)
    graph = affinity_graph(paths)
    if not isinstance(link_solutions, Mapping):
        raise SpecError("link_solutions", "must be a mapping link -> LinkSolution",
                        "pass {link: best_rotations(...)} for every shared link")
    periods: dict[str, float] = {}
    for link in graph.links:
        solution = link_solutions.get(link)
        if not isinstance(solution, LinkSolution):
            raise SpecError("link_solutions", f"no LinkSolution for shared link {link!r}",
                            "run best_rotations for every link that carries two or more jobs")
        on_link = graph.jobs_on(link)
        for job in on_link:
            if job not in solution.shifts_ms:
                raise SpecError("job_links", f"job {job!r} crosses {link!r} but that link's "
                                "solution has no shift for it",
                                "solve the link with every job that job_links routes over it")
        for job in solution.shifts_ms:
            if job not in on_link:
                raise SpecError("link_solutions", f"{link!r}'s solution has job {job!r}, "
                                f"which job_links does not route over {link!r}",
                                f"add {link!r} to job_links[{job!r}] or re-solve the link")
            period = solution.periods_ms.get(job)
            if period is not None and periods.setdefault(job, period) != period:
                raise SpecError("link_solutions", f"job {job!r} has periods {periods[job]} "
                                f"and {period} ms on different links",
                                "profile each job once and use the same JobDemand everywhere")
    if periods_ms is not None:
        if not isinstance(periods_ms, Mapping):
            raise SpecError("periods_ms", "must be a mapping job -> iteration time in ms",
                            "e.g. {'j1': 40.0}")
        for job, value in periods_ms.items():
            period = _finite(f"periods_ms[{job}]", value, "give the iteration time in ms")
            if period <= 0:
                raise SpecError(f"periods_ms[{job}]", f"must be > 0 (got {period})",
                                "give the iteration time in ms")
            periods[job] = period
    for job in graph.jobs:
        if job not in periods:
            raise SpecError("periods_ms", f"no iteration time known for job {job!r}",
                            "pass periods_ms or LinkSolutions from best_rotations")
    return paths, graph, periods


def _traverse(paths: Mapping[str, tuple[str, ...]], graph: AffinityGraph,
              link_solutions: Mapping[str, LinkSolution], periods: Mapping[str, float],
              ) -> tuple[dict[str, float], tuple[str, ...]]:
    """Algorithm 1, then the links whose relative shifts the result does not honour."""
    shifts = {job: 0.0 for job in paths}
    visited: set[str] = set()
    for root in graph.jobs:                     # one BFS per connected subgraph
        if root in visited:
            continue
        visited.add(root)
        queue = deque([root])
        while queue:
            job = queue.popleft()
            for link in graph.links_of(job):
                weights = link_solutions[link].shifts_ms
                for other in graph.jobs_on(link):
                    if other in visited:
                        continue
                    visited.add(other)
                    queue.append(other)
                    period = periods[other]
                    shift = (shifts[job] - weights[job] + weights[other]) % period
                    shifts[other] = 0.0 if period - shift <= _REL_TOL * period else shift
    broken = []
    for link in graph.links:
        weights = link_solutions[link].shifts_ms
        on_link = graph.jobs_on(link)
        for i, a in enumerate(on_link):
            if any(not _same_relative(shifts, weights, periods, a, b) for b in on_link[i + 1:]):
                broken.append(link)
                break
    return shifts, tuple(broken)


def _same_relative(shifts: Mapping[str, float], weights: Mapping[str, float],
                   periods: Mapping[str, float], a: str, b: str) -> bool:
    """Equation 4.6: do a and b keep the link's relative shift (modulo their common period)?

    Delaying a job by a whole period changes nothing, so the relative position of a and b
    is preserved iff ``(t_a - w_a) - (t_b - w_b)`` is a multiple of gcd(period_a, period_b).
    """
    gcd = _gcd_ms(periods[a], periods[b])
    diff = math.fmod((shifts[a] - weights[a]) - (shifts[b] - weights[b]), gcd)
    return min(abs(diff), gcd - abs(diff)) <= 1e-6 * max(1.0, gcd)


def time_shifts(job_links: Mapping[str, Sequence[str]],
                link_solutions: Mapping[str, LinkSolution],
                periods_ms: Mapping[str, float] | None = None, *,
                strict: bool = False) -> dict[str, float]:
    """One time-shift per job from the per-link solutions (Algorithm 1, section 4.4.1).

    ``job_links`` maps every job to the links it crosses and ``link_solutions`` holds a
    :class:`LinkSolution` for every link carrying two or more jobs. Each connected
    subgraph of the affinity graph is traversed breadth-first from its first job (in
    ``job_links`` order; the thesis picks it at random), which gets shift 0; a job reached
    from ``parent`` over ``link`` gets ``t_parent - w(parent, link) + w(link, job)``,
    reduced modulo its period. Jobs on no shared link get 0. Periods come from the link
    solutions unless ``periods_ms`` is given.

    On a loop-free graph every link's optimal relative shifts are kept (Theorem 1). The
    thesis discards placements with loops (Algorithm 2); here a loop does not stop the
    traversal: the BFS-tree constraints are kept, and the links whose relative shifts are
    then broken are reported with a :class:`CassiniLoopWarning` (a loop whose constraints
    happen to agree breaks nothing and warns nothing). ``strict=True`` raises
    :class:`SpecError` on any loop instead.
    """
    paths, graph, periods = _resolve(job_links, link_solutions, periods_ms)
    if strict and has_loop(graph):
        raise SpecError("job_links", "the affinity graph has a loop, so one shift per job "
                        "cannot honour every link", "choose a loop-free placement "
                        "(rank_placements discards loops) or pass strict=False")
    shifts, broken = _traverse(paths, graph, link_solutions, periods)
    if broken:
        warnings.warn(CassiniLoopWarning(
            f"affinity graph has a loop; optimal relative shifts dropped on link(s) "
            f"{', '.join(broken)}"), stacklevel=2)
    return shifts


# --------------------------------------------------------------------------------------
# Whole placements (Algorithm 2, section 4.4.2)


@dataclass(frozen=True)
class CassiniSchedule:
    """Time-shifts for one placement, with the per-link results behind them.

    ``shifts_ms`` has every job of the placement (0 for jobs that share no link);
    ``link_scores`` the compatibility score of each link carrying two or more jobs;
    ``has_loop`` whether the affinity graph has a loop, and ``broken_links`` the links
    whose optimal relative shifts the unique shifts could not keep (empty without loops).
    """

    shifts_ms: dict[str, float]
    link_scores: dict[str, float]
    has_loop: bool
    link_solutions: dict[str, LinkSolution]
    broken_links: tuple[str, ...] = ()

    @property
    def score(self) -> float:
        """Average link score (Algorithm 2's ranking metric); 1.0 when no link is shared."""
        if not self.link_scores:
            return 1.0
        return sum(self.link_scores.values()) / len(self.link_scores)


def _check_placement(jobs_per_link: Mapping[str, Sequence[JobDemand]], field_name: str,
                     ) -> tuple[dict[str, tuple[JobDemand, ...]], dict[str, list[str]]]:
    if not isinstance(jobs_per_link, Mapping):
        raise SpecError(field_name, "must be a mapping link -> list of JobDemand",
                        "e.g. {'l1': [job_a, job_b]}")
    links: dict[str, tuple[JobDemand, ...]] = {}
    job_links: dict[str, list[str]] = {}
    periods: dict[str, float] = {}
    for link, jobs in jobs_per_link.items():
        if not isinstance(link, str) or not link:
            raise SpecError(field_name, f"link names must be non-empty strings (got {link!r})",
                            "key the mapping by link name")
        links[link] = _check_jobs(jobs, f"{field_name}[{link}]")
        for job in links[link]:
            if periods.setdefault(job.name, job.period_ms) != job.period_ms:
                raise SpecError(f"{field_name}[{link}]", f"job {job.name!r} has period "
                                f"{job.period_ms} ms here and {periods[job.name]} ms elsewhere",
                                "use one iteration time per job on every link")
            job_links.setdefault(job.name, []).append(link)
    return links, job_links


def _solve_links(links: Mapping[str, tuple[JobDemand, ...]], capacities: Mapping[str, float],
                 step_deg: float, resolution_ms: float, cache: dict | None = None,
                 ) -> dict[str, LinkSolution]:
    if not isinstance(capacities, Mapping):
        raise SpecError("capacities", "must be a mapping link -> capacity",
                        "e.g. {'l1': 1000.0}")
    solutions = {}
    for link, jobs in links.items():
        if len(jobs) < 2:
            continue
        if link not in capacities:
            raise SpecError("capacities", f"no capacity for shared link {link!r}",
                            f"add capacities[{link!r}] in the demands' unit")
        cap = _check_capacity(capacities[link], f"capacities[{link}]")
        key = (jobs, cap)
        if cache is not None and key in cache:
            found = cache[key]
            solutions[link] = LinkSolution(link, found.score, found.rotations_deg,
                                           found.shifts_ms, found.periods_ms,
                                           found.perimeter_ms, found.exact, 0)
            continue
        solutions[link] = best_rotations(jobs, cap,
                                         adapted_step_deg(jobs, step_deg, resolution_ms),
                                         link, resolution_ms=resolution_ms)
        if cache is not None:
            cache[key] = solutions[link]
    return solutions


def schedule(jobs_per_link: Mapping[str, Sequence[JobDemand]], capacities: Mapping[str, float],
             step_deg: float = DEFAULT_STEP_DEG, *,
             resolution_ms: float = DEFAULT_RESOLUTION_MS) -> CassiniSchedule:
    """Cassini for one placement: best rotations per shared link, then Algorithm 1.

    ``jobs_per_link`` maps each link to the jobs crossing it (a job is identified by its
    name and may cross several links); ``capacities`` gives each shared link's capacity.
    A loop in the affinity graph is reported in the result (``has_loop``,
    ``broken_links``) rather than raised; use :func:`rank_placements` to avoid loops.
    """
    links, job_links = _check_placement(jobs_per_link, "jobs_per_link")
    solutions = _solve_links(links, capacities, step_deg, resolution_ms)
    paths, graph, periods = _resolve(job_links, solutions, None)
    shifts, broken = _traverse(paths, graph, solutions, periods)
    return CassiniSchedule(
        shifts_ms=shifts,
        link_scores={link: s.score for link, s in solutions.items()},
        has_loop=has_loop(graph),
        link_solutions=solutions,
        broken_links=broken,
    )


def rank_placements(candidates: Sequence[Mapping[str, Sequence[JobDemand]]],
                    capacities: Mapping[str, float], step_deg: float = DEFAULT_STEP_DEG, *,
                    aggregate: str = "mean",
                    resolution_ms: float = DEFAULT_RESOLUTION_MS) -> list[tuple[int, float]]:
    """Rank candidate placements best first (Algorithm 2, section 4.4.2).

    Each candidate maps link -> jobs on it. Candidates whose affinity graph has a loop are
    discarded (lines 13-15), so they are missing from the result. The others are scored
    by the average compatibility score of their shared links (lines 16-24; the thesis
    notes a tail metric could be used instead: ``aggregate="min"``). A candidate with no
    shared link scores 1.0. Returns ``(candidate index, score)``, best first, ties by
    index; :func:`schedule` on the winner gives its time-shifts (line 26).
    """
    if aggregate not in ("mean", "min"):
        raise SpecError("aggregate", f"must be 'mean' or 'min' (got {aggregate!r})",
                        "use 'mean' (the thesis's choice) or 'min' (worst link)")
    if isinstance(candidates, Mapping) or not isinstance(candidates, Iterable):
        raise SpecError("candidates", "must be a list of placements (mappings link -> jobs)",
                        "wrap a single placement in a list")
    cache: dict = {}
    ranked = []
    for index, candidate in enumerate(candidates):
        links, job_links = _check_placement(candidate, f"candidates[{index}]")
        if has_loop(affinity_graph(job_links)):
            continue
        solutions = _solve_links(links, capacities, step_deg, resolution_ms, cache)
        scores = [s.score for s in solutions.values()]
        if not scores:
            score = 1.0
        elif aggregate == "mean":
            score = sum(scores) / len(scores)
        else:
            score = min(scores)
        ranked.append((index, score))
    ranked.sort(key=lambda item: (-item[1], item[0]))
    return ranked
