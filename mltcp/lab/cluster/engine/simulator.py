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
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest, PlacedJob, engine_state
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import (
    Allocation,
    ClusterView,
    Decision,
    QueuedJob,
    RunningJob,
    Scheduler,
)
from mltcp.lab.models import fluid_engine

# The engine keeps each running job's last iterations' records only (a ring): the
# simulator reads a job's latest iteration time and its last iteration's end.
RECORDS = 2

__all__ = ["ClusterResult", "ClusterSim", "JobOutcome", "JobRequest", "RunProgress",
           "check_requests", "poisson_arrivals"]


@dataclass(frozen=True)
class RunProgress:
    """How far a run has got, for progress lines during a long one: the simulated time,
    the iterations finished of all its jobs' iterations, and the makespan no run of
    these jobs can beat (each job's arrival plus its iterations' compute alone)."""

    t: float
    iterations_done: int
    iterations: int
    makespan_floor_s: float

    @property
    def fraction(self) -> float:
        return self.iterations_done / self.iterations if self.iterations else 1.0


@dataclass(frozen=True)
class JobOutcome:
    """A finished job: ``servers`` and ``dedicated_s`` are of its first placement
    (``dedicated_s``: its iterations alone on the cluster on those GPUs, on
    collision-free paths: :meth:`PlacedJob.dedicated_iteration_s`);
    ``preemptions``: times it was sent back to the queue; ``iterations``: how many
    it ran (held_s / iterations is its mean iteration time)."""

    name: str
    gpus: int
    servers: int
    arrival_s: float
    start_s: float
    end_s: float
    dedicated_s: float = 0.0
    held_s: float = 0.0             # time on GPUs (end - start less time preempted)
    preemptions: int = 0
    model: str = ""
    iterations: int = 0             # the job's iterations (0: not recorded)

    @property
    def jct_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def jwt_s(self) -> float:
        return self.start_s - self.arrival_s

    @property
    def slowdown(self) -> float:
        """JCT over the job's dedicated run time (1 = as if alone and never waiting)."""
        return self.jct_s / self.dedicated_s if self.dedicated_s > 0 else math.nan

    @property
    def run_slowdown(self) -> float:
        """Time on GPUs over the dedicated run time: what sharing the network and its
        routing cost the job (its own flows colliding included), its waiting left out
        (1 = as if alone on collision-free paths)."""
        return self.held_s / self.dedicated_s if self.dedicated_s > 0 else math.nan


@dataclass(frozen=True)
class ClusterResult:
    jobs: tuple[JobOutcome, ...]
    gpus: int
    events: int
    scheduler: str = ""
    network: str = ""

    @property
    def makespan_s(self) -> float:
        return max(j.end_s for j in self.jobs) - min(j.arrival_s for j in self.jobs)

    def gpu_utilisation(self) -> float:
        """GPU-seconds held by jobs over GPU-seconds the cluster had in the makespan
        (a preempted job's time off its GPUs excluded)."""
        held = sum(j.gpus * j.held_s for j in self.jobs)
        return held / (self.gpus * self.makespan_s) if self.makespan_s > 0 else 0.0

    def jct_summary(self) -> dict[str, float]:
        jct = np.array([j.jct_s for j in self.jobs])
        return {"mean": float(jct.mean()), "p50": float(np.percentile(jct, 50)),
                "p90": float(np.percentile(jct, 90)), "p95": float(np.percentile(jct, 95)),
                "p99": float(np.percentile(jct, 99))}


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


# Peak bytes per job of a run in flight (its request, queue entry, engine rows, records
# and outcome), per job of each seed's job list, and per job of each finished run's
# outcomes (what an experiment keeps for its report), measured on `mltcp cluster run`
# and rounded up; the fabric's own share is LeafSpine.memory_bytes.
JOB_BYTES = 2048
REQUEST_BYTES = 256
OUTCOME_BYTES = 640


def memory_bytes(fabric: LeafSpine, jobs: int, seeds: int = 1, runs: int = 1) -> int:
    """An experiment's memory: one run of ``jobs`` jobs in flight on ``fabric``, the job
    lists of ``seeds`` seeds and the outcomes of ``runs`` finished runs."""
    return fabric.memory_bytes + jobs * (JOB_BYTES + seeds * REQUEST_BYTES
                                         + runs * OUTCOME_BYTES)


def check_memory(fabric: LeafSpine, jobs: int, field: str, seeds: int = 1,
                 runs: int = 1) -> None:
    """Refuse an experiment whose :func:`memory_bytes` exceed the budget, before its job
    lists are drawn: ``field`` names what sized it."""
    validate.within_memory(
        memory_bytes(fabric, jobs, seeds, runs), field,
        f"{jobs:,} jobs x {runs} runs ({seeds} seeds) on {fabric.gpus:,} GPUs",
        "run fewer jobs, or fewer seeds, schedulers or networks at once")


def check_requests(fabric: LeafSpine, requests: Sequence[JobRequest]) -> None:
    """The simulator's rules for a job list: every job fits the cluster, every name is
    its own (a one-line SpecError naming the job otherwise), and a run of them fits the
    memory budget."""
    check_memory(fabric, len(requests), "jobs")
    too_big = [r.name for r in requests if r.gpus > fabric.gpus]
    if too_big:
        raise SpecError(f"jobs[{too_big[0]}].gpus", f"more than the cluster's {fabric.gpus}",
                        "ask for fewer GPUs or give the cluster more servers")
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SpecError(f"jobs[{dup}]", "appears twice", "give every job its own name")


@dataclass
class _Segment:
    """A running job's stretch on one allocation (a preempted job gets a new one)."""

    job: PlacedJob
    request: JobRequest
    done_before: int
    attained_before: float


@dataclass
class _Record:
    start_s: float
    servers: int
    dedicated_s: float
    held_s: float = 0.0
    preemptions: int = 0


class ClusterSim:
    """``scheduler`` (queue order x placement, or its own rule) over ``fabric``, the
    network sharing links by ``network``'s scheme."""

    def __init__(self, fabric: LeafSpine, requests: Sequence[JobRequest],
                 scheduler: Scheduler, network: Network, seed: int = 0,
                 f_steps: int = 8) -> None:
        check_requests(fabric, requests)
        self.fabric, self.scheduler, self.network = fabric, scheduler, network
        self.requests = sorted(requests, key=lambda r: (r.arrival_s, r.name))
        self.rng = random.Random(seed)
        self.seed, self.f_steps = seed, f_steps

    def run(self, max_events: int = 10**9,
            watch: Callable[[Run], None] | None = None) -> ClusterResult:
        """The run to its end.  A scheduler with a ``simulate(fabric, requests, network,
        seed)`` of its own models the cluster its own way and runs it there (Ada-SRSF's
        time-shared GPUs: :mod:`mltcp.lab.cluster.papers.ada_srsf.timeshare`).
        ``watch`` is called with the run several times a second of wall time while the
        engine runs (a long run's progress lines)."""
        own = getattr(self.scheduler, "simulate", None)
        if own is not None:
            return own(self.fabric, self.requests, self.network, self.seed)
        run = self.start()
        run.watch = watch
        return run.run(max_events)

    def start(self) -> Run:
        """A run at time 0, to be stepped by a caller that decides itself (the RL
        scheduler's training environment) instead of :meth:`run`."""
        return Run(self)


class Run:
    """One run's state: the engine's jobs (``segments``, in the engine's job order), the
    queue, the free GPUs, and the records of the jobs' times."""

    def __init__(self, sim: ClusterSim) -> None:
        self.sim, self.fabric = sim, sim.fabric
        self.free = np.full(sim.fabric.servers, sim.fabric.gpus_per_server)
        self.arrivals = list(sim.requests)
        self.queue: list[QueuedJob] = []
        self.segments: list[_Segment] = []
        self.records: dict[str, _Record] = {}
        self.outcomes: list[JobOutcome] = []
        self.st: fluid_engine.EngineState | None = None
        self.t, self.events = 0.0, 0
        self.watch: Callable[[Run], None] | None = None

    def progress(self) -> RunProgress:
        """How far the run has got (:class:`RunProgress`), at the engine's clock."""
        done = sum(o.iterations for o in self.outcomes) + sum(q.done for q in self.queue)
        for i, seg in enumerate(self.segments):
            done += seg.done_before + fluid_engine.iterations_done(self.st, i)
        reqs = self.sim.requests
        floor = max((r.arrival_s + r.iterations * r.compute_s for r in reqs), default=0.0)
        t = self.st.t if self.st is not None and self.segments else self.t
        return RunProgress(max(t, self.t), done, sum(r.iterations for r in reqs), floor)

    def _watched(self) -> None:
        if self.watch is not None:
            self.watch(self)

    # -- what the scheduler sees

    def running(self) -> tuple[RunningJob, ...]:
        return self._running_of(self.segments)

    def view(self) -> ClusterView:
        return ClusterView(self.fabric, self.t, self.free.copy(), self.running(),
                           tuple(self.queue), self.sim.rng)

    # -- changes to the running set

    def _rebuild(self, segments: list[_Segment]) -> None:
        """A new engine state for ``segments`` (kept ones are the same objects as in
        :attr:`segments`), carrying over those already running."""
        sim, new = self.sim, None
        if segments:
            now = self._running_of(segments)
            new = engine_state(self.fabric, [s.job for s in segments], sim.network.f,
                               sim.seed, sim.f_steps, ring=RECORDS,
                               stop_on_job_done=True,
                               job_weights=sim.network.job_weights(now, self.t))
            if self.st is not None:
                was = {id(s): i for i, s in enumerate(self.segments)}
                pairs = [(was[id(s)], i) for i, s in enumerate(segments) if id(s) in was]
                fluid_engine.carry_over(self.st, new, pairs, self.t)
            else:
                fluid_engine.set_clock(new, self.t)
        if self.st is not None:
            self.events += self.st.events
        self.st, self.segments = new, list(segments)

    def _running_of(self, segments: list[_Segment]) -> tuple[RunningJob, ...]:
        """``segments`` as running jobs: the progress of those in the engine now, none
        yet for those about to start."""
        index = {id(s): i for i, s in enumerate(self.segments)}
        out = []
        for seg in segments:
            i = index.get(id(seg))
            done, it_s = 0, 0.0
            if i is not None and self.st is not None:
                done = fluid_engine.iterations_done(self.st, i)
                if done:
                    start, end = fluid_engine.iteration_span(self.st, i, done - 1)
                    it_s = end - start
            held = (self.t - seg.job.start_s) * seg.job.gpu_count
            out.append(RunningJob(seg.job, seg.request, seg.done_before + done,
                                  seg.attained_before + held, it_s))
        return tuple(out)

    def _start(self, job: QueuedJob, where: Allocation) -> _Segment:
        req = job.request
        placed = PlacedJob(req.name, where.gpus, req.compute_s, req.gradient_bytes,
                           job.remaining, start_s=self.t, spines=where.spines)
        for server, n in where.gpus:
            self.free[server] -= n
        if req.name not in self.records:
            self.records[req.name] = _Record(
                self.t, len(where.gpus),
                req.iterations * placed.dedicated_iteration_s(self.fabric, self.sim.seed))
        return _Segment(placed, req, job.done, job.attained_gpu_s)

    def _stop(self, i: int, preempted: bool) -> None:
        seg = self.segments[i]
        rec = self.records[seg.request.name]
        for server, n in seg.job.gpus:
            self.free[server] += n
        end = self.t
        if not preempted:
            end = fluid_engine.iteration_span(self.st, i, seg.job.iterations - 1)[1]
        rec.held_s += end - seg.job.start_s
        if preempted:
            rec.preemptions += 1
            done = seg.done_before + fluid_engine.iterations_done(self.st, i)
            self.queue.append(QueuedJob(seg.request, done, seg.attained_before +
                                        (self.t - seg.job.start_s) * seg.job.gpu_count))
            return
        req = seg.request
        self.outcomes.append(JobOutcome(req.name, req.gpus, rec.servers, req.arrival_s,
                                        rec.start_s, end, rec.dedicated_s, rec.held_s,
                                        rec.preemptions, req.model, req.iterations))

    def _schedule(self) -> None:
        self.apply(self.sim.scheduler.decide(self.view()))

    def apply(self, decision: Decision) -> None:
        """Preempt and start what ``decision`` says (one rebuild of the engine)."""
        gone = {name for name in decision.preempt}
        keep = []
        for i, seg in enumerate(self.segments):
            if seg.request.name in gone:
                self._stop(i, preempted=True)
            else:
                keep.append(seg)
        started = {job.name for job, _ in decision.start}
        if not decision.start and not gone:
            return
        self.queue = [q for q in self.queue if q.name not in started]
        self._rebuild(keep + [self._start(job, where) for job, where in decision.start])

    def _hold_back(self) -> None:
        """Let a network that shifts jobs in time hold back running jobs' communication.

        A scheme that overrides :meth:`Network.delays` (Cassini's time-shifts and drift
        correction) is told when each running job's communication starts: the one it
        computes towards, or the one under way (plus holds already asked for it); it
        answers how long to hold each job's next communication back (seconds, or None).
        A computing job's compute ends later; a communicating job's next iteration
        computes longer.  For the other schemes nothing is computed here."""
        st, network = self.st, self.sim.network
        if st is None or type(network).delays is Network.delays:
            return
        running = [fluid_engine.is_running(st, j) for j in range(len(self.segments))]
        comm = np.array([fluid_engine.next_comm_start(st, j) if on else np.nan
                         for j, on in enumerate(running)])
        delays = network.delays(self.fabric, self.sim.seed, self.running(), comm, self.t)
        for j, hold in enumerate(delays or ()):
            if hold is not None and hold > 0 and running[j]:
                fluid_engine.delay_next_comm(st, j, hold)

    # -- the loop (public steps: an environment that decides itself drives them)

    @property
    def finished(self) -> bool:
        return not (self.arrivals or self.queue or self.segments)

    def admit(self) -> None:
        """Queue the jobs that have arrived by now."""
        while self.arrivals and self.arrivals[0].arrival_s <= self.t:
            self.queue.append(QueuedJob(self.arrivals.pop(0)))

    def next_arrival_s(self) -> float:
        return self.arrivals[0].arrival_s if self.arrivals else math.inf

    def advance(self, moment: float, max_events: int) -> None:
        """Run the engine to ``moment`` or the first job's end before it, whichever
        comes first, and retire the jobs that ended (their GPUs free); with nothing
        running, time jumps to ``moment``."""
        if not self.segments:
            self.t = max(self.t, moment)
            return
        status = fluid_engine.advance_until(self.st, moment, max_events - self.events,
                                            self._watched if self.watch else None)
        if status == fluid_engine.STUCK:
            raise SpecError("cluster", "flows with bytes left get no capacity",
                            "give every link a rate > 0")
        if status == fluid_engine.TOO_MANY_EVENTS:
            raise SpecError("max_events", f"more than {max_events} events",
                            "raise max_events or simulate fewer jobs")
        self.t = moment if status == fluid_engine.RUNNING else self.st.t
        done = [i for i in range(len(self.segments))
                if not fluid_engine.is_running(self.st, i)]
        if done:
            for i in done:
                self._stop(i, preempted=False)
            self._rebuild([s for i, s in enumerate(self.segments) if i not in done])

    def result(self) -> ClusterResult:
        events = self.events + (self.st.events if self.st is not None else 0)
        sched = getattr(self.sim.scheduler, "name", "")
        return ClusterResult(tuple(sorted(self.outcomes, key=lambda o: o.name)),
                             self.fabric.gpus, events, sched, self.sim.network.name)

    def run(self, max_events: int) -> ClusterResult:
        round_s = float(self.sim.scheduler.round_s)
        next_round = round_s if round_s > 0 else math.inf
        while not self.finished:
            self.admit()
            self._schedule()
            self._hold_back()
            if not self.segments:
                if not self.arrivals:
                    raise SpecError("jobs", f"{self.queue[0].name} never fits the free GPUs",
                                    "ask for fewer GPUs")
                self.t = self.next_arrival_s()
                continue
            self.advance(min(self.next_arrival_s(), next_round), max_events)
            if self.t >= next_round:
                next_round = self.t + round_s
        return self.result()
