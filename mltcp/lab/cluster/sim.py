"""The cluster simulator's loop: jobs arrive, wait in a queue, get GPUs, train, leave.

Between two scheduling moments (an arrival, a job's last iteration) the set of running
jobs is fixed and the fluid engine runs them (:mod:`mltcp.lab.models.fluid_engine`);
at each moment the engine stops (``stop_on_job_done``), finished jobs free their GPUs,
the scheduler starts what fits, and the engine's state is rebuilt for the new set with
every running job's progress carried over (:func:`mltcp.lab.models.fluid_engine.carry_over`).
Rates are recomputed for every active flow at the rebuild.

What a job's times mean: arrival (it enters the queue), start (it gets its GPUs: JWT =
start - arrival), end (its last iteration's end: JCT = end - arrival).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mltcp.core import validate
from mltcp.core.aggressiveness import Aggressiveness
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.fabric import LeafSpine
from mltcp.lab.cluster.jobs import PlacedJob, check_costs, engine_state
from mltcp.lab.cluster.placement import POLICIES
from mltcp.lab.models import fluid_engine


@dataclass(frozen=True)
class JobRequest:
    """A job as it arrives: how many GPUs it asks for and what one iteration costs."""

    name: str
    arrival_s: float
    gpus: int
    compute_s: float
    gradient_bytes: float
    iterations: int

    def __post_init__(self) -> None:
        field = f"jobs[{self.name}]"
        validate.number(self.arrival_s, f"{field}.arrival_s", 0, 1e9, "0")
        validate.integer(self.gpus, f"{field}.gpus", 1, 1 << 20, "8")
        check_costs(field, self.compute_s, self.gradient_bytes, self.iterations)


@dataclass(frozen=True)
class JobOutcome:
    name: str
    gpus: int
    servers: int
    arrival_s: float
    start_s: float
    end_s: float

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def jwt_s(self) -> float:
        return self.start_s - self.arrival_s


@dataclass(frozen=True)
class ClusterResult:
    jobs: tuple[JobOutcome, ...]
    gpus: int
    events: int

    @property
    def makespan_s(self) -> float:
        return max(j.end_s for j in self.jobs) - min(j.arrival_s for j in self.jobs)

    def gpu_utilisation(self) -> float:
        """GPU-seconds held by jobs over GPU-seconds the cluster had in the makespan."""
        held = sum(j.gpus * (j.end_s - j.start_s) for j in self.jobs)
        return held / (self.gpus * self.makespan_s) if self.makespan_s > 0 else 0.0

    def jct_summary(self) -> dict[str, float]:
        jct = np.array([j.jct_s for j in self.jobs])
        return {"mean": float(jct.mean()), "p50": float(np.percentile(jct, 50)),
                "p90": float(np.percentile(jct, 90)), "p99": float(np.percentile(jct, 99))}


def poisson_arrivals(n: int, jobs_per_hour: float, rng: random.Random,
                     make: Callable[[int, float, random.Random], JobRequest]
                     ) -> list[JobRequest]:
    """``n`` jobs with exponential gaps at ``jobs_per_hour``; ``make(i, arrival_s, rng)``
    builds each."""
    t, out = 0.0, []
    for i in range(n):
        out.append(make(i, t, rng))
        t += rng.expovariate(jobs_per_hour / 3600.0)
    return out


class ClusterSim:
    """FIFO queue x a placement policy over ``fabric``; ``f`` None = fair sharing."""

    def __init__(self, fabric: LeafSpine, requests: Sequence[JobRequest], policy: str,
                 f: Aggressiveness | None, seed: int = 0, f_steps: int = 8) -> None:
        if policy not in POLICIES:
            raise SpecError("placement", f"unknown policy {policy!r}",
                            f"use one of: {', '.join(POLICIES)}")
        too_big = [r.name for r in requests if r.gpus > fabric.gpus]
        if too_big:
            raise SpecError(f"jobs[{too_big[0]}].gpus", f"more than the cluster's {fabric.gpus}",
                            "ask for fewer GPUs or give the cluster more servers")
        self.fabric, self.policy, self.f = fabric, POLICIES[policy], f
        self.requests = sorted(requests, key=lambda r: r.arrival_s)
        self.rng = random.Random(seed)
        self.seed, self.f_steps = seed, f_steps

    def run(self, max_events: int = 10**9) -> ClusterResult:
        free = np.full(self.fabric.servers, self.fabric.gpus_per_server)
        n_iter = max((r.iterations for r in self.requests), default=1)
        by_name = {r.name: r for r in self.requests}
        arrivals, queue = list(self.requests), []
        running: list[PlacedJob] = []          # in the engine state's job order
        started: dict[str, float] = {}
        outcomes: list[JobOutcome] = []
        st: fluid_engine.EngineState | None = None
        t, events = 0.0, 0

        def rebuild(jobs: list[PlacedJob]) -> None:
            nonlocal st, events, running
            new = None
            if jobs:
                new = engine_state(self.fabric, jobs, self.f, self.seed, self.f_steps,
                                   n_iter=n_iter, stop_on_job_done=True)
                if st is not None:
                    was = {j.name: i for i, j in enumerate(running)}
                    fluid_engine.carry_over(st, new, [(was[j.name], i) for i, j in
                                                      enumerate(jobs) if j.name in was], t)
                else:
                    new.clock[0] = t
            if st is not None:
                events += st.events
            st, running = new, list(jobs)

        while arrivals or queue or running:
            while arrivals and arrivals[0].arrival_s <= t:
                queue.append(arrivals.pop(0))
            starting = []
            while queue:                                      # FIFO: the head waits
                head = queue[0]
                where = self.policy(self.fabric, free, head.gpus, self.rng)
                if where is None:
                    break
                queue.pop(0)
                for server, n in where:
                    free[server] -= n
                starting.append(PlacedJob(head.name, where, head.compute_s,
                                          head.gradient_bytes, head.iterations, start_s=t))
                started[head.name] = t
            if starting:
                rebuild(running + starting)
            next_arrival = arrivals[0].arrival_s if arrivals else math.inf
            if st is None:
                if not arrivals:
                    raise SpecError("jobs", f"{queue[0].name} never fits the free GPUs",
                                    "ask for fewer GPUs")
                t = next_arrival
                continue
            status = fluid_engine.advance_until(st, next_arrival, max_events - events)
            if status == fluid_engine.STUCK:
                raise SpecError("cluster", "flows with bytes left get no capacity",
                                "give every link a rate > 0")
            if status == fluid_engine.TOO_MANY_EVENTS:
                raise SpecError("max_events", f"more than {max_events} events",
                                "raise max_events or simulate fewer jobs")
            t = next_arrival if status == fluid_engine.RUNNING else st.t
            done = [i for i in range(len(running)) if not st.running[i]]
            if not done:
                continue
            for i in done:
                job = running[i]
                outcomes.append(JobOutcome(
                    job.name, job.gpu_count, len(job.gpus), by_name[job.name].arrival_s,
                    started[job.name], float(st.end[i, job.iterations - 1])))
                for server, n in job.gpus:
                    free[server] += n
            rebuild([j for i, j in enumerate(running) if i not in done])
        if st is not None:
            events += st.events
        return ClusterResult(tuple(sorted(outcomes, key=lambda o: o.name)), self.fabric.gpus,
                             events)
