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
  one shortest path of the scenario's network (:mod:`mltcp.lab.scenario.graph`; several
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
  give the same convergence iteration; each step costs events).  An event
  recomputes the rates only of the flows it can change, and F of those flows
  (:mod:`mltcp.lab.models.fluid_engine`, compiled: what lets one run hold a
  cluster's thousand jobs).
* Many independent runs of one structure (same jobs and links; different
  parameters, seeds or start offsets) form a batch of *lanes*, one engine state
  each, advanced together in slices of simulated time, so progress reports the
  time every lane has reached.  A lane holds its flows' paths as lists (the engine's
  sparse incidence) and samples only the links the scenario records
  (``record_links``): a cluster-size scenario costs what the cluster simulator's runs
  cost, with samples of the fabric's links (``bench/bench_fluid_scale.py``).

What it leaves out, on purpose: slow start, losses, queues and RTTs.  Queue and
ECN/drop columns of its link samples are 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.common.provenance import provenance
from mltcp.lab.models import fluid_engine
from mltcp.lab.scenario import footprint
from mltcp.lab.scenario.batched.lanes import (
    Batch,
    Structure,
    build_batch,
    link_rates_bps,
    run_grouped,
    sample_grid,
    structure_key,
)
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import IterationRecord, JobTrace, LinkTrace, Trace

DEFAULT_F_STEPS = 8
DEFAULT_SAMPLE_S = 0.01


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
    ``link_bins``: per lane, the recorded links' (the scenario's ``record_links``,
    ``Batch.record``) payload bytes per ``sample_s`` interval (R, B), where links were
    recorded; ``link_end``: the lane's last event time.
    """

    start: np.ndarray             # (L, J, N)
    comm_start: np.ndarray
    comm_end: np.ndarray
    end: np.ndarray
    phase_start: np.ndarray       # (L, J, N, P)
    phase_end: np.ndarray
    steps: int = 0                # events, all lanes together
    link_bins: list[np.ndarray] = field(default_factory=list)
    link_end: list[float] = field(default_factory=list)

    def iteration_times(self) -> np.ndarray:
        return self.end - self.start


def lane_state(batch: Batch, lane: int, opt: FluidOptions,
               record_links: bool) -> fluid_engine.EngineState:
    """The engine's state for one lane of ``batch`` at time 0."""
    flow_links = [list(links) for links in batch.flow_links[lane]]
    jitter = (batch.jitter[lane] if batch.jitter is not None
              else np.zeros((len(batch.job_names), 1)))
    return fluid_engine.new_state(
        batch.flow_job, flow_links, batch.capacity[lane], batch.flow_bytes[lane],
        batch.weight[lane], batch.phase_fraction[lane], batch.phase_compute[lane],
        batch.iterations[lane], batch.start[lane], jitter, float(batch.slope[lane]),
        float(batch.intercept[lane]), float(batch.cap[lane]), opt.f_steps,
        opt.sample_s if record_links and len(batch.record) else 0.0,
        n_iter=int(batch.iterations.max(initial=0)), sampled=batch.record)


def simulate(batch: Batch, options: FluidOptions | None = None,
             record_links: bool = False,
             progress: Callable[[float], None] | None = None) -> BatchResult:
    """Run every lane of ``batch`` to the end of its jobs' iterations.

    Lanes are independent runs; they advance together in slices of simulated time
    (each slice twice the last while a round takes under half a second), so
    ``progress`` hears the simulated time every lane has reached."""
    opt = options or FluidOptions()
    batch.check()
    states = [lane_state(batch, lane, opt, record_links) for lane in range(batch.lanes)]
    live = list(range(batch.lanes))
    until, span, events = 0.0, 1.0, 0
    while live:
        until += span
        began = time.monotonic()
        for lane in list(live):
            st = states[lane]
            before = st.events
            status = fluid_engine.advance_until(st, until,
                                                before + max(opt.max_steps - events, 0))
            events += st.events - before
            if status == fluid_engine.TOO_MANY_EVENTS:
                raise SpecError("max_steps",
                                f"the model did not finish within {opt.max_steps} events",
                                "raise FluidOptions.max_steps or run fewer iterations")
            if status == fluid_engine.STUCK:
                raise SpecError("topology", "flows with bytes left get no capacity",
                                "give every link on the jobs' paths a rate > 0")
            if status == fluid_engine.DONE:
                live.remove(lane)
        if record_links:
            _check_samples(states, len(batch.record), opt.sample_s)
        if progress is not None and live:
            progress(until)
        if time.monotonic() - began < 0.5:
            span *= 2

    def stack(name: str) -> np.ndarray:
        return np.stack([getattr(st, name) for st in states])

    result = BatchResult(stack("start"), stack("comm_start"), stack("comm_end"),
                         stack("end"), stack("phase_start"), stack("phase_end"),
                         steps=events)
    if record_links:
        result.link_bins = [fluid_engine.finish_bins(st) for st in states]
        result.link_end = [st.t for st in states]
    return result


def _check_samples(states: Sequence[fluid_engine.EngineState], links: int,
                   sample_s: float) -> None:
    """Each lane's link samples so far within the memory budget: a run was admitted on a
    lower bound of its length (:mod:`mltcp.lab.scenario.footprint`), and one that
    contention draws out far beyond it stops here, before its trace is built."""
    t = max(st.t for st in states)
    samples = int(t / sample_s) * links
    validate.within_memory(
        samples * footprint.SAMPLE_BYTES, "jobs.iterations",
        f"a run past {t:,.0f} s of simulated time: {samples:,} link samples every "
        f"{sample_s * 1e3:g} ms", "use fewer iterations or jobs, or less compute or fewer "
        "bytes per iteration")


# --------------------------------------------------------------------------- plans


def _link_trace(link_id: str, capacity_bps: float, bins: np.ndarray, end: float,
                sample_s: float, efficiency: float) -> LinkTrace:
    """A link's periodic samples (every ``sample_s`` up to the last event) of its payload
    bytes per interval, as columns; the throughput counts frames, like a queue's byte
    counter: payload / efficiency.  No queue, marks or drops in the model."""
    grid = sample_grid(end, sample_s)
    sent = np.zeros(len(grid))
    n = min(len(grid), len(bins))
    sent[:n] = bins[:n]
    bps = np.maximum(sent * 8 / sample_s / efficiency, 0.0)
    zeros = np.zeros(len(grid), dtype=np.int64)
    return LinkTrace.of_columns(link_id, capacity_bps, t=grid, throughput_bps=bps,
                                queue_bytes=zeros, ecn_marks=zeros, drops=zeros)


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
        if result.link_bins:
            rates = link_rates_bps(plan)
            links = tuple(_link_trace(lid, rates[lid.split(":", 1)[0]],
                                      result.link_bins[lane][row], result.link_end[lane],
                                      opt.sample_s, plan.topology.payload_efficiency)
                          for row, lid in enumerate(batch.link_ids[k] for k in batch.record))
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
    """Traces of ``plans`` in their order; plans of one structure form one batch (one
    layout, each lane its own engine state)."""
    def run_group(group: list[RunPlan], structs: list[Structure]) -> list[Trace]:
        batch, _ = build_batch(group, structs)
        result = simulate(batch, options, record_links=record_links, progress=progress)
        return to_traces(group, batch, result, options)

    return run_grouped(plans, structure_key, run_group)
