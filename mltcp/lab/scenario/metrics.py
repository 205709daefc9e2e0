"""The one set of metric definitions, computed from a :class:`mltcp.lab.scenario.trace.Trace` alone.

Every backend's result goes through these functions, so a number in one column
of a comparison means exactly what it means in the next.  Definitions (the
defaults are the module constants below):

Iteration time
    Per job, over its iterations after the first ``skip`` records (warm-up,
    default ``DEFAULT_SKIP`` = 0): ``mean``, ``p50`` and ``p99`` of
    ``end - start`` (numpy percentile, method ``"linear"``).  None when no
    iteration is left after ``skip``.

Ratio to dedicated
    ``ratio_to_dedicated = mean / dedicated_mean``, where ``dedicated_mean`` is
    the job's mean iteration time (same ``skip``) in a separate dedicated trace
    in which it ran alone (:func:`dedicated_means`).  None for a job without a
    dedicated mean.  Scenario level: ``mean_ratio_to_dedicated`` is the
    arithmetic mean over all jobs, None unless every job has a ratio.

Overlap
    For job J in its iteration i: the fraction of J's communication time
    ``[comm_start, comm_end]`` during which at least one OTHER job that shares a
    link id with J is in its communication phase (any of its iterations).  The
    other jobs' intervals are merged first, so time covered by several is
    counted once.  A zero-length communication phase has overlap 0.  Jobs with
    no link in common never overlap.  Overlap is over all iterations (``skip``
    does not apply).

First interleaved iteration
    Of job J: the first iteration index c such that overlap(J, i) <= threshold
    for all i in [c, c + k), but for at most one isolated spike (below) among
    them (defaults ``DEFAULT_THRESHOLD`` = 0.10, ``DEFAULT_K`` = 5); the k
    iterations must all be in the trace, so a gap in the indices restarts the
    count.  None if never.  When the jobs first got out of each other's way; they
    may drift back into overlap afterwards.

Convergence iteration
    Of job J: the first interleaved iteration (as above) of the run's tail in
    which the interleaving held to the end: every record from c to the last is at
    or under the threshold, except isolated spikes (one record above it whose
    neighbouring records are both at or under it, more than k records from the
    next spike: a packet loss or a slow step, not a drift back; never the last).
    None if never.  So a run that only ends interleaved, for fewer than k
    iterations, has not converged, and a run that interleaves and then drifts
    back into overlap has a first interleaved iteration but converges only if it
    interleaves again and holds; convergence is never before the first
    interleaving.

    Scenario level, both: the maximum over jobs, None if any job's is None.

Link utilisation
    Over a window [t0, t1): the mean of ``throughput_bps`` over the link's
    samples with t0 <= t < t1, divided by ``capacity_bps``; None when no sample
    falls in the window.  Per iteration: the window is [start, end) of each
    iteration of a reference job (in :func:`summarize`, the first job in the
    trace whose links include the link).  Whole run: the mean over all samples.

ECN marks and drops
    Over a window [t0, t1): C(t1) - C(t0), where the cumulative counter C(t) is
    the value of the last sample at or before t, and before the first sample the
    first sample's value (nothing is counted before observation began).  So
    consecutive windows add up exactly; the whole-run total is last minus first
    sample.  Per iteration: the reference job's iteration windows, as above.
    None for a link without samples.

Fairness
    ``jain(x) = (sum x)^2 / (n * sum x^2)``: 1.0 when all are equal, 1/n when
    one of n takes everything (and 1.0 when all are 0).  Over a trace: x is each
    job's communication throughput in bits per second, ``8 * sum(bytes) /
    sum(comm_end - comm_start)`` over its iterations whose ``comm_start`` lies in
    the window (whole run by default) — the time-weighted mean of its
    per-iteration throughputs.  Jobs with no communication time in the window
    are left out; None when no job remains.

:func:`summarize` bundles all of these into the JSON that reports store as
report.json; its field names are listed in its docstring and are stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.scenario.trace import JobTrace, LinkTrace, Trace

DEFAULT_SKIP = 0
DEFAULT_THRESHOLD = 0.10
DEFAULT_K = 5
DEFAULT_LAST = 5      # overlap_last: the iterations it averages over
PERCENTILE_METHOD = "linear"
SUMMARY_SCHEMA = "mltcp.summary/1"

Counter = Literal["ecn_marks", "drops"]


def _check_skip(skip: int) -> int:
    return validate.at_least(skip, "skip", 0,
                             "give the number of warm-up iterations to leave out, e.g. 0")


def _check_threshold_k(threshold: float, k: int) -> None:
    validate.number(threshold, "threshold", 0, 1, f"{DEFAULT_THRESHOLD} (an overlap fraction)",
                    lo_open=True)
    validate.at_least(k, "k", 1,
                      f"give how many iterations in a row must stay below, e.g. {DEFAULT_K}")


# --------------------------------------------------------------------------- iteration time


@dataclass(frozen=True)
class IterationStats:
    """Iteration-time statistics of one job, seconds (None when nothing was measured)."""

    iterations: int       # iterations measured, i.e. after skip
    mean: float | None
    p50: float | None
    p99: float | None


def iteration_stats(job: JobTrace, skip: int = DEFAULT_SKIP) -> IterationStats:
    """Mean, p50 and p99 of ``end - start`` over the job's iterations after ``skip``."""
    times = job.iteration_times()[_check_skip(skip):]
    if times.size == 0:
        return IterationStats(iterations=0, mean=None, p50=None, p99=None)
    p50, p99 = np.percentile(times, [50, 99], method=PERCENTILE_METHOD)
    return IterationStats(iterations=int(times.size), mean=float(times.mean()),
                          p50=float(p50), p99=float(p99))


def pooled_iteration_times(traces: Iterable[Trace]) -> np.ndarray:
    """``end - start`` of every iteration of every job of ``traces``, seconds (what a
    scheme's pooled percentiles and CDF are over)."""
    parts = [job.iteration_times() for t in traces for job in t.jobs]
    return np.concatenate(parts) if parts else np.array([])


def _check_dedicated(name: str, value: float) -> float:
    fix = ("give the job's mean iteration time alone on the link "
           "(metrics.dedicated_means of its dedicated trace)")
    seconds = validate.finite(value, f"dedicated[{name!r}]", fix)
    if seconds <= 0:
        raise SpecError(f"dedicated[{name!r}]", f"{value!r} is not a positive number of "
                        "seconds", fix)
    return seconds


def ratio_to_dedicated(job: JobTrace, dedicated_mean: float,
                       skip: int = DEFAULT_SKIP) -> float | None:
    """``mean / dedicated_mean``; None when the job has no iteration after ``skip``."""
    dedicated_mean = _check_dedicated(job.name, dedicated_mean)
    mean = iteration_stats(job, skip).mean
    return None if mean is None else mean / dedicated_mean


def ratios_to_dedicated(trace: Trace, dedicated: Mapping[str, float],
                        skip: int = DEFAULT_SKIP) -> dict[str, float | None]:
    """Per job, its ratio to the dedicated mean in ``dedicated`` (None if it has none there).

    Names in ``dedicated`` that are not jobs of the trace are ignored, so one
    table of dedicated times can serve every scenario.
    """
    return {job.name: (ratio_to_dedicated(job, dedicated[job.name], skip)
                       if job.name in dedicated else None)
            for job in trace.jobs}


def dedicated_means(traces: Iterable[Trace], skip: int = DEFAULT_SKIP) -> dict[str, float]:
    """Job name -> mean iteration time, from dedicated traces (each job alone on its links).

    A job that appears in two traces is ambiguous and an error; a job with no
    iteration after ``skip`` has no dedicated time and is an error too.
    """
    out: dict[str, float] = {}
    for trace in traces:
        for job in trace.jobs:
            if job.name in out:
                raise SpecError(f"dedicated[{job.name!r}]", "the job is in two dedicated traces",
                                "give one dedicated trace per job")
            mean = iteration_stats(job, skip).mean
            if mean is None:
                raise SpecError("skip", f"leaves no iteration of dedicated job {job.name!r} "
                                f"({len(job.iterations)} recorded)",
                                "lower skip or record more dedicated iterations")
            out[job.name] = mean
    return out


# --------------------------------------------------------------------------- overlap


def sharing_jobs(trace: Trace, name: str) -> list[JobTrace]:
    """The other jobs that cross at least one of ``name``'s links, in trace order."""
    job = trace.job(name)
    index = next(j for j, other in enumerate(trace.jobs) if other is job)
    return [trace.jobs[k] for k in _sharing(trace)[index]]


def _sharing(trace: Trace) -> list[np.ndarray]:
    """Per job (trace order), the indices of the other jobs that share one of its links,
    in trace order, found through the jobs of each link (a thousand jobs compared
    pairwise are a million set intersections)."""
    on_link: dict[str, list[int]] = {}
    for j, job in enumerate(trace.jobs):
        for link in job.links:
            on_link.setdefault(link, []).append(j)
    out = []
    for j, job in enumerate(trace.jobs):
        others = {k for link in job.links for k in on_link[link]} - {j}
        out.append(np.array(sorted(others), dtype=np.int64))
    return out


def _intervals(job: JobTrace) -> tuple[np.ndarray, np.ndarray]:
    """A job's communication intervals (:meth:`JobTrace.comm_intervals`) as arrays."""
    spans = job.comm_intervals()
    return (np.fromiter((a for a, _ in spans), float, len(spans)),
            np.fromiter((b for _, b in spans), float, len(spans)))


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint sorted ones (starts, ends); empty ones vanish, and
    touching ones merge.  Sorted by start (then end), an interval opens a new merged one
    where it starts after every earlier one has ended; that one ends at the latest end
    among its members."""
    keep = ends > starts
    a, b = starts[keep], ends[keep]
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    if not a.size:
        return a, b
    reach = np.maximum.accumulate(b)
    first = np.flatnonzero(np.concatenate([[True], a[1:] > reach[:-1]]))
    last = np.concatenate([first[1:] - 1, [a.size - 1]])
    return a[first], reach[last]


def _covered_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Measure of (union of disjoint sorted intervals) intersected with (-inf, t], per t."""
    if starts.size == 0:
        return np.zeros_like(t)
    cum = np.concatenate([[0.0], np.cumsum(ends - starts)])
    j = np.searchsorted(ends, t, side="right")          # intervals wholly before t
    inside = np.minimum(j, starts.size - 1)
    partial = np.where(j < starts.size, np.maximum(0.0, t - starts[inside]), 0.0)
    return cum[j] + partial


def overlap(trace: Trace, name: str) -> list[float]:
    """Overlap of job ``name`` in each of its iterations (record order), in [0, 1]."""
    job = trace.job(name)
    others = sharing_jobs(trace, name)
    return _overlap(job, [_intervals(o) for o in others])


def _overlap(job: JobTrace, others: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[float]:
    """:func:`overlap` of ``job`` against the intervals of the jobs sharing its links."""
    if not job.iterations:
        return []
    others = _union(np.concatenate([s for s, _ in others] or [np.zeros(0)]),
                    np.concatenate([e for _, e in others] or [np.zeros(0)]))
    # Per communication phase (one per iteration unless it has several), then summed
    # per iteration: compute gaps between phases count neither way.
    owner = np.array([k for k, r in enumerate(job.iterations) for _ in r.comm_phases()])
    a = np.array([p[0] for r in job.iterations for p in r.comm_phases()], dtype=float)
    b = np.array([p[1] for r in job.iterations for p in r.comm_phases()], dtype=float)
    n = len(job.iterations)
    covered = np.bincount(owner, _covered_before(*others, b) - _covered_before(*others, a), n)
    length = np.bincount(owner, b - a, n)
    frac = np.divide(covered, length, out=np.zeros_like(length), where=length > 0)
    return [float(x) for x in np.clip(frac, 0.0, 1.0)]


def overlaps(trace: Trace) -> dict[str, list[float]]:
    """Job name -> its overlap per iteration (:func:`overlap` of every job, each job's
    intervals and neighbours found once)."""
    spans = [_intervals(job) for job in trace.jobs]
    return {job.name: _overlap(job, [spans[k] for k in near])
            for job, near in zip(trace.jobs, _sharing(trace), strict=True)}


# --------------------------------------------------------------------------- convergence


def overlap_last(overlaps: Sequence[float], n: int = DEFAULT_LAST) -> float | None:
    """Mean overlap over a job's last ``n`` iterations (its ``overlap`` list): how
    interleaved the job ended up, whether or not it converged.  None without any."""
    return float(np.mean(overlaps[-n:])) if len(overlaps) else None


def _spike(ok: Sequence[bool], i: int) -> bool:
    """Record i is above the threshold between two records at or under it."""
    return not ok[i] and 0 < i < len(ok) - 1 and ok[i - 1] and ok[i + 1]


def _window(indices: Sequence[int], ok: Sequence[bool], pos: int, k: int) -> bool:
    """Records pos .. pos+k-1 exist, have consecutive indices, start at or under the
    threshold, and are all at or under it but for at most one isolated spike."""
    if pos + k > len(ok) or not ok[pos]:
        return False
    spikes = 0
    for i in range(pos, pos + k):
        if i > pos and indices[i] != indices[i - 1] + 1:
            return False
        if not ok[i]:
            if not _spike(ok, i):
                return False
            spikes += 1
    return spikes <= 1


def _first_window(indices: Sequence[int], ok: Sequence[bool], k: int,
                  start: int = 0) -> int | None:
    return next((pos for pos in range(start, len(ok)) if _window(indices, ok, pos, k)), None)


def first_interleaved(indices: Sequence[int], values: Sequence[float],
                      threshold: float = DEFAULT_THRESHOLD, k: int = DEFAULT_K) -> int | None:
    """First index c with values <= threshold at indices c .. c+k-1, all present
    (one isolated spike tolerated); else None."""
    _check_threshold_k(threshold, k)
    _check_aligned(indices, values)
    ok = [v <= threshold for v in values]
    pos = _first_window(indices, ok, k)
    return None if pos is None else int(indices[pos])


def held_from(indices: Sequence[int], values: Sequence[float],
              threshold: float = DEFAULT_THRESHOLD, k: int = DEFAULT_K) -> int | None:
    """First index c from which values stay <= threshold to the end (isolated spikes,
    more than k records apart, tolerated), starting with a first-interleaved window of
    k: the convergence iteration (module docstring).  Never before
    :func:`first_interleaved`."""
    _check_threshold_k(threshold, k)
    _check_aligned(indices, values)
    ok = [v <= threshold for v in values]
    tail, next_spike = len(ok), len(ok) + k          # no spike after the end
    for pos in range(len(ok) - 1, -1, -1):        # from the end back, while it holds
        if not ok[pos]:
            if not (_spike(ok, pos) and next_spike - pos > k):
                break                              # a drift back, not an isolated spike
            next_spike = pos
        tail = pos
    pos = _first_window(indices, ok, k, tail)
    return None if pos is None else int(indices[pos])


def _check_aligned(indices: Sequence[int], values: Sequence[float]) -> None:
    if len(indices) != len(values):
        raise SpecError("values", f"{len(values)} values for {len(indices)} indices",
                        "give one overlap per iteration index")


def convergence_iteration(trace: Trace, name: str, threshold: float = DEFAULT_THRESHOLD,
                          k: int = DEFAULT_K) -> int | None:
    """The convergence iteration of job ``name``: interleaved from there to the end."""
    indices = [r.index for r in trace.job(name).iterations]
    return held_from(indices, overlap(trace, name), threshold, k)


def first_interleaved_iteration(trace: Trace, name: str,
                                threshold: float = DEFAULT_THRESHOLD,
                                k: int = DEFAULT_K) -> int | None:
    """When job ``name`` first stayed interleaved for k iterations (it may drift back)."""
    indices = [r.index for r in trace.job(name).iterations]
    return first_interleaved(indices, overlap(trace, name), threshold, k)


def _latest(per_job: Sequence[int | None]) -> int | None:
    return None if any(c is None for c in per_job) else max(c for c in per_job if c is not None)


def scenario_convergence(trace: Trace, threshold: float = DEFAULT_THRESHOLD,
                         k: int = DEFAULT_K) -> int | None:
    """Max over jobs of their convergence iteration; None if any job never converges."""
    return _latest([convergence_iteration(trace, j.name, threshold, k) for j in trace.jobs])


def scenario_first_interleaved(trace: Trace, threshold: float = DEFAULT_THRESHOLD,
                               k: int = DEFAULT_K) -> int | None:
    """Max over jobs of their first interleaved iteration; None if any job never did."""
    return _latest([first_interleaved_iteration(trace, j.name, threshold, k)
                    for j in trace.jobs])


# --------------------------------------------------------------------------- links


def utilisation(link: LinkTrace, t0: float, t1: float) -> float | None:
    """Mean throughput / capacity over samples with t0 <= t < t1; None if there are none."""
    lo, hi = np.searchsorted(link.times(), [t0, t1], side="left")
    if hi <= lo:
        return None
    return float(link.column("throughput_bps")[lo:hi].mean() / link.capacity_bps)


def run_utilisation(link: LinkTrace) -> float | None:
    """Mean throughput / capacity over all samples; None if the link has none."""
    if not link.samples:
        return None
    return float(np.mean(link.column("throughput_bps")) / link.capacity_bps)


def _bounds(job: JobTrace) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of the job's iterations, as arrays."""
    starts = np.array([r.start for r in job.iterations], dtype=float)
    ends = np.array([r.end for r in job.iterations], dtype=float)
    return starts, ends


def utilisation_per_iteration(link: LinkTrace, job: JobTrace) -> list[float | None]:
    """Utilisation over each of ``job``'s iteration windows [start, end): what
    :func:`utilisation` gives per window, computed for all windows at once (prefix
    sums), since a long run has tens of thousands of them."""
    starts, ends = _bounds(job)
    times = link.times()
    lo = np.searchsorted(times, starts, side="left")
    hi = np.searchsorted(times, ends, side="left")
    sums = np.concatenate([[0.0], np.cumsum(link.column("throughput_bps"))])
    count = hi - lo
    mean = np.divide(sums[hi] - sums[lo], count, out=np.zeros(count.shape), where=count > 0)
    return [float(m / link.capacity_bps) if c > 0 else None
            for m, c in zip(mean, count, strict=True)]


def counter_at(link: LinkTrace, counter: Counter, t: float) -> int | None:
    """Cumulative ``counter`` at t: last sample at or before t (first sample's before it)."""
    if not link.samples:
        return None
    return int(_counters_at(link, counter, np.asarray(t)))


def _counters_at(link: LinkTrace, counter: Counter, t: np.ndarray) -> np.ndarray:
    """Cumulative ``counter`` at each t (a link with samples): the last sample at or
    before it, the first sample's before the first."""
    last = np.searchsorted(link.times(), t, side="right") - 1
    return link.column(counter)[np.maximum(last, 0)]


def counter_delta(link: LinkTrace, counter: Counter, t0: float, t1: float) -> int | None:
    """Events of ``counter`` in [t0, t1): C(t1) - C(t0); None for a link without samples."""
    if counter not in ("ecn_marks", "drops"):
        raise SpecError("counter", f"{counter!r} is not a counter", "use 'ecn_marks' or 'drops'")
    c0, c1 = counter_at(link, counter, t0), counter_at(link, counter, t1)
    return None if c0 is None or c1 is None else c1 - c0


def run_counter(link: LinkTrace, counter: Counter) -> int | None:
    """Whole-run total of ``counter``: last minus first sample; None without samples."""
    if not link.samples:
        return None
    return getattr(link.samples[-1], counter) - getattr(link.samples[0], counter)


def _deltas_per_iteration(link: LinkTrace, job: JobTrace, counter: Counter) -> list[int | None]:
    """:func:`counter_delta` over each of ``job``'s iteration windows, all at once."""
    if not link.samples:
        return [None] * len(job.iterations)
    starts, ends = _bounds(job)
    return [int(d) for d in _counters_at(link, counter, ends)
            - _counters_at(link, counter, starts)]


def ecn_marks_per_iteration(link: LinkTrace, job: JobTrace) -> list[int | None]:
    """ECN marks on ``link`` in each of ``job``'s iteration windows."""
    return _deltas_per_iteration(link, job, "ecn_marks")


def drops_per_iteration(link: LinkTrace, job: JobTrace) -> list[int | None]:
    """Drops on ``link`` in each of ``job``'s iteration windows."""
    return _deltas_per_iteration(link, job, "drops")


def reference_job(trace: Trace, link_id: str) -> JobTrace | None:
    """The job whose iterations give a link's per-iteration windows: the first that crosses it."""
    return next((j for j in trace.jobs if link_id in j.links), None)


# --------------------------------------------------------------------------- fairness


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 for equal, 1/n for one hog of n."""
    x = np.array(list(values), dtype=float)
    if x.size == 0:
        raise SpecError("values", "empty", "give at least one throughput")
    if not np.all(np.isfinite(x)) or np.any(x < 0):
        raise SpecError("values", f"{x.tolist()} has a negative or non-finite value",
                        "give throughputs >= 0")
    squares = float(np.sum(x * x))
    if squares == 0:
        return 1.0
    return float(np.sum(x) ** 2 / (x.size * squares))


def comm_throughput_bps(job: JobTrace,
                        window: tuple[float, float] | None = None) -> float | None:
    """8 * sum(bytes) / sum(comm time) over iterations with comm_start in the window [t0, t1).

    None when those iterations spent no time communicating.
    """
    its = [r for r in job.iterations
           if window is None or window[0] <= r.comm_start < window[1]]
    comm = sum(r.comm_duration for r in its)
    return 8.0 * sum(r.bytes for r in its) / comm if comm > 0 else None


def trace_jain(trace: Trace, window: tuple[float, float] | None = None) -> float | None:
    """Jain index over the jobs' communication throughputs in the window (whole run if None)."""
    x = [v for v in (comm_throughput_bps(j, window) for j in trace.jobs) if v is not None]
    return jain(x) if x else None


def jain_per_iteration(trace: Trace) -> dict[int, float]:
    """Iteration index -> Jain index over the jobs' ``8 * bytes / comm time`` in that iteration.

    Only indices that every job has, each with a non-zero communication time, so
    that every value is over the same n jobs.
    """
    per_job = [{r.index: 8.0 * r.bytes / r.comm_duration
                for r in j.iterations if r.comm_duration > 0} for j in trace.jobs]
    common = set.intersection(*(set(d) for d in per_job))
    return {i: jain(d[i] for d in per_job) for i in sorted(common)}


# --------------------------------------------------------------------------- summary


def loss_counts(job: JobTrace) -> dict[str, int | None]:
    """The job's retransmitted segments and retransmission timeouts over the run;
    None where the backend did not record them (any iteration without the field)."""
    its = job.iterations
    out: dict[str, int | None] = {}
    for name in ("retransmits", "rtos"):
        values = [getattr(r, name) for r in its]
        out[name] = None if not its or None in values else int(sum(values))
    return out


def summarize(trace: Trace, dedicated: Mapping[str, float] | None = None,
              threshold: float = DEFAULT_THRESHOLD, k: int = DEFAULT_K,
              skip: int = DEFAULT_SKIP) -> dict:
    """Every metric of one trace as a JSON-serialisable dict (what reports store as report.json).

    Stable fields (times in seconds, throughputs in bits per second, None = not measured)::

        schema                  "mltcp.summary/1"
        scenario, scheme, backend, seed     copied from the trace
        settings                {threshold, k, skip}
        jobs: {name: {
            iterations            iterations recorded
            measured_iterations   iterations after skip (those mean/p50/p99 are over)
            mean, p50, p99        iteration time
            dedicated_mean        from ``dedicated`` (None if absent)
            ratio_to_dedicated    mean / dedicated_mean
            indices               iteration index of each record
            overlap               overlap per record (aligned with indices)
            convergence_iteration        interleaved from there to the end of the run
            first_interleaved_iteration  first k iterations in a row interleaved
            comm_throughput_bps   whole-run communication throughput
            retransmits, rtos     loss_counts (None where the backend did not record them)}}
        overall: {
            convergence_iteration       max over jobs (None if any is None)
            first_interleaved_iteration max over jobs (None if any is None)
            mean_ratio_to_dedicated     mean over jobs (None unless all have one)
            jain                        over the jobs' comm_throughput_bps
            utilisation: {link: whole-run utilisation}
            ecn_marks:   {link: whole-run marks}
            drops:       {link: whole-run drops}}
        links: {link: {
            capacity_bps
            reference_job               whose iteration windows the lists use
            utilisation_per_iteration, ecn_marks_per_iteration, drops_per_iteration}}
    """
    _check_skip(skip)
    _check_threshold_k(threshold, k)
    dedicated = dict(dedicated or {})
    jobs: dict[str, dict] = {}
    every_overlap = overlaps(trace)
    for job in trace.jobs:
        stats = iteration_stats(job, skip)
        ded = _check_dedicated(job.name, dedicated[job.name]) if job.name in dedicated else None
        ratio = None if ded is None or stats.mean is None else stats.mean / ded
        # Overlap once per job: both convergence measures read the same values.
        indices, job_overlap = [r.index for r in job.iterations], every_overlap[job.name]
        jobs[job.name] = {
            "iterations": len(job.iterations),
            "measured_iterations": stats.iterations,
            "mean": stats.mean, "p50": stats.p50, "p99": stats.p99,
            "dedicated_mean": ded,
            "ratio_to_dedicated": ratio,
            "indices": indices,
            "overlap": job_overlap,
            "convergence_iteration": held_from(indices, job_overlap, threshold, k),
            "first_interleaved_iteration": first_interleaved(indices, job_overlap, threshold,
                                                             k),
            "comm_throughput_bps": comm_throughput_bps(job),
            **loss_counts(job),
        }
    ratios = [j["ratio_to_dedicated"] for j in jobs.values()]
    links: dict[str, dict] = {}
    for link in trace.links:
        ref = reference_job(trace, link.id)
        links[link.id] = {
            "capacity_bps": link.capacity_bps,
            "reference_job": ref.name if ref else None,
            "utilisation_per_iteration": utilisation_per_iteration(link, ref) if ref else [],
            "ecn_marks_per_iteration": ecn_marks_per_iteration(link, ref) if ref else [],
            "drops_per_iteration": drops_per_iteration(link, ref) if ref else [],
        }
    return {
        "schema": SUMMARY_SCHEMA,
        "scenario": trace.scenario, "scheme": trace.scheme, "backend": trace.backend,
        "seed": trace.seed,
        "settings": {"threshold": threshold, "k": k, "skip": skip},
        "jobs": jobs,
        "overall": {
            "convergence_iteration": _latest([j["convergence_iteration"]
                                              for j in jobs.values()]),
            "first_interleaved_iteration": _latest([j["first_interleaved_iteration"]
                                                    for j in jobs.values()]),
            "mean_ratio_to_dedicated": (None if any(r is None for r in ratios)
                                        else float(np.mean(ratios))),
            "jain": trace_jain(trace),
            "utilisation": {ln.id: run_utilisation(ln) for ln in trace.links},
            "ecn_marks": {ln.id: run_counter(ln, "ecn_marks") for ln in trace.links},
            "drops": {ln.id: run_counter(ln, "drops") for ln in trace.links},
        },
        "links": links,
    }
