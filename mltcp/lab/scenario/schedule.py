"""Centralized schedules applied to plans before they run: Cassini's time-shifts.

Cassini (:mod:`mltcp.lab.common.cassini`) is the centralized alternative to MLTCP: it looks at
each job's periodic bandwidth demand on every link, finds the rotation of the jobs'
circles that minimises their excess demand, and starts each job late by its
time-shift; after that the jobs run standard congestion control.  This module turns
a resolved plan into Cassini's inputs (each job's demand per shared link, from its
dedicated-link iteration profile) and returns the plans with shifted starts, so that
every backend runs the same schedule.  It sits between resolution and the backend:
load -> resolve -> **schedule** -> backend.
"""

from __future__ import annotations

from collections.abc import Sequence

from mltcp.core.errors import SpecError
from mltcp.lab.common.cassini import CassiniSchedule, JobDemand, Phase, schedule
from mltcp.lab.scenario.graph import NetworkGraph
from mltcp.lab.scenario.plan import JobPlan, RunPlan, shifted

RESOLUTIONS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0)   # tried in order for the unified circle


def _path_mbit(graph: NetworkGraph, src: str, dst: str) -> float:
    """The slowest shaped link between two hosts (a flow alone runs at that rate)."""
    rates = [link.rate_mbit for _, _, link in graph.path(src, dst) if link.rate_mbit]
    return min(rates) if rates else float("inf")


def job_demand(job: JobPlan, plan: RunPlan) -> JobDemand:
    """The job's periodic demand, as on a dedicated network: each communication phase
    at its place in the iteration, demanding the rate of the job's slowest path."""
    hosts = job.hosts
    mbit = min(_path_mbit(plan.graph, h, hosts[(i + 1) % len(hosts)])
               for i, h in enumerate(hosts))
    goodput_bps = mbit * 1e6 * plan.topology.payload_efficiency
    comm_ms = job.comm_bytes_per_worker * 8 / goodput_bps * 1000
    phases, clock = [], 0.0
    for step in job.spec.phase_list():
        clock += step.compute_ms
        duration = step.share * comm_ms
        if duration > 0:
            phases.append(Phase(clock, duration, mbit))
        clock += duration
    return JobDemand(job.name, clock, tuple(phases))


def cassini_plan(plan: RunPlan, step_deg: float = 5.0) -> CassiniSchedule:
    """Cassini's schedule for the plan's jobs on their shared links."""
    demands = {job.name: job_demand(job, plan) for job in plan.jobs}
    per_link: dict[str, list[JobDemand]] = {}
    for job in plan.jobs:
        for link in job.links:
            per_link.setdefault(link, []).append(demands[job.name])
    rate = {link.id: link.rate_mbit for link in plan.graph.links}
    capacities = {lid: float(rate[lid.split(":", 1)[0]] or 0.0) for lid in per_link}
    # The unified circle's perimeter is the LCM of the iteration times; measured times
    # rarely divide each other, so round them as coarsely as needed to keep it bounded.
    for resolution in RESOLUTIONS_MS[:-1]:
        try:
            return schedule(per_link, capacities, step_deg, resolution_ms=resolution)
        except SpecError as err:
            if err.field != "periods_ms":
                raise
    return schedule(per_link, capacities, step_deg, resolution_ms=RESOLUTIONS_MS[-1])


def cassini_shifts(plan: RunPlan) -> dict[str, float]:
    """What Cassini adds to each job's start (ms): each job starts at the first instant
    at or after its specified start that is congruent to its time-shift modulo its
    iteration time (a job cannot start before it arrives)."""
    shifts = cassini_plan(plan).shifts_ms
    return {job.name: (shifts.get(job.name, 0.0) - job.spec.start_offset_ms)
            % job_demand(job, plan).period_ms for job in plan.jobs}


def apply(plans: Sequence[RunPlan]) -> list[RunPlan]:
    """The plans as their schemes run them: a scheme with a centralized schedule gets
    its shifts (computed once per scheme: they depend on placement, not on the seed);
    every other plan is returned as it is."""
    shifts: dict[str, dict[str, float]] = {}
    out = []
    for plan in plans:
        if plan.scheme.schedule == "none":
            out.append(plan)
            continue
        if plan.scheme.schedule != "cassini":
            raise SpecError("schedule", f"unknown schedule {plan.scheme.schedule!r}",
                            "use none or cassini")
        if plan.scheme.name not in shifts:
            shifts[plan.scheme.name] = cassini_shifts(plan)
        out.append(shifted(plan, shifts[plan.scheme.name]))
    return out
