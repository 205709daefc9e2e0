"""Ada-SRSF: SRSF job order, LWF-κ placement, and AdaDUAL's communication order.

The ada-srsf paper (Wang, Shi, Wang, Chu), sections IV-B (Theorems 1-2, Algorithms 2-3)
and V-A (baselines).  Its schedulers run two ways here (:data:`SCHEDULERS`):

* **As the paper's released simulator runs them** (``ada-srsf``, ``srsf/lwf-1``,
  ``srsf/ff``, ``srsf/ls``, ``srsf/rand``; ``ada-srsf-exact``):
  :class:`~.timeshare.TimeShareScheduler` on :mod:`.timeshare`'s model of the paper's
  cluster: GPUs time-shared up to their memory, each all-reduce admitted whole by the
  network scheme's gate (``ada-dual``: AdaDUAL, ``srsf-n``: SRSF(n), ``fair``: none) and
  slowed by Eq. 5's contention penalty.  ``ada-srsf-exact`` reads an old task's exact
  remaining bytes in AdaDUAL's check, where the released code advances the task with
  every check (:mod:`.contention`).  These reproduce the paper's figures.
* **On this project's engine, one job per GPU** (``ada-srsf-excl``, ``srsf-excl/...``):
  the rest of this module.  The communication order becomes flow weights
  (:class:`CommOrderNetwork`), so that it can run beside MLTCP and fair sharing on the
  same cluster.  It keeps the paper's rules where the engine can express them, and says
  below where it cannot.

The exclusive variant has two halves, and so does this module:

* **Who gets GPUs** (:func:`ada_srsf`, :func:`srsf_lwf` and the placement baselines):
  the queue sorted by shortest remaining service first with ``E_J = 0`` (section
  IV-A, "Job Priority": a queued job's communication is unknown before it is
  placed), each job placed by LWF-κ (:mod:`.lwf`) if it fits, and no
  head-of-line blocking (Algorithm 3 lines 8-13 try every queued job).  Jobs are
  never preempted (the paper keeps a job on its GPUs once placed).
* **Whose all-reduce uses a server's network** (:class:`CommOrderNetwork`): the
  communication-ready jobs in SRSF order (Algorithm 3 lines 16-21), each started if
  AdaDUAL (Algorithm 2) allows: no other task on its servers, start; one task there,
  start only if ``M_new / M_old < b / (2 (b + η))`` (Theorem 2: sharing the link then
  beats waiting); two or more, wait.  The paper's baselines SRSF(n) cap a server at
  ``n`` concurrent tasks and accept any task under the cap; plain fair sharing is
  SRSF(∞).

How the communication order is expressed in this simulator, and where it differs.
The fluid engine shares links by weighted max-min with one weight per job, fixed
between two scheduling moments (:meth:`mltcp.lab.cluster.engine.network.Network.job_weights`).
At each moment the running jobs that span servers are sorted by remaining service
(``L_J`` with their known ``E_J``) and admitted in passes: pass 0 admits jobs by the
rule above starting from idle servers; the jobs it turned away are admitted by the
same rule in pass 1 (as if the pass-0 jobs' links were free again), and so on.  A job
admitted in pass ``t`` gets weight ``wait_weight ** t``: jobs of one pass share a
server's NIC equally (the paper's 2-way contention), a later pass's flows get what an
earlier pass leaves (with 1 vs 1e-3 the waiting job moves 0.1% as fast while the link
is busy and at full speed while the other job computes: "start when the link is
free"), and waiting jobs go in SRSF order as the link frees.  The differences:

* priorities are re-evaluated at scheduling moments (arrivals, job ends), not at each
  communication task's start: the engine has no callback at a flow's start;
* so the roles are fixed between moments: the job of less remaining service is always
  the "old" task and the other the "new" one, and the rule compares their whole
  per-iteration messages (``M_old`` should be the old task's *remaining* bytes at the
  new task's start, which a moment between iterations does not know);
* the paper's tasks are non-preemptive: a task running when a higher-priority one
  arrives keeps going, and the newcomer is judged by the rule.  Here priority acts on
  rates at every instant: a waiting job's flow that started while the link was free
  slows to the leftover when the prioritised job's flow starts;
* contention is per server (each server's NIC, the paper's model of a cluster on one
  non-blocking switch); spine links are shared by weight like any other link, and a
  job's weight applies on all its links;
* the engine's sharing has no contention penalty (the paper's ``(k - 1) η M``), so
  ``eta_over_b`` defaults to 0 and the threshold to 1/2; set it to model the
  threshold of a lossier network.

Weights cannot express "wait" exactly, nor non-preemptive tasks: the time-shared model
(:mod:`.timeshare`) admits each all-reduce through a gate instead, as the paper's code
does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.network import Network
from mltcp.lab.cluster.engine.scheduling import QueuedJob, RunningJob, Scheduler
from mltcp.lab.cluster.papers.ada_srsf.lwf import list_scheduling, lwf, remaining_workload
from mltcp.lab.cluster.papers.ada_srsf.timeshare import TimeShareScheduler
from mltcp.lab.cluster.schedulers.placement import first_fit, spread
from mltcp.lab.cluster.schedulers.queue import OrderKey, PlacementFn, QueueScheduler, placement_from

# Weights below this are all this: the engine's rates stay well inside float64 and
# tiers that deep share what the others leave.
MIN_WEIGHT = 1e-12


# --------------------------------------------------------------------------- job order


def paper_srsf(fabric: LeafSpine) -> OrderKey:
    """SRSF as the paper ranks jobs: remaining GPU-seconds of service, with ``E_J = 0``
    for a queued job and its known ``E_J`` for a running one."""

    def key(job: QueuedJob | RunningJob, now: float) -> tuple:
        servers = len(job.job.gpus) if isinstance(job, RunningJob) else None
        return (remaining_workload(fabric, job.request, job.done, servers),)

    return key


def _srsf_with(fabric: LeafSpine, name: str, place: PlacementFn) -> Scheduler:
    return QueueScheduler(name, paper_srsf(fabric), place, blocking=False)


def srsf_lwf(fabric: LeafSpine, kappa: int = 1) -> Scheduler:
    """SRSF order, LWF-κ placement (the paper's placement study varies κ), one job a
    GPU."""
    return _srsf_with(fabric, f"srsf-excl/lwf-{kappa}", lwf(kappa))


def ada_srsf(fabric: LeafSpine) -> Scheduler:
    """Ada-SRSF's job half with one job a GPU: SRSF with LWF-1 (its communication half
    is the network :func:`ada_dual`)."""
    return _srsf_with(fabric, "ada-srsf-excl", lwf(1))


def srsf_ff(fabric: LeafSpine) -> Scheduler:
    """Placement baseline FF (first fit) under the same order, one job a GPU."""
    return _srsf_with(fabric, "srsf-excl/ff", placement_from(first_fit))


def srsf_ls(fabric: LeafSpine) -> Scheduler:
    """Placement baseline LS (least-loaded GPUs) under the same order, one job a GPU."""
    return _srsf_with(fabric, "srsf-excl/ls", list_scheduling(fabric))


def srsf_rand(fabric: LeafSpine) -> Scheduler:
    """Placement baseline RAND (GPUs at random) under the same order, one job a GPU."""
    return _srsf_with(fabric, "srsf-excl/rand", placement_from(spread))


def time_shared(name: str, placement: str, released_checks: bool = True
                ) -> Callable[[LeafSpine], Scheduler]:
    """The scheduler ``name`` as the paper's simulator runs it (:mod:`.timeshare`)."""
    return lambda fabric: TimeShareScheduler(name, placement, released_checks)


# --------------------------------------------------------------------------- comm order


@dataclass(frozen=True)
class CommTask:
    """A job's per-iteration all-reduce as AdaDUAL sees it: the servers it occupies,
    its message (bytes each server sends), and its job's remaining service."""

    name: str
    servers: tuple[int, ...]
    message_bytes: float
    service: float


def threshold(eta_over_b: float) -> float:
    """Theorem 2's bound on ``M_new / M_old`` below which sharing beats waiting:
    ``b / (2 (b + η))``."""
    return 1.0 / (2.0 * (1.0 + eta_over_b))


def start_now(task: CommTask, on_servers: dict[int, list[CommTask]], max_tasks: int,
              ratio: float | None) -> bool:
    """Whether ``task`` starts beside the tasks already on its servers: Algorithm 2 when
    ``ratio`` is Theorem 2's threshold, the SRSF(``max_tasks``) cap when it is None.

    Algorithm 2 compares the new task with the one old task it found on the first of
    its servers that has one; a task on several servers that each carry a different
    old task contends with all of them, so here the rule must hold for each."""
    busiest = max((len(on_servers.get(s, ())) for s in task.servers), default=0)
    if busiest == 0:
        return True
    if busiest >= max_tasks:
        return False
    if ratio is None:
        return True
    old = {t.name: t for s in task.servers for t in on_servers.get(s, ())}
    return all(task.message_bytes < ratio * t.message_bytes for t in old.values())


def comm_passes(tasks: Sequence[CommTask], max_tasks: int,
                ratio: float | None) -> dict[str, int]:
    """Each task's admission pass: SRSF order (ties by name), pass 0 from idle servers,
    each later pass over the tasks the earlier ones turned away."""
    left = sorted(tasks, key=lambda t: (t.service, t.name))
    out: dict[str, int] = {}
    rank = 0
    while left:
        on: dict[int, list[CommTask]] = {}
        wait = []
        for task in left:
            if start_now(task, on, max_tasks, ratio):
                out[task.name] = rank
                for s in task.servers:
                    on.setdefault(s, []).append(task)
            else:
                wait.append(task)
        left, rank = wait, rank + 1
    return out


@dataclass(frozen=True)
class CommOrderNetwork(Network):
    """Fair sharing weighted by AdaDUAL's (``eta_over_b`` set) or SRSF(``max_tasks``)'s
    (``eta_over_b`` None) communication order; see the module docstring."""

    fabric: LeafSpine | None = field(default=None, kw_only=True)
    max_tasks: int = field(default=2, kw_only=True)
    eta_over_b: float | None = field(default=0.0, kw_only=True)
    wait_weight: float = field(default=1e-3, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.fabric, LeafSpine):
            raise SpecError(f"network[{self.name}].fabric", "is missing",
                            "build the scheme with the cluster's fabric, e.g. "
                            "ada_dual(fabric)")
        validate.integer(self.max_tasks, f"network[{self.name}].max_tasks", 1, 1024, "2")
        if self.eta_over_b is not None:
            validate.number(self.eta_over_b, f"network[{self.name}].eta_over_b", 0, 1e6,
                            "0")
        validate.number(self.wait_weight, f"network[{self.name}].wait_weight", 0, 0.5,
                        "1e-3", lo_open=True)

    def tasks(self, running: Sequence[RunningJob]) -> list[CommTask]:
        """The running jobs that communicate (two or more servers) as AdaDUAL's tasks."""
        assert self.fabric is not None
        return [CommTask(r.name, r.job.servers, r.job.ring_bytes(),
                         remaining_workload(self.fabric, r.request, r.done, len(r.job.gpus)))
                for r in running if len(r.job.gpus) > 1]

    def job_weights(self, running: Sequence[RunningJob], now: float) -> list[float]:
        ratio = None if self.eta_over_b is None else threshold(self.eta_over_b)
        passes = comm_passes(self.tasks(running), self.max_tasks, ratio)
        return [max(self.wait_weight ** passes.get(r.name, 0), MIN_WEIGHT) for r in running]


def ada_dual(fabric: LeafSpine, eta_over_b: float = 0.0) -> CommOrderNetwork:
    """AdaDUAL: at most two tasks per server, the second only by Theorem 2's rule."""
    return CommOrderNetwork("ada-dual", fabric=fabric, max_tasks=2, eta_over_b=eta_over_b)


def srsf_comm(fabric: LeafSpine, n: int) -> CommOrderNetwork:
    """The paper's SRSF(n) baseline: up to ``n`` tasks per server, in SRSF order, no rule
    (SRSF(1): no contention at all; SRSF(2), SRSF(3): 2- and 3-way contention)."""
    return CommOrderNetwork(f"srsf-{n}", fabric=fabric, max_tasks=n, eta_over_b=None)


# --------------------------------------------------------------------------- by name

SCHEDULERS: dict[str, Callable[[LeafSpine], Scheduler]] = {
    # as the paper's released simulator runs them: GPUs time-shared, all-reduces gated
    "ada-srsf": time_shared("ada-srsf", "lwf-1"),
    "srsf/lwf-1": time_shared("srsf/lwf-1", "lwf-1"),
    "srsf/ff": time_shared("srsf/ff", "ff"), "srsf/ls": time_shared("srsf/ls", "ls"),
    "srsf/rand": time_shared("srsf/rand", "rand"),
    "ada-srsf-exact": time_shared("ada-srsf-exact", "lwf-1", released_checks=False),
    # one job a GPU on the flow-level engine, the communication order as flow weights
    "ada-srsf-excl": ada_srsf, "srsf-excl/lwf-1": srsf_lwf, "srsf-excl/ff": srsf_ff,
    "srsf-excl/ls": srsf_ls, "srsf-excl/rand": srsf_rand}

NETWORKS: dict[str, Callable[[LeafSpine], Network]] = {
    "ada-dual": ada_dual,
    "srsf-1": lambda fabric: srsf_comm(fabric, 1),
    "srsf-2": lambda fabric: srsf_comm(fabric, 2),
    "srsf-3": lambda fabric: srsf_comm(fabric, 3)}
