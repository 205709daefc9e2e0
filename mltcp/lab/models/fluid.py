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
  one shortest path of the scenario's network (:mod:`mltcp.lab.graph`; several
  shortest paths = ECMP, one picked per flow from the seed, like a flow hash).
* An iteration is one or more phases, each a compute (no traffic) followed by a
  communication that ends when *all* the job's flows have delivered their bytes
  (barrier).  The next phase, or the next iteration, starts then.
* Rates are weighted max-min fair (progressive filling) over every shaped link.
  A flow's weight is its job's connections x F: F == 1 for standard congestion
  control (max-min fair) and ``F(bytes_ratio)`` for MLTCP, where bytes_ratio is
  the flow's bytes sent in this iteration over its bytes per iteration (the
  kernel's per-job-per-host counter).
* Links carry TCP payload: capacity x MSS/frame (1448/1514 at 1500 B MTU), i.e. the goodput a
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

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.core.aggressiveness import f_array
from mltcp.core.errors import SpecError
from mltcp.lab.models.jobphases import JobPhases
from mltcp.lab.models.lanes import (
    Batch,
    Structure,
    build_batch,
    link_rates_bps,
    run_grouped,
    sample_intervals,
    structure_key,
)
from mltcp.lab.plan import RunPlan
from mltcp.lab.trace import IterationRecord, JobTrace, LinkSample, LinkTrace, Trace, provenance

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
        validate.integer(self.f_steps, "f_steps", 0, 1_000_000,
                         "0 (F frozen between phase events) or 32")
        validate.number(self.sample_s, "sample_s", 1e-6, 60, "0.01 (10 ms samples)")
        validate.at_least(self.max_steps, "max_steps", 1, "use e.g. 10000000")


# --------------------------------------------------------------------------- batch


@dataclass
class BatchResult:
    """Per lane, job and iteration: start, comm_start, comm_end, end (NaN: not run).

    ``phase_start``/``phase_end`` (L, J, N, P) hold every communication phase's
    interval; with one phase per iteration they repeat comm_start/comm_end.
    """

    start: np.ndarray             # (L, J, N)
    comm_start: np.ndarray
    comm_end: np.ndarray
    end: np.ndarray
    phase_start: np.ndarray       # (L, J, N, P)
    phase_end: np.ndarray
    steps: int = 0                # event steps the batch took
    link_times: list[np.ndarray] = field(default_factory=list)   # per step: (L,)
    link_bytes: list[np.ndarray] = field(default_factory=list)   # per step: (L, K) cumulative

    def iteration_times(self) -> np.ndarray:
        return self.end - self.start


class _Routing:
    """Which flows cross which links: one (F, K) matrix when every lane routes alike
    (one matrix product per use), else (L, F, K) per lane (ECMP picks differ by seed)."""

    def __init__(self, incidence: np.ndarray) -> None:
        self.shared = bool((incidence == incidence[:1]).all())
        self.matrix = incidence[0] if self.shared else incidence
        self.links = incidence.shape[2]

    def per_link(self, per_flow: np.ndarray) -> np.ndarray:
        """(L, F) -> (L, K): the sum over each link's flows."""
        if self.shared:
            return per_flow @ self.matrix
        return np.einsum("lf,lfk->lk", per_flow, self.matrix)

    def per_flow(self, per_link: np.ndarray) -> np.ndarray:
        """(L, K) -> (L, F): the sum over each flow's links."""
        if self.shared:
            return per_link @ self.matrix.T
        return np.einsum("lfk,lk->lf", self.matrix, per_link)


def _weighted_max_min(weight: np.ndarray, incidence: np.ndarray | _Routing,
                      capacity: np.ndarray) -> np.ndarray:
    """Rates (L, F) of weighted max-min fairness by progressive filling.

    All unfrozen flows grow in proportion to their weight until a link fills;
    the flows on it freeze; repeat.  A flow with weight 0 gets rate 0.
    """
    routing = incidence if isinstance(incidence, _Routing) else _Routing(incidence)
    rate = np.zeros_like(weight)
    active = weight > 0
    left = capacity.copy()
    full_tol = capacity * 1e-12
    for _ in range(routing.links + 1):
        w = np.where(active, weight, 0.0)
        demand = routing.per_link(w)                             # weight per link
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(demand > 0, left / demand, np.inf).min(axis=1)   # (L,)
        level = np.where(np.isfinite(level), level, 0.0)
        rate += w * level[:, None]
        left = np.maximum(left - demand * level[:, None], 0.0)
        full = (left <= full_tol) & (demand > 0)                     # (L, K)
        active &= ~(routing.per_flow(full.astype(float)) > 0)
        if not active.any():
            break
    return rate


class _Simulation(JobPhases):
    """The state of every lane, and the two things that change it: the flows move
    until the next event (:meth:`advance`), and jobs change phase (:meth:`settle`)."""

    def __init__(self, batch: Batch, opt: FluidOptions, record_links: bool) -> None:
        self.b, self.opt = batch, opt
        n_lanes, n_jobs = batch.lanes, len(batch.job_names)
        self.member = np.zeros((len(batch.flow_job), n_jobs))
        self.member[np.arange(len(batch.flow_job)), batch.flow_job] = 1.0
        n_iter = max(int(batch.iterations.max(initial=0)), 1)
        shape = (n_lanes, n_jobs, n_iter)
        self.result = BatchResult(
            *(np.full(shape, np.nan) for _ in range(4)),
            *(np.full((*shape, batch.phase_compute.shape[2]), np.nan) for _ in range(2)))
        self.t = np.zeros(n_lanes)
        self._init_phases(batch)
        self.rem = np.zeros_like(batch.flow_bytes)
        self.sent = np.zeros_like(batch.flow_bytes)
        self.tol = batch.flow_bytes * _REL_TOL + 1e-6
        self.mltcp = ((batch.slope != 0) | (batch.intercept != 1))[:, None]
        self.slope, self.intercept = batch.slope[:, None], batch.intercept[:, None]
        self.cap = batch.cap[:, None]
        self.inv_bytes = np.divide(1.0, batch.flow_bytes, out=np.zeros_like(batch.flow_bytes),
                                   where=batch.flow_bytes > 0)
        self.step_bytes = batch.flow_bytes / max(opt.f_steps, 1)
        self.inv_step = self.inv_bytes * max(opt.f_steps, 1)
        self.record_links = record_links
        self.routing = _Routing(batch.incidence)
        self.link_cum = np.zeros_like(batch.capacity)
        if record_links:
            self.result.link_times.append(self.t.copy())
            self.result.link_bytes.append(self.link_cum.copy())

    def _clock(self) -> np.ndarray:
        return self.t

    def _recorder(self) -> BatchResult:
        return self.result

    def _flows_of(self, jobs: np.ndarray) -> np.ndarray:
        """(L, F) mask of the flows of the jobs in the (L, J) mask."""
        return (jobs.astype(float) @ self.member.T) > 0

    def settle(self) -> None:
        """Apply every phase change due at the lanes' current times, until none is left
        (a phase without bytes or without compute ends at once)."""
        b, now = self.b, self.t[:, None]
        while True:
            busy_per_job = (self.rem > 0).astype(float) @ self.member          # (L, J)
            finished = self.communicating & (busy_per_job == 0)
            due = self.computing & (self.compute_end <= now + 1e-12 * (1 + np.abs(now)))
            if not (finished.any() or due.any()):
                return
            if finished.any():
                self._finish_phase(finished, now)
            if due.any():
                frac = self._begin_phases(b, due, now)
                self.rem = np.where(self._flows_of(due), b.flow_bytes * frac[:, b.flow_job],
                                    self.rem)

    def _finish_phase(self, finished: np.ndarray, now: np.ndarray) -> None:
        last = self._end_phases(self.b, finished, now)
        # A new iteration: bytes_ratio starts again from 0.
        self.sent = np.where(self._flows_of(last & self.running), 0.0, self.sent)

    def advance(self) -> bool:
        """Move every lane to its next event; False when no lane has one left."""
        b = self.b
        busy = self.rem > self.tol
        f = f_array(self.sent * self.inv_bytes, self.slope, self.intercept, self.cap)
        rate = _weighted_max_min(np.where(busy, f * b.weight, 0.0), self.routing, b.capacity)
        moving = busy & (rate > 0)
        inf = np.full_like(rate, np.inf)
        dt = np.minimum(np.divide(self.rem, rate, out=inf.copy(), where=moving).min(axis=1),
                        np.where(self.computing, self.compute_end - self.t[:, None],
                                 np.inf).min(axis=1))
        if self.opt.f_steps:
            # Time until each MLTCP flow's bytes_ratio reaches its next 1/f_steps mark.
            marks = (np.floor(self.sent * self.inv_step + 1e-9) + 1) * self.step_bytes
            dt = np.minimum(dt, np.divide(marks - self.sent, rate, out=inf,
                                          where=moving & self.mltcp).min(axis=1))
        live = np.isfinite(dt)
        if not live.any():
            if busy.any():
                raise SpecError("topology", "flows with bytes left get no capacity",
                                "give every link on the jobs' paths a rate > 0")
            return False
        dt = np.where(live, np.maximum(dt, 0.0), 0.0)
        moved = rate * dt[:, None]
        self.rem = np.where(moving, self.rem - moved, self.rem)
        self.rem = np.where(self.rem <= self.tol, 0.0, self.rem)
        self.sent = self.sent + np.where(moving, moved, 0.0)
        self.t = self.t + dt
        if self.record_links:
            self.link_cum = self.link_cum + self.routing.per_link(moved)
            self.result.link_times.append(self.t.copy())
            self.result.link_bytes.append(self.link_cum.copy())
        return True


def simulate(batch: Batch, options: FluidOptions | None = None,
             record_links: bool = False,
             progress: Callable[[float], None] | None = None) -> BatchResult:
    """Run every lane of ``batch`` to the end of its jobs' iterations."""
    opt = options or FluidOptions()
    batch.check()
    sim = _Simulation(batch, opt, record_links)
    for step in range(opt.max_steps):
        sim.settle()
        if not sim.advance():
            sim.result.steps = step
            return sim.result
        if progress is not None and step % 2000 == 0:
            progress(float(sim.t.min()))
    raise SpecError("max_steps", f"the model did not finish within {opt.max_steps} events",
                    "raise FluidOptions.max_steps or run fewer iterations")


# --------------------------------------------------------------------------- plans


def _link_samples(times: np.ndarray, cum: np.ndarray, sample_s: float,
                  efficiency: float) -> list[LinkSample]:
    """Periodic samples from the cumulative payload bytes at event times (the link's
    throughput counts frames, like a queue's byte counter: payload / efficiency)."""
    grid, sent = sample_intervals(times, cum, sample_s)
    bps = sent * 8 / sample_s / efficiency
    return [LinkSample(t=float(g), throughput_bps=float(max(b, 0.0)), queue_bytes=0,
                       ecn_marks=0, drops=0) for g, b in zip(grid, bps, strict=True)]


def to_traces(plans: Sequence[RunPlan], batch: Batch, result: BatchResult,
              options: FluidOptions | None = None) -> list[Trace]:
    """One common trace per lane (link samples only where links were recorded)."""
    opt = options or FluidOptions()
    traces = []
    base = provenance({"fluid": {"f_steps": opt.f_steps}})  # once: it runs git
    for lane, plan in enumerate(plans):
        jobs = []
        for j, job in enumerate(plan.jobs):
            if batch.iterations[lane, j] == 0:
                continue
            recs = []
            n_phases = len(job.spec.phase_list())
            for k in range(int(batch.iterations[lane, j])):
                vals = [result.start[lane, j, k], result.comm_start[lane, j, k],
                        result.comm_end[lane, j, k], result.end[lane, j, k]]
                phases = None
                if n_phases > 1:
                    phases = tuple((float(a), float(e)) for a, e in zip(
                        result.phase_start[lane, j, k, :n_phases],
                        result.phase_end[lane, j, k, :n_phases], strict=True))
                recs.append(IterationRecord(k, *map(float, vals),
                                            bytes=int(job.comm_bytes_per_worker
                                                      * job.spec.workers), phases=phases))
            jobs.append(JobTrace(name=job.name, links=job.links, iterations=tuple(recs)))
        links = ()
        if result.link_times:
            times = np.array([x[lane] for x in result.link_times])
            cum = np.array([x[lane] for x in result.link_bytes])
            rates = link_rates_bps(plan)
            links = tuple(LinkTrace(id=lid, capacity_bps=rates[lid.split(":", 1)[0]],
                                    samples=tuple(_link_samples(
                                        times, cum[:, k], opt.sample_s,
                                        plan.topology.payload_efficiency)))
                          for k, lid in enumerate(batch.link_ids))
        traces.append(Trace(
            scenario=plan.scenario.name, scheme=plan.scheme.name, backend="fluid",
            seed=plan.seed, jobs=tuple(jobs), links=links,
            provenance={**base, "topology": plan.topology.to_dict(),
                        "payload_efficiency": plan.topology.payload_efficiency},
            params=plan.trace_params()))
    return traces


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


def run_many(plans: Sequence[RunPlan], options: FluidOptions | None = None,
             record_links: bool = True,
             progress: Callable[[float], None] | None = None) -> list[Trace]:
    """Traces of ``plans`` in their order; plans of one structure advance as lanes of
    one batch (one numpy step moves all of them), so N seeds cost about one run."""
    def run_group(group: list[RunPlan], structs: list[Structure]) -> list[Trace]:
        batch, _ = build_batch(group, structs)
        result = simulate(batch, options, record_links=record_links, progress=progress)
        return to_traces(group, batch, result, options)

    return run_grouped(plans, structure_key, run_group)
