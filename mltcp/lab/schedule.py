"""Centralized schedules applied to a scenario before it runs: Cassini's time-shifts.

Cassini (:mod:`mltcp.lab.cassini`) is the centralized alternative to MLTCP: it looks at
each job's periodic bandwidth demand on every link, finds the rotation of the jobs'
circles that minimises their excess demand, and starts each job late by its
time-shift; after that the jobs run standard congestion control.  This module turns
a scenario into Cassini's inputs (each job's demand per shared link, from its
dedicated-link iteration profile) and returns the scenario with shifted starts, so
that every backend (fluid model, netns testbed) runs the same schedule.
"""

from __future__ import annotations

import dataclasses

from mltcp.core.errors import SpecError
from mltcp.lab.cassini import CassiniSchedule, JobDemand, Phase, schedule
from mltcp.lab.graph import NetworkGraph, graph_for, ring_link_ids
from mltcp.lab.scenario import Scenario, ScenarioJob, Scheme, Topology, placement

RESOLUTIONS_MS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0)   # tried in order for the unified circle


def _path_mbit(graph: NetworkGraph, src: str, dst: str) -> float:
    """The slowest shaped link between two hosts (a flow alone runs at that rate)."""
    rates = [link.rate_mbit for _, _, link in graph.path(src, dst) if link.rate_mbit]
    return min(rates) if rates else float("inf")


def job_demand(job: ScenarioJob, topology: Topology, graph: NetworkGraph,
               hosts: tuple[str, ...]) -> JobDemand:
    """The job's periodic demand, as on a dedicated network: each communication phase
    at its place in the iteration, demanding the rate of the job's slowest path."""
    mbit = min(_path_mbit(graph, h, hosts[(i + 1) % len(hosts)]) for i, h in enumerate(hosts))
    goodput_bps = mbit * 1e6 * topology.payload_efficiency
    comm_ms = job.comm_bytes_per_worker() * 8 / goodput_bps * 1000
    phases, clock = [], 0.0
    for step in job.phase_list():
        clock += step.compute_ms
        duration = step.share * comm_ms
        if duration > 0:
            phases.append(Phase(clock, duration, mbit))
        clock += duration
    return JobDemand(job.name, clock, tuple(phases))


def cassini_plan(scenario: Scenario, step_deg: float = 5.0) -> CassiniSchedule:
    """Cassini's schedule for the scenario's jobs on its shared links."""
    graph = graph_for(scenario.topology)
    places = placement(scenario)
    demands = {job.name: job_demand(job, scenario.topology, graph, places[job.name])
               for job in scenario.jobs}
    per_link: dict[str, list[JobDemand]] = {}
    for job in scenario.jobs:
        for link in ring_link_ids(graph, places[job.name]):
            per_link.setdefault(link, []).append(demands[job.name])
    rate = {link.id: link.rate_mbit for link in graph.links}
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


def apply_schedule(scenario: Scenario, scheme: Scheme) -> tuple[Scenario, dict[str, float]]:
    """The scenario as the scheme runs it, and the shift added to each job's start (ms).

    Without a schedule: unchanged, no shifts.  With Cassini: each job starts at the
    first instant at or after its specified start that is congruent to its shift
    modulo its iteration time (a job cannot start before it arrives).
    """
    if scheme.schedule == "none":
        return scenario, {}
    plan = cassini_plan(scenario)
    graph = graph_for(scenario.topology)
    places = placement(scenario)
    jobs, added = [], {}
    for job in scenario.jobs:
        period = job_demand(job, scenario.topology, graph, places[job.name]).period_ms
        shift = plan.shifts_ms.get(job.name, 0.0)
        extra = (shift - job.start_offset_ms) % period
        added[job.name] = extra
        jobs.append(dataclasses.replace(job, start_offset_ms=job.start_offset_ms + extra))
    return dataclasses.replace(scenario, jobs=tuple(jobs)), added
