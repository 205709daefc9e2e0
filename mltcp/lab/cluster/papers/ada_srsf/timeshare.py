"""The ada-srsf paper's cluster as its released simulator runs it: GPUs time-shared by
memory, compute tasks queued on each GPU, all-reduces admitted whole through a gate and
sharing each NIC by Eq. 5.

The paper's simulator (github.com/HKBU-HPML/dl-scheduling, ``online/``, commit "finish
ICDCS2020 experiments"; ``job_master.py``'s ``job_scheduler.schedule`` is its loop, the
paper's Algorithm 3) steps time by 1 ms; this one jumps from event to event and keeps
the order of one step at each: tasks and all-reduces that end, arrivals, placement,
admission of all-reduces, then compute tasks on idle GPUs.  What it models:

* **Placement** (:mod:`.shared_placement`): a job is placed as soon as ``n`` GPUs have
  memory for it (``GPU_MEMORY_MB`` each, the code's ``gpu(mem=32768)``; a job's
  ``train_mem`` is Table III's GPU memory usage, :data:`.setup.ADA_GPU_MEMORY_MB`), the
  queue tried in SRSF order (``allocate`` with ``ssf``: total compute GPU-time), none
  blocking another.  A GPU holds as many jobs as its memory takes.
* **Compute** (``cluster.py``, ``gpu.get_avail_compute``; Algorithm 3 lines 24-31): an
  idle GPU runs the compute of the job on it, among those whose worker there has not
  computed this iteration yet, of least remaining compute service
  (``remain_compute_cumul_workload``: compute GPU-time left over all its workers), ties
  to the job placed there first; a task runs to its end (non-preemptive).  The code
  runs ``t_f`` and ``t_b`` as two tasks; here one task of ``compute_s`` (the catalogue
  keeps their sum), so a job that becomes ready mid-iteration cannot slip in between
  another's forward and backward pass.
* **Communication** (``job_master.py``, ``schedule``; ``job.py``): when every worker of
  a job has computed, a job on one server synchronises at once; a job on several
  servers all-reduces its whole model (``gradient_bytes``, whatever its server count),
  admitted by the network's gate (:mod:`.contention`: SRSF(n), AdaDUAL or none) in
  SRSF order of remaining compute service, re-tried whenever an all-reduce ends; a
  refused job waits and sends nothing.  Admitted, it runs to its end at Eq. 5's rate of
  its busiest server, which changes as tasks come and go.  Then the next iteration's
  compute starts.
* **Times**: JCT = end - arrival; start = placement; ``held_s`` = end - start (time
  placed); ``dedicated_s``: the iterations alone (compute, plus one all-reduce alone,
  ``β M``, on several servers).  GPU utilisation is the paper's (``gpu.active_time``):
  GPU-seconds spent computing over the GPUs' time in the makespan
  (:class:`TimeSharedResult`).

``released_checks`` runs AdaDUAL's check as the released code does (each waiting job's
check advances the old task it reads by one 1 ms step, :mod:`.contention`); off, a task
moves at Eq. 5's rate only.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import ClusterView, Decision
from mltcp.lab.cluster.engine.simulator import ClusterResult, JobOutcome, check_requests
from mltcp.lab.cluster.papers.ada_srsf.contention import MB_BYTES, Gate, NicModel, gate_of
from mltcp.lab.cluster.papers.ada_srsf.setup import ADA_GPU_MEMORY_MB
from mltcp.lab.cluster.papers.ada_srsf.shared_placement import (
    LWF_COMM_S_PER_MB,
    PLACEMENTS,
    GpuPool,
    Placement,
)

# online/cluster.py, node.__init__: every GPU is made with 32768 MB (the paper's V100s
# have 16 GB; the code's figure is the one its results ran with).
GPU_MEMORY_MB = 32768.0
# ada-srsf Table III: t_f / (t_f + t_b) is 0.400 for each of its four models (to 1e-3).
FORWARD_SHARE = 0.4
# The code's step: what one check of an old task adds to its transfer (released_checks).
STEP_S = 1e-3

_COMM_END, _GPU_DONE, _ARRIVAL = 0, 1, 2


@dataclass(frozen=True)
class TimeSharedResult(ClusterResult):
    """A run on time-shared GPUs: ``busy_gpu_s`` GPU-seconds of compute in all."""

    busy_gpu_s: float = 0.0

    def gpu_utilisation(self) -> float:
        """The paper's utilisation: GPU-seconds computing over GPU-seconds of the
        makespan (its ``gpu.active_time / total_time``, averaged over the GPUs)."""
        span = self.makespan_s
        return self.busy_gpu_s / (self.gpus * span) if span > 0 else 0.0


@dataclass(eq=False)
class _Job:
    order: int                     # arrival order: ties in the queue
    req: JobRequest
    mem_mb: float
    message_bytes: float
    placed: int = -1               # placement order: ties on a GPU and in the gate
    gpus: list[int] = field(default_factory=list)
    servers: list[int] = field(default_factory=list)
    start_s: float = math.nan
    key: float = 0.0               # compute GPU-seconds left (the code's SRSF key)
    left: int = 0                  # iterations left, the current one included
    pending: int = 0               # workers yet to finish this iteration's compute
    # per worker: 0 forward pass next, 1 backward pass next, 2 both done this iteration
    # (a running pass keeps its GPU busy, so its worker cannot be picked twice)
    phase: list[int] = field(default_factory=list)

    @property
    def total_service(self) -> float:
        return self.req.compute_s * self.req.iterations * self.req.gpus


@dataclass
class _Comm:
    remaining: float               # bytes
    rate: float = 0.0              # bytes per second
    version: int = 0


def job_memory_mb(req: JobRequest) -> float:
    """A job's training memory per GPU: Table III's, by its catalogue model."""
    mem = ADA_GPU_MEMORY_MB.get(req.model)
    if mem is None:
        raise SpecError(f"jobs[{req.name}].model", f"{req.model or 'none'!r} has no GPU "
                        "memory in ada-srsf Table III, which GPU sharing needs",
                        f"use one of {', '.join(ADA_GPU_MEMORY_MB)}, or a scheduler that "
                        "gives each GPU one job (ada-srsf-excl)")
    return mem


class TimeShareSim:
    """One run of ``requests`` on ``fabric`` (its servers and GPUs; the network is the
    servers' NICs under ``nic``), placed by ``place``, all-reduces admitted by ``gate``."""

    def __init__(self, fabric: LeafSpine, requests: Sequence[JobRequest], place: Placement,
                 gate: Gate, seed: int = 0, nic: NicModel | None = None,
                 released_checks: bool = False, gpu_memory_mb: float = GPU_MEMORY_MB,
                 forward_share: float = FORWARD_SHARE, scheduler: str = "") -> None:
        check_requests(fabric, requests)
        self.fabric, self.place, self.gate = fabric, place, gate
        self.nic = nic or NicModel()
        self.released_checks = released_checks and gate.adaptive
        self.scheduler, self.forward_share = scheduler, forward_share
        reqs = sorted(requests, key=lambda r: (r.arrival_s, r.name))
        self.jobs = [_Job(i, r, job_memory_mb(r), r.gradient_bytes) for i, r in enumerate(reqs)]
        too_big = [j for j in self.jobs if j.mem_mb > gpu_memory_mb]
        if too_big:
            raise SpecError(f"jobs[{too_big[0].req.name}]", f"needs {too_big[0].mem_mb:g} MB "
                            f"a GPU, more than the GPUs' {gpu_memory_mb:g}",
                            "give the GPUs more memory")
        self.pool = GpuPool(fabric.servers, fabric.gpus_per_server, gpu_memory_mb,
                            random.Random(seed))
        n_gpus = fabric.servers * fabric.gpus_per_server
        self.on_gpu: list[list[tuple[_Job, int]]] = [[] for _ in range(n_gpus)]
        self.busy = [False] * n_gpus
        self.on_server: list[list[_Job]] = [[] for _ in range(fabric.servers)]
        self.comm: dict[_Job, _Comm] = {}
        self.queue: list[_Job] = []
        self.waiting: list[_Job] = []          # ready to all-reduce, not admitted
        self.reads: dict[_Job, _Job | None] = {}   # waiting job -> the task its check reads
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = self.placed = self.handled = 0
        self.freed = False                     # a job ended in this batch of events
        self.t = self.comm_t = 0.0
        self.outcomes: list[JobOutcome] = []
        for job in self.jobs:
            self._push(job.req.arrival_s, _ARRIVAL, job)

    # -- events

    def _push(self, t: float, kind: int, what: object) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, what))

    def run(self) -> TimeSharedResult:
        """Every job to its end; the outcomes as the cluster simulator reports them."""
        while self.events:
            self.t = t = self.events[0][0]
            self.freed = ended = False
            arrived = False
            ready: list[_Job] = []          # jobs now waiting to all-reduce
            dirty: set[int] = set()         # GPUs that may start a task
            while self.events and self.events[0][0] == t:
                _, _, kind, what = heapq.heappop(self.events)
                self.handled += 1
                if kind == _GPU_DONE:
                    job = self._computed(what, dirty)           # type: ignore[arg-type]
                    if job is not None:
                        ready.append(job)
                elif kind == _COMM_END:
                    job, version = what                          # type: ignore[misc]
                    c = self.comm.get(job)
                    if c is None or c.version != version:
                        continue                                 # rescheduled since
                    self._advance_comm(t)
                    del self.comm[job]
                    for s in job.servers:
                        self.on_server[s].remove(job)
                    ended = True
                    self._synchronise(job, dirty)
                else:
                    self.queue.append(what)                      # type: ignore[arg-type]
                    arrived = True
            if (arrived or self.freed) and self.queue:
                self._place_queue(dirty)
            if ended or ready:
                self._admit(ready, ended)
            for g in sorted(dirty):
                self._dispatch(g)
        if self.queue:
            raise SpecError("jobs", f"{self.queue[0].req.name} never fits the GPUs' memory",
                            "ask for fewer GPUs")
        busy = sum(j.req.gpus * j.req.iterations * j.req.compute_s for j in self.jobs)
        return TimeSharedResult(tuple(sorted(self.outcomes, key=lambda o: o.name)),
                                self.fabric.gpus, self.handled, self.scheduler,
                                self.gate.name, busy_gpu_s=busy)

    # -- placement

    def _place_queue(self, dirty: set[int]) -> None:
        self.queue.sort(key=lambda j: (j.total_service, j.order))
        for job in list(self.queue):
            gpus = self.place(self.pool, job.req.gpus, job.mem_mb)
            if gpus is not None:
                self.queue.remove(job)
                self._start(job, gpus, dirty)

    def _start(self, job: _Job, gpus: list[int], dirty: set[int]) -> None:
        pool, req = self.pool, job.req
        job.placed, self.placed = self.placed, self.placed + 1
        job.gpus = list(gpus)
        job.servers = list(dict.fromkeys(pool.server_of(g) for g in gpus))
        job.start_s, job.key, job.left = self.t, job.total_service, req.iterations
        job.pending, job.phase = req.gpus, [0] * req.gpus
        work = req.compute_s * req.iterations
        if len(job.servers) > 1:
            work += self._comm_workload(job) * req.iterations
        for w, g in enumerate(gpus):
            pool.rest_mb[g] -= job.mem_mb
            pool.makespan_s[g] += work
            self.on_gpu[g].append((job, w))
            dirty.add(g)

    def _comm_workload(self, job: _Job) -> float:
        """One all-reduce in a GPU's makespan (the code's ``comm_duration_once``)."""
        return job.message_bytes / MB_BYTES * LWF_COMM_S_PER_MB

    # -- compute

    def _dispatch(self, g: int) -> None:
        """An idle GPU starts the next pass of its job of least remaining compute
        service (ties: the job placed there first)."""
        if self.busy[g]:
            return
        best, best_w = None, 0
        for job, w in self.on_gpu[g]:
            if job.phase[w] < 2 and (best is None or job.key < best.key):
                best, best_w = job, w
        if best is None:
            return
        fwd = best.req.compute_s * self.forward_share
        took = fwd if best.phase[best_w] == 0 else best.req.compute_s - fwd
        self.busy[g] = True
        self._push(self.t + took, _GPU_DONE, (g, best, best_w, took))

    def _computed(self, what: tuple[int, _Job, int, float], dirty: set[int]) -> _Job | None:
        """A pass ended; its job if that was its last worker's backward pass and the job
        must now all-reduce across servers (a one-server job goes on at once)."""
        g, job, w, took = what
        self.busy[g] = False
        dirty.add(g)
        self.pool.makespan_s[g] -= took
        job.key -= took
        job.phase[w] += 1
        if job.phase[w] < 2:
            return None
        job.pending -= 1
        if job.pending:
            return None
        if len(job.servers) == 1:
            self._synchronise(job, dirty)
            return None
        return job

    def _synchronise(self, job: _Job, dirty: set[int]) -> None:
        """The iteration's all-reduce is over (or not needed): the next iteration, or the
        job's end (its GPU memory freed: :attr:`freed`)."""
        if len(job.servers) > 1:
            once = self._comm_workload(job)
            for g in job.gpus:
                self.pool.makespan_s[g] -= once
        job.left -= 1
        if job.left > 0:
            job.pending = job.req.gpus
            job.phase = [0] * job.req.gpus
            dirty.update(job.gpus)
            return
        req = job.req
        self.freed = True
        for g in job.gpus:
            self.pool.rest_mb[g] += job.mem_mb
            self.on_gpu[g] = [e for e in self.on_gpu[g] if e[0] is not job]
        alone = req.compute_s + (self.nic.alone_s(job.message_bytes)
                                 if len(job.servers) > 1 else 0.0)
        self.outcomes.append(JobOutcome(req.name, req.gpus, len(job.servers), req.arrival_s,
                                        job.start_s, self.t, req.iterations * alone,
                                        self.t - job.start_s, 0, req.model,
                                        iterations=req.iterations))

    # -- communication

    def _advance_comm(self, t: float) -> None:
        dt = t - self.comm_t
        if dt > 0:
            for c in self.comm.values():
                c.remaining -= c.rate * dt
        self.comm_t = t

    def _admit(self, ready: list[_Job], ended: bool) -> None:
        """Admit waiting all-reduces in SRSF order through the gate, in passes until one
        admits none (the code re-tries every waiting job each 1 ms step), then set every
        running one's rate: Eq. 5 on its busiest server, and with ``released_checks`` one
        more step's worth for each waiting job whose check reads it.

        A refused job stays refused until an all-reduce ends or one is admitted (which
        can change the old task AdaDUAL compares it with): with neither, only the newly
        ready jobs are tried."""
        self._advance_comm(self.t)
        gate, judge, on = self.gate, self.nic.judge, self.on_server
        trying, others = (self.waiting + ready, []) if ended else (ready, self.waiting)
        changed = ended
        while True:
            admitted, refused = False, []
            for job in sorted(trying, key=lambda j: (j.key, j.placed)):
                if gate.check(job.servers, job.message_bytes, on, self._remaining, judge)[0]:
                    admitted = True
                    for s in job.servers:
                        on[s].append(job)
                    self.comm[job] = _Comm(job.message_bytes)
                else:
                    refused.append(job)
            self.waiting = others + refused
            if not admitted:
                break
            changed, trying, others = True, self.waiting, []
        kept = self.waiting
        reads: dict[_Job, int] = {}
        if self.released_checks:
            if changed:
                self.reads = {job: gate.check(job.servers, job.message_bytes, on,
                                              self._remaining, judge)[1] for job in kept}
            else:
                for job in ready:
                    self.reads[job] = gate.check(job.servers, job.message_bytes, on,
                                                 self._remaining, judge)[1]
            for old in self.reads.values():
                if old is not None:
                    reads[old] = reads.get(old, 0) + 1
        for job, c in self.comm.items():
            # each read adds one step of transfer at the task's rate: (1 + reads) x
            rate = self.nic.rate(max(len(on[s]) for s in job.servers)) * (1 + reads.get(job, 0))
            if rate != c.rate:
                c.rate = rate
                c.version += 1
                self._push(self.t + max(c.remaining, 0.0) / rate, _COMM_END, (job, c.version))

    def _remaining(self, job: _Job) -> float:
        return self.comm[job].remaining


@dataclass(frozen=True)
class TimeShareScheduler:
    """A scheduler of the ada-srsf paper run as its released simulator runs it
    (:class:`TimeShareSim`): SRSF, ``placement`` (a key of
    :data:`.shared_placement.PLACEMENTS`), all-reduces through the gate of the run's
    network scheme (:func:`.contention.gate_of`).  The cluster simulator hands it the
    whole run (:meth:`simulate`); it makes no step-by-step decisions."""

    name: str
    placement: str = "lwf-1"
    released_checks: bool = True
    round_s: float = 0.0

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise SpecError(f"scheduler[{self.name}].placement",
                            f"unknown placement {self.placement!r}",
                            f"use one of: {', '.join(PLACEMENTS)}")

    def decide(self, view: ClusterView) -> Decision:
        raise SpecError("scheduler", f"{self.name} time-shares GPUs and runs whole runs "
                        "only", "run it with ClusterSim.run (mltcp cluster run)")

    def gate(self, network: Network) -> Gate:
        """The gate ``network`` stands for here; a one-line SpecError naming this
        scheduler for a scheme the paper's simulator cannot run."""
        try:
            return gate_of(network)
        except SpecError as err:
            raise SpecError(err.field, f"{err.problem}, which scheduler {self.name!r} runs",
                            err.fix) from None

    def check_network(self, network: Network) -> None:
        """Refuse (one line) a network scheme this scheduler cannot run with."""
        self.gate(network)

    def simulate(self, fabric: LeafSpine, requests: Sequence[JobRequest], network: Network,
                 seed: int) -> TimeSharedResult:
        place = PLACEMENTS[self.placement](fabric.gpus)
        return TimeShareSim(fabric, requests, place, self.gate(network), seed,
                            released_checks=self.released_checks, scheduler=self.name).run()
