"""The fluid backend: training jobs as flows sharing links, rates by weighted max-min.

Why a fluid model next to real kernel TCP: it runs a scenario thousands of times
faster, so it can explore MLTCP's parameters (slope, intercept, loads, many jobs)
where the testbed can run a handful of seeds; and it is the model the MLTCP
analysis reasons in, so it tells whether a testbed result is TCP's doing or the
scheme's.

Model
-----
* Every job is a ring over its workers (as on the testbed): worker i sends its
  per-iteration bytes (``ScenarioJob.comm_bytes_per_worker``) to worker i+1 over
  one shortest path of the scenario's network (:mod:`mltcp.graph`; several
  shortest paths = ECMP, one picked per flow from the seed, like a flow hash).
* An iteration is one or more phases, each a compute (no traffic) followed by a
  communication that ends when *all* the job's flows have delivered their bytes
  (barrier).  The next phase, or the next iteration, starts then.
* Rates are weighted max-min fair (progressive filling) over every shaped link.
  A flow's weight is its job's connections x F: F == 1 for standard congestion
  control (max-min fair) and ``F(bytes_ratio)`` for MLTCP, where bytes_ratio is
  the flow's bytes sent in this iteration over its bytes per iteration (the
  kernel's per-job-per-host counter).
* Links carry TCP payload: capacity x MSS/frame (1448/1514), i.e. the goodput a
  kernel flow reaches; link samples in the trace count wire bits again.
* It is event-driven: time jumps from one event to the next (a compute phase
  ends, a flow finishes, or, for MLTCP, a flow's bytes_ratio crosses the next
  multiple of 1/``f_steps``, where its F is re-evaluated).  ``f_steps=0`` freezes
  F between phase events, which is exactly the assumption of the HotNets'24
  analysis (see :func:`hotnets_shift`); the default of 8 steps approximates
  the per-ACK F of the kernel modules (on the example scenarios 0 to 128 steps
  give the same convergence iteration; each step costs events).
* Many independent runs of one structure (same jobs and links; different
  parameters, seeds or start offsets) advance together as *lanes* of one set of
  numpy arrays: each step moves every lane to its own next event.  That is what
  makes sweeps fast; a single run is a batch of one lane.

What it leaves out, on purpose: slow start, losses, queues and RTTs.  Queue and
ECN/drop columns of its link samples are 0.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.errors import SpecError
from mltcp.graph import NetworkGraph, directed_id, graph_for, ring_link_ids
from mltcp.scenario import Scenario, Scheme, placement, start_offsets_ms
from mltcp.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace, provenance

MSS_BYTES = 1448
FRAME_BYTES = 1514
PAYLOAD_EFFICIENCY = MSS_BYTES / FRAME_BYTES   # a 1 Gbit/s link carries ~957 Mbit/s of payload
DEFAULT_F_STEPS = 8
DEFAULT_SAMPLE_S = 0.01
_REL_TOL = 1e-9


@dataclass(frozen=True)
class FluidOptions:
    """How finely the model resolves F and samples links.

    ``f_steps``: F is re-evaluated each time a flow's bytes_ratio crosses a multiple
    of 1/f_steps (0: only at phase events, the HotNets'24 assumption).
    ``sample_s``: period of the link samples written to the trace.
    ``max_steps``: a safety stop; a run that needs more events is an error.
    """

    f_steps: int = DEFAULT_F_STEPS
    sample_s: float = DEFAULT_SAMPLE_S
    max_steps: int = 10_000_000

    def __post_init__(self) -> None:
        if isinstance(self.f_steps, bool) or not isinstance(self.f_steps, int) \
                or not 0 <= self.f_steps <= 1_000_000:
            raise SpecError("f_steps", f"{self.f_steps!r} is not an integer in 0..1000000",
                            "use 0 (F frozen between phase events) or e.g. 32")
        if not (isinstance(self.sample_s, int | float) and 1e-6 <= self.sample_s <= 60):
            raise SpecError("sample_s", f"{self.sample_s!r} is not in 1e-6..60 s",
                            "use e.g. 0.01 (10 ms samples)")


# --------------------------------------------------------------------------- batch


@dataclass
class Batch:
    """Lanes of runs that share one structure: J jobs, F flows, K links, P phases.

    Per-lane arrays have the lane as their first axis (L).  Times in seconds,
    sizes in bytes, capacities in payload bytes per second.
    """

    job_names: list[str]
    link_ids: list[str]
    flow_job: np.ndarray          # (F,) job index of each flow
    incidence: np.ndarray         # (L, F, K) 1.0 where the flow crosses the link
    capacity: np.ndarray          # (L, K)
    flow_bytes: np.ndarray        # (L, F) bytes per iteration
    phase_fraction: np.ndarray    # (L, J, P) share of the iteration's bytes per phase
    phase_compute: np.ndarray     # (L, J, P) compute seconds before each phase's communication
    weight: np.ndarray            # (L, F) connections (F multiplies this)
    slope: np.ndarray             # (L,)
    intercept: np.ndarray         # (L,)
    cap: np.ndarray               # (L,) inf = no cap
    iterations: np.ndarray        # (L, J) int; 0 = the job does not run in this lane
    start: np.ndarray             # (L, J) first iteration's start

    @property
    def lanes(self) -> int:
        return self.capacity.shape[0]

    def check(self) -> None:
        """Shapes agree (a mismatch would broadcast silently into nonsense)."""
        n_lanes, n_jobs, n_flows = self.lanes, len(self.job_names), len(self.flow_job)
        n_links = len(self.link_ids)
        n_phases = self.phase_compute.shape[2]
        want = {"incidence": (n_lanes, n_flows, n_links), "capacity": (n_lanes, n_links),
                "flow_bytes": (n_lanes, n_flows),
                "phase_fraction": (n_lanes, n_jobs, n_phases),
                "phase_compute": (n_lanes, n_jobs, n_phases), "weight": (n_lanes, n_flows),
                "slope": (n_lanes,), "intercept": (n_lanes,), "cap": (n_lanes,),
                "iterations": (n_lanes, n_jobs), "start": (n_lanes, n_jobs)}
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise SpecError(f"batch.{name}", f"shape {getattr(self, name).shape}",
                                f"give shape {shape}")


@dataclass
class BatchResult:
    """Per lane, job and iteration: start, comm_start, comm_end, end (NaN: not run)."""

    start: np.ndarray             # (L, J, N)
    comm_start: np.ndarray
    comm_end: np.ndarray
    end: np.ndarray
    steps: int                    # event steps the batch took
    link_times: list[np.ndarray] = field(default_factory=list)   # per step: (L,)
    link_bytes: list[np.ndarray] = field(default_factory=list)   # per step: (L, K) cumulative

    def iteration_times(self) -> np.ndarray:
        return self.end - self.start


def _weighted_max_min(weight: np.ndarray, incidence: np.ndarray,
                      capacity: np.ndarray) -> np.ndarray:
    """Rates (L, F) of weighted max-min fairness by progressive filling.

    All unfrozen flows grow in proportion to their weight until a link fills;
    the flows on it freeze; repeat.  A flow with weight 0 gets rate 0.
    """
    rate = np.zeros_like(weight)
    active = weight > 0
    left = capacity.copy()
    full_tol = capacity * 1e-12
    for _ in range(incidence.shape[2] + 1):
        w = np.where(active, weight, 0.0)
        demand = np.einsum("lf,lfk->lk", w, incidence)          # weight per link
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(demand > 0, left / demand, np.inf).min(axis=1)   # (L,)
        level = np.where(np.isfinite(level), level, 0.0)
        rate += w * level[:, None]
        left = np.maximum(left - demand * level[:, None], 0.0)
        full = (left <= full_tol) & (demand > 0)                     # (L, K)
        active &= ~(np.einsum("lfk,lk->lf", incidence, full.astype(float)) > 0)
        if not active.any():
            break
    return rate


def simulate(batch: Batch, options: FluidOptions | None = None,
             record_links: bool = False,
             progress: Callable[[float], None] | None = None) -> BatchResult:
    """Run every lane of ``batch`` to the end of its jobs' iterations."""
    opt = options or FluidOptions()
    batch.check()
    n_lanes, n_jobs = batch.lanes, len(batch.job_names)
    n_phases = batch.phase_compute.shape[2]
    member = np.zeros((len(batch.flow_job), n_jobs))
    member[np.arange(len(batch.flow_job)), batch.flow_job] = 1.0
    n_iter = int(batch.iterations.max(initial=0))
    shape = (n_lanes, n_jobs, max(n_iter, 1))
    rec = {k: np.full(shape, np.nan) for k in ("start", "comm_start", "comm_end", "end")}
    lane_idx = np.arange(n_lanes)[:, None].repeat(n_jobs, axis=1)
    job_idx = np.arange(n_jobs)[None, :].repeat(n_lanes, axis=0)

    t = np.zeros(n_lanes)
    running = batch.iterations > 0                       # (L, J) job still has iterations
    it = np.zeros((n_lanes, n_jobs), dtype=int)
    phase = np.zeros((n_lanes, n_jobs), dtype=int)
    computing = running.copy()
    compute_end = np.where(running, batch.start + batch.phase_compute[:, :, 0], np.inf)
    rec["start"][lane_idx[running], job_idx[running], 0] = batch.start[running]
    communicating = np.zeros((n_lanes, n_jobs), dtype=bool)
    rem = np.zeros_like(batch.flow_bytes)
    sent = np.zeros_like(batch.flow_bytes)
    tol = batch.flow_bytes * _REL_TOL + 1e-6
    link_cum = np.zeros_like(batch.capacity)
    mltcp = (batch.slope != 0) | (batch.intercept != 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        step_bytes = np.where(batch.flow_bytes > 0, batch.flow_bytes / max(opt.f_steps, 1), 0)
    result = BatchResult(steps=0, **rec)
    if record_links:
        result.link_times.append(t.copy())
        result.link_bytes.append(link_cum.copy())

    for step in range(opt.max_steps):
        busy = rem > tol
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.clip(np.where(batch.flow_bytes > 0, sent / batch.flow_bytes, 0.0), 0, 1)
        f = np.minimum(batch.intercept[:, None] + batch.slope[:, None] * ratio,
                       batch.cap[:, None])
        weight = np.where(busy, f * batch.weight, 0.0)
        rate = _weighted_max_min(weight, batch.incidence, batch.capacity)
        moving = busy & (rate > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            dt_flow = np.where(moving, rem / rate, np.inf).min(axis=1)
            dt = np.minimum(dt_flow, np.where(computing, compute_end - t[:, None],
                                              np.inf).min(axis=1))
            if opt.f_steps:
                marks = (np.floor(sent / np.where(step_bytes > 0, step_bytes, 1) + 1e-9) + 1) \
                    * step_bytes
                dt_f = np.where(moving & mltcp[:, None], (marks - sent) / rate, np.inf)
                dt = np.minimum(dt, dt_f.min(axis=1))
        live = np.isfinite(dt)
        if not live.any():
            break
        if (busy & ~moving).any() and not moving.any() and not computing.any():
            raise SpecError("topology", "flows with bytes left get no capacity",
                            "give every link on the jobs' paths a rate > 0")
        dt = np.where(live, np.maximum(dt, 0.0), 0.0)
        moved = rate * dt[:, None]
        rem = np.where(moving, rem - moved, rem)
        sent = sent + np.where(moving, moved, 0.0)
        t = t + dt
        if record_links:
            link_cum = link_cum + np.einsum("lf,lfk->lk", moved, batch.incidence)
            result.link_times.append(t.copy())
            result.link_bytes.append(link_cum.copy())
        rem = np.where(rem <= tol, 0.0, rem)

        # Communication phases that completed on every flow of their job.
        busy_per_job = (rem > 0).astype(float) @ member                      # (L, J)
        finished = communicating & (busy_per_job == 0)
        if finished.any():
            communicating &= ~finished
            last = finished & (phase == n_phases - 1)
            li, ji = lane_idx[last], job_idx[last]
            rec["comm_end"][li, ji, it[last]] = t[li]
            rec["end"][li, ji, it[last]] = t[li]
            it = it + last
            over = last & (it >= batch.iterations)
            running &= ~over
            nxt = finished & running                    # next phase, or next iteration
            phase = np.where(last, 0, np.where(finished, phase + 1, phase))
            li, ji = lane_idx[nxt & last], job_idx[nxt & last]
            rec["start"][li, ji, it[nxt & last]] = t[li]
            new_iter_flows = ((last & running).astype(float) @ member.T) > 0  # (L, F)
            sent = np.where(new_iter_flows, 0.0, sent)
            comp = np.take_along_axis(batch.phase_compute, phase[:, :, None], axis=2)[:, :, 0]
            compute_end = np.where(nxt, t[:, None] + comp, compute_end)
            computing |= nxt

        # Compute phases that ended: start communicating.
        done = computing & (compute_end <= t[:, None] + 1e-12 * (1 + np.abs(t[:, None])))
        if done.any():
            computing &= ~done
            communicating |= done
            first = done & (phase == 0)
            li, ji = lane_idx[first], job_idx[first]
            rec["comm_start"][li, ji, it[first]] = t[li]
            frac = np.take_along_axis(batch.phase_fraction, phase[:, :, None], axis=2)[:, :, 0]
            flow_frac = frac[:, batch.flow_job]                                 # (L, F)
            starting = (done.astype(float) @ member.T) > 0
            rem = np.where(starting, batch.flow_bytes * flow_frac, rem)
            # A phase without bytes ends at once (next step sees no busy flow).
        result.steps = step + 1
        if progress is not None and step % 2000 == 0:
            progress(float(t.min()))
    else:
        raise SpecError("max_steps", f"the model did not finish within {opt.max_steps} events",
                        "raise FluidOptions.max_steps or run fewer iterations")
    return result


# --------------------------------------------------------------------------- scenarios


def _flow_rng(seed: int, job: str, worker: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}/{job}/{worker}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True)
class _Structure:
    """What one scenario contributes to a batch lane, before stacking."""

    graph: NetworkGraph
    link_ids: list[str]
    flow_job: list[int]
    flow_links: list[list[int]]
    flow_bytes: list[float]
    weight: list[float]
    job_links: dict[str, list[str]]


def _structure(scenario: Scenario, seed: int) -> _Structure:
    graph = graph_for(scenario.topology)
    link_ids = [directed_id(link, a, b) for link in graph.links if link.rate_mbit
                for a, b in ((link.a, link.b), (link.b, link.a))]
    index = {lid: k for k, lid in enumerate(link_ids)}
    places = placement(scenario)
    flow_job, flow_links, flow_bytes, weight, job_links = [], [], [], [], {}
    for j, job in enumerate(scenario.jobs):
        hosts = places[job.name]
        job_links[job.name] = ring_link_ids(graph, hosts)
        for i, src in enumerate(hosts):
            rng = _flow_rng(seed, job.name, i)
            hops = graph.path(src, hosts[(i + 1) % len(hosts)],
                              choose=lambda options, rng=rng: rng.randrange(len(options)))
            flow_job.append(j)
            flow_links.append([index[directed_id(link, a, b)] for a, b, link in hops
                               if link.rate_mbit])
            flow_bytes.append(float(job.comm_bytes_per_worker()))
            weight.append(float(job.connections))
    return _Structure(graph, link_ids, flow_job, flow_links, flow_bytes, weight, job_links)


def _capacities(graph: NetworkGraph, link_ids: Sequence[str]) -> np.ndarray:
    rate = {link.id: link.rate_mbit for link in graph.links}
    return np.array([rate[lid.split(":", 1)[0]] * 1e6 / 8 * PAYLOAD_EFFICIENCY
                     for lid in link_ids])


@dataclass(frozen=True)
class Run:
    """One lane: the scenario, the scheme, the seed, and optionally one job alone
    (the dedicated baseline) or extra start shifts (a centralized schedule)."""

    scenario: Scenario
    scheme: Scheme
    seed: int
    only_job: str | None = None
    shifts_ms: tuple[tuple[str, float], ...] = ()


def build_batch(runs: Sequence[Run]) -> tuple[Batch, list[_Structure]]:
    """Stack runs of one structure (same jobs, links and phase count) into lanes."""
    if not runs:
        raise SpecError("runs", "empty", "give at least one run")
    structs = [_structure(r.scenario, r.seed) for r in runs]
    first = structs[0]
    names = [j.name for j in runs[0].scenario.jobs]
    for r, s in zip(runs, structs, strict=True):
        if [j.name for j in r.scenario.jobs] != names or s.link_ids != first.link_ids \
                or s.flow_job != first.flow_job:
            raise SpecError("runs", f"{r.scenario.name} has another structure than "
                            f"{runs[0].scenario.name}", "batch only runs with the same jobs "
                            "and topology (use run_many, which groups them)")
    n_lanes, n_flows, n_links = len(runs), len(first.flow_job), len(first.link_ids)
    incidence = np.zeros((n_lanes, n_flows, n_links))
    for lane, s in enumerate(structs):
        for f, links in enumerate(s.flow_links):
            incidence[lane, f, links] = 1.0
    phase_compute = np.array([[[j.compute_ms / 1000] for j in r.scenario.jobs] for r in runs])
    iterations = np.array([[j.iterations if r.only_job in (None, j.name) else 0
                            for j in r.scenario.jobs] for r in runs], dtype=int)
    start = np.array([[start_offsets_ms(r.scenario, r.seed)[j.name] / 1000
                       + dict(r.shifts_ms).get(j.name, 0.0) / 1000
                       for j in r.scenario.jobs] for r in runs])
    aggs = [r.scheme.aggressiveness for r in runs]
    batch = Batch(
        job_names=names, link_ids=first.link_ids, flow_job=np.array(first.flow_job),
        incidence=incidence,
        capacity=np.stack([_capacities(s.graph, s.link_ids) for s in structs]),
        flow_bytes=np.array([s.flow_bytes for s in structs]),
        phase_fraction=np.ones((n_lanes, len(names), 1)),
        phase_compute=phase_compute,
        weight=np.array([s.weight for s in structs]),
        slope=np.array([a.slope for a in aggs], dtype=float),
        intercept=np.array([a.intercept for a in aggs], dtype=float),
        cap=np.array([a.cap if a.cap is not None else np.inf for a in aggs], dtype=float),
        iterations=iterations, start=start)
    return batch, structs


def _link_samples(times: np.ndarray, cum: np.ndarray, sample_s: float) -> list[LinkSample]:
    """Periodic samples from the cumulative payload bytes at event times."""
    end = float(times[-1]) if len(times) else 0.0
    grid = np.arange(sample_s, end + sample_s / 2, sample_s)
    if len(grid) == 0:
        return []
    at = np.interp(grid, times, cum)
    prev = np.concatenate([[0.0], at[:-1]])
    bps = (at - prev) * 8 / sample_s / PAYLOAD_EFFICIENCY
    return [LinkSample(t=float(g), throughput_bps=float(max(b, 0.0)), queue_bytes=0,
                       ecn_marks=0, drops=0) for g, b in zip(grid, bps, strict=True)]


def to_traces(runs: Sequence[Run], batch: Batch, structs: Sequence[_Structure],
              result: BatchResult, options: FluidOptions | None = None) -> list[Trace]:
    """One common trace per lane (link samples only where links were recorded)."""
    opt = options or FluidOptions()
    traces = []
    base = provenance({"fluid": {"f_steps": opt.f_steps,
                                 "payload_efficiency": PAYLOAD_EFFICIENCY}})  # once: runs git
    for lane, (run, s) in enumerate(zip(runs, structs, strict=True)):
        jobs = []
        for j, job in enumerate(run.scenario.jobs):
            if batch.iterations[lane, j] == 0:
                continue
            recs = []
            for k in range(int(batch.iterations[lane, j])):
                vals = [result.start[lane, j, k], result.comm_start[lane, j, k],
                        result.comm_end[lane, j, k], result.end[lane, j, k]]
                recs.append(IterationRecord(k, *map(float, vals),
                                            bytes=int(job.comm_bytes_per_worker()
                                                      * job.workers)))
            jobs.append(JobTrace(name=job.name, links=tuple(s.job_links[job.name]),
                                 iterations=tuple(recs)))
        links = ()
        if result.link_times:
            times = np.array([x[lane] for x in result.link_times])
            cum = np.array([x[lane] for x in result.link_bytes])
            caps = {lk.id: lk.rate_mbit for lk in s.graph.links}
            links = tuple(LinkTrace(id=lid, capacity_bps=caps[lid.split(":", 1)[0]] * 1e6,
                                    samples=tuple(_link_samples(times, cum[:, k],
                                                                opt.sample_s)))
                          for k, lid in enumerate(s.link_ids))
        traces.append(Trace(
            scenario=run.scenario.name, scheme=run.scheme.name, backend="fluid",
            seed=run.seed, jobs=tuple(jobs), links=links,
            provenance={**base, "topology": run.scenario.topology.to_dict()},
            params={**run.scheme.to_dict(), "only_job": run.only_job,
                    **({"shifts_ms": dict(run.shifts_ms)} if run.shifts_ms else {})}))
    return traces


def run_once(scenario: Scenario, scheme: Scheme, seed: int, only_job: str | None = None,
             options: FluidOptions | None = None, shifts_ms: dict[str, float] | None = None
             ) -> Trace:
    """One run on the fluid model, as one common trace (with link samples)."""
    run = Run(scenario, scheme, seed, only_job, tuple(sorted((shifts_ms or {}).items())))
    return run_many([run], options)[0]


def hotnets_shift(delta: float, a_t: float, slope: float, intercept: float) -> float:
    """The HotNets'24 MLTCP analysis: the next gap between two identical jobs'
    communication starts, Δ(i+1) = Δ + S·Δ·(aT − Δ) / (aT·I + Δ·S), for 0 <= Δ <= aT.

    Derivation, for the record: job 1 alone for Δ has bytes_ratio Δ/aT; during the
    overlap the jobs share in proportion to F frozen at its start, I + S·Δ/aT
    against I; job 1 then ends at Δ + (aT − Δ)(1 + I/F1) and job 2 at 2aT (the link
    never idles), and both compute for the same time before the next phase.
    """
    if not 0 <= delta <= a_t:
        raise SpecError("delta", f"{delta} is outside 0..aT={a_t}",
                        "the formula holds while the phases overlap (0 <= Δ <= aT)")
    return delta + slope * delta * (a_t - delta) / (a_t * intercept + delta * slope)


def _structure_key(run: Run) -> tuple:
    s = _structure(run.scenario, run.seed)
    return (tuple(j.name for j in run.scenario.jobs), tuple(s.link_ids), tuple(s.flow_job))


def run_many(runs: Sequence[Run], options: FluidOptions | None = None,
             record_links: bool = True,
             progress: Callable[[float], None] | None = None) -> list[Trace]:
    """Traces of ``runs`` in their order; runs of one structure advance as lanes of
    one batch (one numpy step moves all of them), so N seeds cost about one run."""
    groups: dict[tuple, list[int]] = {}
    for i, run in enumerate(runs):
        groups.setdefault(_structure_key(run), []).append(i)
    out: list[Trace | None] = [None] * len(runs)
    for indices in groups.values():
        group = [runs[i] for i in indices]
        batch, structs = build_batch(group)
        result = simulate(batch, options, record_links=record_links, progress=progress)
        for i, trace in zip(indices, to_traces(group, batch, structs, result, options),
                            strict=True):
            out[i] = trace
    return [t for t in out if t is not None]
