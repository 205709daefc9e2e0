"""A scenario resolved once: the plan every backend runs.

A scenario file says *what* to run; a plan says exactly *how*, with every choice
that a seed or a rule decides already made: which hosts each job's workers sit on
(placement), when each job starts (its offset, a centralized schedule's shift and a
seeded tie-break), how much extra compute each iteration gets (the seeded jitter
draws), which path each ring flow takes through the fabric (the ECMP draw), the
idle gap that ends an MLTCP iteration, and where the links mark ECN.  Every backend
(fluid, DCQCN model, ns-3, the netns testbed, and later real hosts and the cluster
simulator) reads these from the plan and derives none of them itself, so a seed
means the same experiment everywhere and data flows one way:

    load (spec) -> resolve (here) -> centralized schedule (schedule) -> backend
    (backends) -> trace -> metrics -> report

A plan holds every job of the scenario; in a dedicated run (``only_job``) the others
are present but inactive, so runs of one scenario keep one structure (the models
batch them as lanes of one set of arrays).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mltcp.lab.scenario.graph import (
    LinkSpec,
    NetworkGraph,
    directed_id,
    graph_for,
    recorded_link_ids,
    ring_flow_path,
    ring_link_ids,
)
from mltcp.lab.scenario.spec import Scenario, ScenarioJob, Scheme, Topology, named, parse_scenario

DCTCP_DEFAULT_ECN_BYTES = 30_000
TIE_BREAK_MS = 1.0


@dataclass(frozen=True)
class FlowPlan:
    """One ring flow: worker ``worker`` of a job sends its share to its successor
    ``dst`` along ``hops`` (from, to, link), the path its seed's ECMP draw picked."""

    job: str
    worker: int
    src: str
    dst: str
    hops: tuple[tuple[str, str, LinkSpec], ...]

    @property
    def shaped_links(self) -> tuple[str, ...]:
        """Directed ids of the shaped links on the flow's path, in path order."""
        return tuple(directed_id(link, a, b) for a, b, link in self.hops if link.rate_mbit)


@dataclass(frozen=True)
class JobPlan:
    """One job as it runs: its spec, and every choice made for it."""

    spec: ScenarioJob
    index: int                    # position in the scenario (ports, job ids)
    active: bool                  # False: present for structure, idle in this run
    hosts: tuple[str, ...]        # worker i on hosts[i]; the ring runs in this order
    start_offset_ms: float        # the spec's offset plus a centralized schedule's shift
    shift_ms: float               # what the centralized schedule added (0: none)
    tie_break_ms: float           # seeded, < TIE_BREAK_MS: breaks exact start ties
    compute_jitter_ms: tuple[float, ...]   # per iteration, added to its first compute
    idle_gap_ms: float            # silence that ends an MLTCP iteration (datapath backends)
    phase_bytes: tuple[int, ...]  # bytes each worker sends in each phase of an iteration
    links: tuple[str, ...]        # directed shaped links the ring may cross (trace's links)
    flows: tuple[FlowPlan, ...]   # worker i's flow is flows[i]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def start_ms(self) -> float:
        """When the first iteration starts, ms after the run's time 0."""
        return self.start_offset_ms + self.tie_break_ms

    @functools.cached_property
    def comm_bytes_per_worker(self) -> int:
        """Payload bytes one worker sends per iteration (read per flow and link when a
        cluster-size run is sized, so worked out once)."""
        return self.spec.comm_bytes_per_worker()


@dataclass(frozen=True)
class RunPlan:
    """One run: a scenario under one scheme and one seed (or one job alone, the
    dedicated baseline), fully resolved."""

    scenario: Scenario
    scheme: Scheme
    seed: int
    only_job: str | None
    graph: NetworkGraph
    ecn_threshold_bytes: int | None
    jobs: tuple[JobPlan, ...]

    @property
    def topology(self) -> Topology:
        return self.scenario.topology

    @property
    def active_jobs(self) -> tuple[JobPlan, ...]:
        return tuple(j for j in self.jobs if j.active)

    @property
    def shifts_ms(self) -> dict[str, float]:
        """What a centralized schedule added to each job's start ({} without one)."""
        return ({j.name: j.shift_ms for j in self.jobs}
                if self.scheme.schedule != "none" else {})

    @property
    def stem(self) -> str:
        """The run's name in an output directory (``traces/<stem>.json``)."""
        if self.only_job is not None:
            return f"{self.scheme.name}-{self.only_job}-seed{self.seed}"
        return f"{self.scheme.name}-seed{self.seed}"

    @property
    def nominal_duration_s(self) -> float:
        """The latest active job's start plus its iterations of compute alone: a lower
        bound of the time a run takes (for progress lines)."""
        return max((j.start_offset_ms / 1e3 + j.spec.iterations
                    * sum(p.compute_ms for p in j.spec.phase_list()) / 1e3
                    for j in self.active_jobs), default=0.0)

    def job(self, name: str) -> JobPlan:
        return named(self.jobs, name, "job", "job")

    @functools.cached_property
    def record_links(self) -> tuple[str, ...]:
        """The directed links this run's trace samples (the scenario's ``record_links``),
        in graph order: the same in every backend and in the run's dedicated runs."""
        return recorded_link_ids(self.graph, self.scenario.record_links,
                                 [j.links for j in self.jobs])

    def trace_params(self) -> dict[str, Any]:
        """What a trace records of how it was run: the scheme as run (its fields, the
        effective F, standard F = 1 included, and the congestion-control module), the
        job run alone, and the centralized schedule's shifts where there are any.  A
        report rebuilds the scheme from these (:func:`mltcp.lab.scenario.spec.scheme_of`)."""
        params = {**self.scheme.to_dict(), **self.scheme.as_run(), "only_job": self.only_job}
        if self.shifts_ms:
            params["shifts_ms"] = self.shifts_ms
        return params

    # -- to another process and back (ns-3 workers, job drivers) ---------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; :func:`from_dict` restores an equal plan (floats exactly)."""
        return {
            "scenario": self.scenario.to_dict(), "scheme": dataclasses.asdict(self.scheme),
            "seed": self.seed, "only_job": self.only_job,
            "ecn_threshold_bytes": self.ecn_threshold_bytes,
            "jobs": [{"active": j.active, "hosts": list(j.hosts),
                      "start_offset_ms": j.start_offset_ms, "shift_ms": j.shift_ms,
                      "tie_break_ms": j.tie_break_ms,
                      "compute_jitter_ms": list(j.compute_jitter_ms),
                      "idle_gap_ms": j.idle_gap_ms, "phase_bytes": list(j.phase_bytes),
                      "flows": [[[a, b, link.id] for a, b, link in f.hops] for f in j.flows]}
                     for j in self.jobs],
        }


def from_dict(data: Mapping[str, Any]) -> RunPlan:
    """The plan :meth:`RunPlan.to_dict` wrote (the scenario is validated again)."""
    scenario = parse_scenario(data["scenario"], "plan")
    graph = graph_for(scenario.topology)
    links = {link.id: link for link in graph.links}
    jobs = []
    for index, (spec, raw) in enumerate(zip(scenario.jobs, data["jobs"], strict=True)):
        hosts = tuple(raw["hosts"])
        flows = tuple(FlowPlan(spec.name, i, hosts[i], hosts[(i + 1) % len(hosts)],
                               tuple((a, b, links[lid]) for a, b, lid in hops))
                      for i, hops in enumerate(raw["flows"]))
        jobs.append(JobPlan(spec, index, raw["active"], hosts, raw["start_offset_ms"],
                            raw["shift_ms"], raw["tie_break_ms"],
                            tuple(raw["compute_jitter_ms"]), raw["idle_gap_ms"],
                            tuple(raw["phase_bytes"]), tuple(ring_link_ids(graph, hosts)), flows))
    return RunPlan(scenario, Scheme(**data["scheme"]), data["seed"], data["only_job"], graph,
                   data["ecn_threshold_bytes"], tuple(jobs))


# --------------------------------------------------------------------------- resolution


def resolve(scenario: Scenario, scheme: Scheme, seed: int,
            only_job: str | None = None) -> RunPlan:
    """The plan of one run: every placement, start, jitter draw, path, gap and marking
    threshold decided (a centralized schedule is applied afterwards, see
    :func:`mltcp.lab.scenario.schedule.apply`)."""
    if only_job is not None:
        scenario.job(only_job)      # an unknown name is a one-line error
    graph = graph_for(scenario.topology)
    places = placement(scenario)
    ties = tie_breaks_ms(scenario, seed)
    jitter = compute_jitter_ms(scenario, seed)
    jobs = []
    for index, job in enumerate(scenario.jobs):
        hosts = places[job.name]
        flows = tuple(FlowPlan(job.name, i, hosts[i], hosts[(i + 1) % len(hosts)],
                               tuple(ring_flow_path(graph, hosts, i, seed, job.name)))
                      for i in range(len(hosts)))
        jobs.append(JobPlan(
            spec=job, index=index, active=only_job in (None, job.name), hosts=hosts,
            start_offset_ms=job.start_offset_ms, shift_ms=0.0, tie_break_ms=ties[job.name],
            compute_jitter_ms=tuple(jitter[job.name]), idle_gap_ms=idle_gap_ms(job),
            phase_bytes=tuple(phase_bytes(job)), links=tuple(ring_link_ids(graph, hosts)),
            flows=flows))
    return RunPlan(scenario, scheme, seed, only_job, graph,
                   ecn_threshold_bytes(scenario.topology, scheme), tuple(jobs))


def shifted(plan: RunPlan, shifts_ms: Mapping[str, float]) -> RunPlan:
    """The plan with each job's start moved later by ``shifts_ms[job]`` (a centralized
    schedule's decision); the seeded tie-break stays as it was."""
    jobs = tuple(dataclasses.replace(j, start_offset_ms=j.spec.start_offset_ms
                                     + shifts_ms.get(j.name, 0.0),
                                     shift_ms=shifts_ms.get(j.name, 0.0))
                 for j in plan.jobs)
    return dataclasses.replace(plan, jobs=jobs)


def placement(scenario: Scenario) -> dict[str, tuple[str, ...]]:
    """Hosts of every job's workers, in ring order.

    Explicit placements are kept. Otherwise worker i goes to segment i mod S (left,
    right, left, ... on a dumbbell; leaf 0, 1, 2, ... on a leaf-spine), taking the
    next host of that segment round-robin across jobs, so jobs use fresh hosts before
    sharing one and every ring crosses the shared link. A segment whose hosts this
    job already uses is skipped, since a job never puts two workers on one host.
    (The parser has checked that no job has more workers than the topology hosts.)
    """
    topo = scenario.topology
    segments = topo.segments()
    cursors = [0] * len(segments)
    out: dict[str, tuple[str, ...]] = {}
    for job in scenario.jobs:
        if job.placement is not None:
            out[job.name] = job.placement
            continue
        used: list[str] = []
        for worker in range(job.workers):
            seg = worker % len(segments)
            while all(host in used for host in segments[seg]):
                seg = (seg + 1) % len(segments)
            hosts = segments[seg]
            while hosts[cursors[seg] % len(hosts)] in used:
                cursors[seg] += 1
            used.append(hosts[cursors[seg] % len(hosts)])
            cursors[seg] += 1
        out[job.name] = tuple(used)
    return out


def tie_breaks_ms(scenario: Scenario, seed: int) -> dict[str, float]:
    """Every job's seeded start tie-break, uniform in [0, 1) ms.  Two jobs that start
    together would stay symmetric forever on a model; the tie-break differs between
    seeds, and every backend takes it from the plan, so a seed means the same start
    on all of them."""
    rng = random.Random(seed)
    return {job.name: rng.uniform(0, TIE_BREAK_MS) for job in scenario.jobs}


def ecn_threshold_bytes(topology: Topology, scheme: Scheme) -> int | None:
    """Where the shaped links mark ECN-capable packets (bytes of backlog), or None.

    Marking is a switch setting, so a topology's threshold applies whatever the hosts
    run: classic-ECN cubic and reno back off on a mark as on a loss, without the
    loss.  DCTCP needs marks, so a DCTCP scheme on a topology without a threshold gets
    30 KB (parsed scenarios always give one)."""
    if topology.ecn_threshold_bytes is not None:
        return topology.ecn_threshold_bytes
    return DCTCP_DEFAULT_ECN_BYTES if scheme.cc == "dctcp" else None


def idle_gap_ms(job: ScenarioJob) -> float:
    """The silence that ends an MLTCP job's iteration, for the backends that run the
    datapath (netns, ns-3), which know the compute time.

    One phase: a quarter of the compute phase, within 5..50 ms.  A fixed 5 ms would
    also end iterations on the few-ms stalls of a busy emulation host (a starved
    receiver empties the pipe just as compute does), resetting F in the middle of
    communication.

    Several phases (model parallelism): the compute between two phases is a silence
    just like the compute before the first, so no gap can tell them apart; the gap
    is then longer than any silence of the job (the iteration's whole compute plus
    four standard deviations of jitter, twice over), and only the byte budget's wrap
    ends iterations, as bytes_ratio must count the whole iteration."""
    if job.phases is not None:
        return 2 * (job.compute_ms + 4 * job.compute_jitter_ms) + 50.0
    return min(max(job.compute_ms / 4, 5.0), 50.0)


def compute_jitter_ms(scenario: Scenario, seed: int) -> dict[str, list[float]]:
    """Per job, the ms added to each iteration's first compute phase (0 without jitter).

    Gaussian with the job's ``compute_jitter_ms`` as standard deviation, never taking the
    phase below 0 ms, seeded by (seed, job name) so that every backend draws the same
    sequence for the same seed.
    """
    out = {}
    for job in scenario.jobs:
        first = job.phase_list()[0].compute_ms
        if not job.compute_jitter_ms:
            out[job.name] = [0.0] * job.iterations
            continue
        rng = random.Random(f"{seed}/{job.name}/compute")
        out[job.name] = [max(-first, rng.gauss(0.0, job.compute_jitter_ms))
                         for _ in range(job.iterations)]
    return out


def phase_bytes(job: ScenarioJob) -> list[int]:
    """Bytes per worker in each phase of an iteration: the shares of the iteration's
    bytes, rounded so that they add up exactly."""
    total, cum, out = job.comm_bytes_per_worker(), 0.0, []
    for phase in job.phase_list():
        prev = round(cum * total)
        cum += phase.share
        out.append(round(min(cum, 1.0) * total) - prev)
    out[-1] += total - sum(out)
    return out
