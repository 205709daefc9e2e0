"""What a scenario's runs hold in memory, estimated before anything runs.

A run keeps one record per job iteration and, where its backend samples links, one
sample per recorded link (the scenario's ``record_links``) and sample period for as long
as it lasts; a model that lays flows x links out densely (DCQCN) adds that matrix.  Each
is sized by inputs the validator accepts one by one (10,000 iterations and 600 s of
compute are both in range; together they are 69 days of 10 ms link samples), so the
runner, the backends and sweeps check these estimates against the one memory budget
(:data:`mltcp.core.validate.MEMORY_BUDGET_BYTES`) before they allocate: a run that would
not fit is refused in one line that names the fields and the size it would need; runs
that fit one by one are run in chunks that fit; a run set whose traces the report would
hold together is refused before its plans are made.

The costs per item are peak bytes measured on the fluid backend (samples built as
columns, saved as JSON a link at a time, read back by the report: 460 bytes a sample at
the peak, ``bench/bench_fluid_scale.py``), rounded up.  A run's length
is bounded from below (:func:`min_duration_s`), so an estimate never refuses a run that
would fit; what a run's contention adds beyond it the fluid backend checks as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mltcp.core import validate
from mltcp.lab.scenario.plan import JobPlan, RunPlan
from mltcp.lab.scenario.spec import Scenario, ScenarioJob

SAMPLE_BYTES = 512         # a link sample at its run's peak: the trace read back as JSON
RECORD_BYTES = 1536        # an iteration record, likewise (one phase)
PHASE_BYTES = 192          # each further phase of a model-parallel iteration's record
CELL_BYTES = 8             # a flow x link cell of a dense layout (DCQCN)
KEPT_SAMPLE_BYTES = 64     # a link sample of a trace read back (columns): what a report holds
KEPT_RECORD_BYTES = 512    # an iteration record read back
PLAN_ITERATION_BYTES = 32  # a plan's jitter draw for one job iteration (every job, every plan)


@dataclass(frozen=True)
class Footprint:
    """What one run holds: ``samples`` link samples (``links`` links, ``duration_s`` at
    least), ``records`` iteration records (``phases`` extra phase entries), ``cells`` of
    a dense flows x links layout and ``draws`` jitter draws of its plan."""

    links: int
    duration_s: float
    samples: int
    records: int
    phases: int
    cells: int
    draws: int

    @property
    def parts(self) -> dict[str, int]:
        """Peak bytes of the run by what sizes them."""
        return {"samples": self.samples * SAMPLE_BYTES,
                "records": self.records * RECORD_BYTES + self.phases * PHASE_BYTES,
                "cells": self.cells * CELL_BYTES}

    @property
    def peak_bytes(self) -> int:
        """While the run is built and its trace saved."""
        return sum(self.parts.values()) + self.draws * PLAN_ITERATION_BYTES

    @property
    def kept_bytes(self) -> int:
        """Once its trace is read back for the report, with its plan alive meanwhile."""
        return (self.samples * KEPT_SAMPLE_BYTES + self.records * KEPT_RECORD_BYTES
                + self.draws * PLAN_ITERATION_BYTES)


def _capacity(plan: RunPlan) -> dict[str, float]:
    """Payload bytes per second of each shaped link, by its undirected id."""
    eff = plan.topology.payload_efficiency
    return {link.id: link.rate_mbit * 1e6 / 8 * eff for link in plan.graph.links
            if link.rate_mbit}


def sampled_links(plan: RunPlan) -> int:
    """The directed links a trace samples (the scenario's ``record_links``)."""
    return len(plan.record_links)


def _job_span_s(job: JobPlan, capacity: dict[str, float]) -> float:
    """The job alone: its start plus its iterations of compute, each with its bytes over
    its slowest link (any contention only adds)."""
    compute_s = sum(p.compute_ms for p in job.spec.phase_list()) / 1e3
    comm_s = max((job.comm_bytes_per_worker / capacity[lid.split(":", 1)[0]]
                  for flow in job.flows for lid in flow.shaped_links), default=0.0)
    return job.start_ms / 1e3 + job.spec.iterations * (compute_s + comm_s)


def min_duration_s(plan: RunPlan) -> tuple[float, JobPlan | None]:
    """A lower bound of the run's length, and the job that sets it (None: the busiest
    link, which must carry every job's bytes, sets it): no backend runs faster than
    this, so a run refused on it would not have fit."""
    capacity = _capacity(plan)
    carried: dict[str, float] = {}
    longest, slowest = 0.0, None
    for job in plan.active_jobs:
        span = _job_span_s(job, capacity)
        if span > longest:
            longest, slowest = span, job
        for flow in job.flows:
            for lid in flow.shaped_links:
                carried[lid] = carried.get(lid, 0.0) + job.spec.iterations \
                    * job.comm_bytes_per_worker
    busiest = max((b / capacity[lid.split(":", 1)[0]] for lid, b in carried.items()),
                  default=0.0)
    return (longest, slowest) if longest >= busiest else (busiest, None)


def _records(jobs: Sequence[ScenarioJob]) -> tuple[int, int]:
    """The iteration records of ``jobs``' runs, and their entries for further phases."""
    return (sum(j.iterations for j in jobs),
            sum(j.iterations * (len(j.phase_list()) - 1) for j in jobs))


def check_scenario(scenario: Scenario) -> None:
    """Refuse a scenario whose iteration records alone exceed the budget, before any plan
    is made (a plan draws each job's jitter per iteration: thousands of [[jobs]] of
    10,000 iterations are a few MB of TOML and GBs of plans)."""
    records, phases = _records(scenario.jobs)
    need = records * (RECORD_BYTES + PLAN_ITERATION_BYTES) + phases * PHASE_BYTES
    if need > validate.MEMORY_BUDGET_BYTES:
        validate.within_memory(need, *_records_refusal(scenario.jobs, records))


def of(plan: RunPlan, sample_s: float | None, dense: bool) -> Footprint:
    """One run's footprint on a backend that samples links every ``sample_s`` (None:
    none) and, if ``dense``, lays the run's flows x shaped links out as a matrix."""
    links = sampled_links(plan)
    shaped = 2 * len(_capacity(plan))
    duration, _ = min_duration_s(plan)
    samples = int(links * duration / sample_s) if sample_s else 0
    records, phases = _records([j.spec for j in plan.active_jobs])
    flows = sum(len(j.flows) for j in plan.jobs)
    draws = sum(len(j.compute_jitter_ms) for j in plan.jobs)
    return Footprint(links, duration, samples, records, phases,
                     flows * shaped if dense else 0, draws)


def check_run(plan: RunPlan, sample_s: float | None, dense: bool) -> Footprint:
    """Refuse a run whose footprint exceeds the budget, naming what sizes its largest
    part; its footprint otherwise."""
    fp = of(plan, sample_s, dense)
    if fp.peak_bytes <= validate.MEMORY_BUDGET_BYTES:
        return fp
    part = max(fp.parts, key=lambda k: fp.parts[k])
    if part == "samples":
        field, what, fix = _samples_refusal(plan, fp, sample_s or 1.0)
    elif part == "records":
        field, what, fix = _records_refusal([j.spec for j in plan.active_jobs], fp.records)
    else:
        shaped = 2 * len(_capacity(plan))
        flows = fp.cells // max(shaped, 1)
        field = "topology"
        what = f"{flows} flows x {shaped} links of the model's matrices"
        fix = "use a smaller topology (fewer leaves x spines) or fewer workers"
    validate.within_memory(fp.peak_bytes, field, what, fix)
    return fp


def _samples_refusal(plan: RunPlan, fp: Footprint, sample_s: float) -> tuple[str, str, str]:
    """Field, what and fix for a run whose link samples do not fit."""
    _, job = min_duration_s(plan)
    ms = f"{sample_s * 1e3:g} ms"
    room_s = validate.MEMORY_BUDGET_BYTES / (fp.links * SAMPLE_BYTES / sample_s)
    fewer = ('record fewer links (record_links = "none" or a list of link ids), or '
             if fp.links > 2 else "")
    fix = (f"with {fp.links} recorded links a run fits in ~{room_s:,.0f} s: {fewer}use "
           "fewer iterations or a shorter compute_ms")
    if job is None:
        return ("jobs.iterations x jobs.bytes_per_iteration",
                f"the busiest link's bytes take >= {fp.duration_s:,.0f} s: {fp.samples:,} "
                f"link samples every {ms}", fix.replace("compute_ms", "bytes_per_iteration"))
    at = f"jobs[{job.index}]"
    per_iteration = (fp.duration_s - job.start_ms / 1e3) / job.spec.iterations
    return (f"{at}.iterations x {at}.compute_ms",
            f"{job.spec.iterations} iterations of >= {per_iteration:,.3g} s: {fp.samples:,} "
            f"link samples every {ms}", fix)


def _records_refusal(jobs: Sequence[ScenarioJob], records: int) -> tuple[str, str, str]:
    """Field, what and fix for runs whose iteration records do not fit."""
    most = max(j.iterations for j in jobs)
    room = validate.MEMORY_BUDGET_BYTES // RECORD_BYTES
    return ("jobs x iterations",
            f"{len(jobs)} jobs of up to {most} iterations: {records:,} iteration records",
            f"a run fits ~{room:,} job iterations: use fewer jobs or iterations")


def chunks(costs: Sequence[int], limit: int | None = None) -> list[list[int]]:
    """Indices of ``costs`` (peak bytes) in order, cut into runs of consecutive items
    whose costs add up to at most ``limit``: what a batched backend or a sweep's worker
    holds at once.  By default half the budget, since a cost is a lower bound and
    contention draws a run out (a fair pair runs 1.4 times its bound); an item over it is
    a chunk of its own (a run over the whole budget was refused already)."""
    limit = validate.MEMORY_BUDGET_BYTES // 2 if limit is None else limit
    out: list[list[int]] = []
    total = limit + 1
    for i, cost in enumerate(costs):
        if total + cost > limit:
            out.append([])
            total = 0
        out[-1].append(i)
        total += cost
    return out


def check_runset(per_seed: Sequence[RunPlan], seeds: int, dedicated_seeds: int,
                 sample_s: float | None, dense: bool) -> None:
    """Refuse a run set whose traces the report would hold together beyond the budget:
    ``per_seed`` are one seed's plans (dedicated runs with ``only_job``), the run set
    has ``seeds`` of the others and ``dedicated_seeds`` of the dedicated ones.  Checked on
    one seed's plans, before every seed's plans are made."""
    kept, peak = 0, 0
    for plan in per_seed:
        fp = of(plan, sample_s, dense)
        kept += fp.kept_bytes * (dedicated_seeds if plan.only_job else seeds)
        peak = max(peak, fp.peak_bytes)
    runs = sum(dedicated_seeds if p.only_job else seeds for p in per_seed)
    room = max(1, runs * validate.MEMORY_BUDGET_BYTES // max(kept + peak, 1))
    links = max((sampled_links(p) for p in per_seed), default=0)
    fewer = (f'record fewer than its {links} links (record_links = "none" or a list of '
             "link ids), " if links > 2 else "")
    validate.within_memory(
        kept + peak, "seeds x schemes",
        f"{runs} runs ({seeds} seeds x {sum(not p.only_job for p in per_seed)} schemes"
        f"{', with dedicated runs' if dedicated_seeds else ''}) whose traces the report reads",
        f"run fewer seeds or schemes at once (~{room} runs of this size fit), {fewer}or "
        "fewer iterations")
