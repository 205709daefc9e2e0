"""Runs as lanes: what the flow-level models (fluid, DCQCN) share about a batch of plans.

Both models advance many independent runs of one structure (same jobs, flows and
links; different parameters, seeds or start offsets) as lanes of one set of numpy
arrays.  This module turns resolved plans (:mod:`mltcp.lab.scenario.plan`) into those arrays:
each plan's ring flows and the shaped links their paths cross (:func:`structure`), and
a :class:`Batch` of the lanes' jobs (phases, starts, jitter, iterations, F's
parameters).  Everything here is read off the plans; nothing is resolved again.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.graph import directed_id
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.spec import JobPhase

T = TypeVar("T")


@dataclass
class Batch:
    """Lanes of runs that share one structure: J jobs, F flows, K links, P phases.

    Per-lane arrays have the lane as their first axis (L).  Times in seconds,
    sizes in bytes, capacities in payload bytes per second.
    """

    job_names: list[str]
    link_ids: list[str]
    flow_job: np.ndarray          # (F,) job index of each flow
    flow_links: list[tuple[tuple[int, ...], ...]]  # per lane, each flow's links (sparse:
                                  # a dense lanes x flows x links array was most of a
                                  # cluster-size scenario's memory)
    record: np.ndarray            # (R,) the links whose samples the trace keeps
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
    jitter: np.ndarray | None = None   # (L, J, N) seconds added to iteration k's first compute

    @property
    def lanes(self) -> int:
        return self.capacity.shape[0]

    def check(self) -> None:
        """Shapes agree (a mismatch would broadcast silently into nonsense)."""
        n_lanes, n_jobs, n_flows = self.lanes, len(self.job_names), len(self.flow_job)
        n_links = len(self.link_ids)
        n_phases = self.phase_compute.shape[2]
        if len(self.flow_links) != n_lanes or any(len(lane) != n_flows
                                                  for lane in self.flow_links):
            raise SpecError("batch.flow_links", "not one path per flow and lane",
                            f"give {n_lanes} lanes of {n_flows} flows' links")
        if len(self.record) and not 0 <= self.record.min() <= self.record.max() < n_links:
            raise SpecError("batch.record", "a recorded link is not a link of the batch",
                            f"give link indices 0..{n_links - 1}")
        want = {"capacity": (n_lanes, n_links),
                "flow_bytes": (n_lanes, n_flows),
                "phase_fraction": (n_lanes, n_jobs, n_phases),
                "phase_compute": (n_lanes, n_jobs, n_phases), "weight": (n_lanes, n_flows),
                "slope": (n_lanes,), "intercept": (n_lanes,), "cap": (n_lanes,),
                "iterations": (n_lanes, n_jobs), "start": (n_lanes, n_jobs)}
        if self.jitter is not None:
            want["jitter"] = (n_lanes, n_jobs, max(int(self.iterations.max(initial=0)), 1))
        for name, shape in want.items():
            if getattr(self, name).shape != shape:
                raise SpecError(f"batch.{name}", f"shape {getattr(self, name).shape}",
                                f"give shape {shape}")


@dataclass(frozen=True)
class Structure:
    """One plan's flows and links, in the order a batch lane holds them: every shaped
    link in both directions (graph order), and one flow per ring worker (jobs in order,
    workers in ring order) with the indices of the links its path crosses."""

    link_ids: tuple[str, ...]
    flow_job: tuple[int, ...]
    flow_links: tuple[tuple[int, ...], ...]
    flow_bytes: tuple[float, ...]
    weight: tuple[float, ...]          # the job's connections per worker
    record: tuple[int, ...] = ()       # the links the trace samples (plan.record_links)


def structure(plan: RunPlan) -> Structure:
    """The plan's flows (one per ring worker, on its seed's ECMP path) and the directed
    links they cross, with their bytes and weights."""
    link_ids = [directed_id(link, a, b) for link in plan.graph.links if link.rate_mbit
                for a, b in ((link.a, link.b), (link.b, link.a))]
    index = {lid: k for k, lid in enumerate(link_ids)}
    flow_job, flow_links, flow_bytes, weight = [], [], [], []
    for j, job in enumerate(plan.jobs):
        for flow in job.flows:
            flow_job.append(j)
            flow_links.append(tuple(index[lid] for lid in flow.shaped_links))
            flow_bytes.append(float(job.comm_bytes_per_worker))
            weight.append(float(job.spec.connections))
    return Structure(tuple(link_ids), tuple(flow_job), tuple(flow_links), tuple(flow_bytes),
                     tuple(weight), tuple(index[lid] for lid in plan.record_links))


def structure_key(plan: RunPlan, s: Structure) -> tuple:
    """Plans with equal keys can be lanes of one batch."""
    return tuple(j.name for j in plan.jobs), s.link_ids, s.flow_job, s.record


def capacities(plan: RunPlan, link_ids: Sequence[str], efficiency: float) -> np.ndarray:
    """Payload bytes per second of each directed link (its rate x MSS / frame)."""
    rate = {link.id: link.rate_mbit for link in plan.graph.links}
    return np.array([rate[lid.split(":", 1)[0]] * 1e6 / 8 * efficiency for lid in link_ids])


def link_rates_bps(plan: RunPlan) -> dict[str, float]:
    """Wire bits per second of each link id (what a trace's link capacity is)."""
    return {link.id: (link.rate_mbit or 0.0) * 1e6 for link in plan.graph.links}


def build_batch(plans: Sequence[RunPlan], structs: Sequence[Structure] | None = None
                ) -> tuple[Batch, list[Structure]]:
    """Stack plans of one structure (same jobs, links and phase count) into lanes.
    ``structs``: the plans' structures where the caller has them already."""
    if not plans:
        raise SpecError("runs", "empty", "give at least one run")
    structs = list(structs) if structs is not None else [structure(p) for p in plans]
    first = structs[0]
    names = [j.name for j in plans[0].jobs]
    for p, s in zip(plans, structs, strict=True):
        if [j.name for j in p.jobs] != names or s.link_ids != first.link_ids \
                or s.flow_job != first.flow_job or s.record != first.record:
            raise SpecError("runs", f"{p.scenario.name} has another structure than "
                            f"{plans[0].scenario.name}", "batch only runs with the same jobs "
                            "and topology (run_many groups them)")
    n_lanes = len(plans)
    # Jobs with fewer phases than the most are padded with empty phases (no compute, no
    # bytes), which end the instant they start.
    n_phases = max(len(j.spec.phase_list()) for p in plans for j in p.jobs)
    padded = [[[*j.spec.phase_list(),
                *[JobPhase(0.0, 0.0)] * (n_phases - len(j.spec.phase_list()))]
               for j in p.jobs] for p in plans]
    phase_compute = np.array([[[ph.compute_ms / 1000 for ph in job] for job in lane]
                              for lane in padded])
    phase_fraction = np.array([[[ph.share for ph in job] for job in lane] for lane in padded])
    iterations = np.array([[j.spec.iterations if j.active else 0 for j in p.jobs]
                           for p in plans], dtype=int)
    start = np.array([[j.start_ms / 1000 for j in p.jobs] for p in plans])
    n_iter = max(int(iterations.max(initial=0)), 1)
    jitter = np.zeros((n_lanes, len(names), n_iter))
    for lane, p in enumerate(plans):
        for j, job in enumerate(p.jobs):
            jitter[lane, j, :len(job.compute_jitter_ms)] = np.array(job.compute_jitter_ms) / 1000
    aggs = [p.scheme.aggressiveness for p in plans]
    batch = Batch(
        job_names=names, link_ids=list(first.link_ids), flow_job=np.array(first.flow_job),
        flow_links=[s.flow_links for s in structs],
        record=np.array(first.record, dtype=np.int64),
        capacity=np.stack([capacities(p, s.link_ids, p.topology.payload_efficiency)
                           for p, s in zip(plans, structs, strict=True)]),
        flow_bytes=np.array([s.flow_bytes for s in structs]),
        phase_fraction=phase_fraction,
        phase_compute=phase_compute,
        weight=np.array([s.weight for s in structs]),
        slope=np.array([a.slope for a in aggs], dtype=float),
        intercept=np.array([a.intercept for a in aggs], dtype=float),
        cap=np.array([a.cap if a.cap is not None else np.inf for a in aggs], dtype=float),
        iterations=iterations, start=start, jitter=jitter)
    return batch, structs


def run_grouped(plans: Sequence[RunPlan], key: Callable[[RunPlan, Structure], Hashable],
                run_group: Callable[[list[RunPlan], list[Structure]], list[T]]) -> list[T]:
    """``run_group``'s results for ``plans``, in their order: plans with equal ``key``
    (of the plan and its structure) go to ``run_group`` together, as lanes of one batch."""
    structs = [structure(plan) for plan in plans]
    groups: dict[Hashable, list[int]] = {}
    for i, plan in enumerate(plans):
        groups.setdefault(key(plan, structs[i]), []).append(i)
    out: dict[int, T] = {}
    for indices in groups.values():
        results = run_group([plans[i] for i in indices], [structs[i] for i in indices])
        out.update(zip(indices, results, strict=True))
    return [out[i] for i in range(len(plans))]


def sample_intervals(times: np.ndarray, cum: np.ndarray,
                     sample_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A link's periodic samples from a cumulative byte count at event times: the sample
    times (every ``sample_s`` up to the last event) and the bytes of each interval
    before them (the count interpolated between events).  Shared by the models."""
    grid = sample_grid(float(times[-1]) if len(times) else 0.0, sample_s)
    at = np.interp(grid, times, cum) if len(grid) else grid
    return grid, at - np.concatenate([[0.0], at[:-1]])


def sample_grid(end: float, sample_s: float) -> np.ndarray:
    """The times of a link's periodic samples: every ``sample_s`` up to the last event
    (the nearest multiple).  Sample i covers (i s, (i+1) s]."""
    return np.arange(sample_s, end + sample_s / 2, sample_s)
