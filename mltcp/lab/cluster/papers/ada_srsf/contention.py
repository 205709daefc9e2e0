"""The ada-srsf paper's network as its released simulator runs it: Eq. 5's contended
all-reduce and the admission gates of SRSF(n) and AdaDUAL.

The paper's simulator (github.com/HKBU-HPML/dl-scheduling, ``online/``, the commit
"finish ICDCS2020 experiments") models each server's NIC, not links:

* **Eq. 5, the contention penalty** (``online/job.py``, ``dag_task.update_comm_time``):
  a job's all-reduce moves its whole model (``model_size`` MB, whatever its server
  count) at ``1 / ((k - 1) η + k β)`` MB per ms, where ``k`` is the number of all-reduces
  on the busiest of its servers (``dag_job.get_slowest_node``), itself included; with
  ``β = 0.856`` and ``η = 0.235`` ms per MB for 10 GbE, ``α = 0``
  (``online/cluster.py``, ``node.net_conf``).  Two tasks on a NIC each go at
  ``1 / (η + 2 β)``: together 12 % below one alone, three 15 %.  Rates follow ``k`` as
  tasks start and end (the simulator recomputes them every 1 ms step).
* **The gates** (``online/job.py``, ``dag_job.is_all_nodes_free``; Algorithm 2): an
  all-reduce is admitted whole (non-preemptive) or not at all.  ``max_comm`` counts the
  tasks on the job's busiest server, and the tasks of every server that raised that
  count (Algorithm 2 lines 4-7: a server with as many tasks as an earlier one adds
  none).  SRSF(n): start iff ``max_comm <= n - 1`` (the script's ``comm_thres`` is
  ``n - 1``).  AdaDUAL (``adaDual`` with ``comm_thres = 1``): start if ``max_comm`` is
  0; with one task, start iff for each collected old task ``M_rest_old / M_new >=
  2 (β + η) / β`` (the code's ``judge``; Theorem 2's ``M_new / M_old < b / (2 (b +
  η))``, old = its *remaining* bytes); two or more, wait.
* **A quirk of the released code** (``dag_task.get_rest_size``): AdaDUAL's check reads
  an old task's remaining bytes by adding the transfer since its last rate update
  without moving that mark, and ``update_comm_time`` adds the same interval again in the
  same 1 ms step.  Every waiting job that checks an old task in a step so advances it
  by one more step's worth: a task checked by ``w`` waiting jobs moves ``1 + w`` times
  as fast.  Only AdaDUAL reads remaining bytes, so only it gets this.  :class:`Gate`
  says which task each check reads so that a simulator can run the code as released
  (``released_checks``) or as its physics says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals.catalogue import MIB
from mltcp.lab.cluster.engine.network import Network

# online/cluster.py, node.net_conf ("10G ethernet, time:ms, message size:MB"): β, η in
# ms per MB; MB is the unit of Table III's model sizes, which the catalogue reads as MiB.
BETA_MS_PER_MB = 0.856
ETA_MS_PER_MB = 0.235
MB_BYTES = MIB

T = TypeVar("T")


@dataclass(frozen=True)
class NicModel:
    """Eq. 5 on one server's NIC: ``k`` concurrent all-reduces each move
    ``1 / ((k - 1) η + k β)`` of a message per unit time (``β``, ``η`` in seconds per
    byte of the message)."""

    beta_s_per_byte: float = BETA_MS_PER_MB / 1e3 / MB_BYTES
    eta_s_per_byte: float = ETA_MS_PER_MB / 1e3 / MB_BYTES

    def __post_init__(self) -> None:
        validate.number(self.beta_s_per_byte, "nic.beta_s_per_byte", 0, 1.0, "8.2e-10",
                        lo_open=True)
        validate.number(self.eta_s_per_byte, "nic.eta_s_per_byte", 0, 1.0, "2.2e-10")

    def rate(self, k: int) -> float:
        """Bytes per second of each of ``k`` >= 1 all-reduces on the busiest NIC."""
        return 1.0 / ((k - 1) * self.eta_s_per_byte + k * self.beta_s_per_byte)

    def alone_s(self, message_bytes: float) -> float:
        """One all-reduce of ``message_bytes`` with no other on its servers (Eq. 2, α = 0)."""
        return message_bytes * self.beta_s_per_byte

    @property
    def judge(self) -> float:
        """AdaDUAL's bound on ``M_rest_old / M_new`` (the code's ``judge``), the inverse
        of Theorem 2's ``b / (2 (b + η))``."""
        return 2.0 * (self.beta_s_per_byte + self.eta_s_per_byte) / self.beta_s_per_byte


@dataclass(frozen=True)
class Gate:
    """Whether a ready all-reduce may start: SRSF(``max_tasks``) (``adaptive`` False;
    ``max_tasks`` None: no cap, every task starts at once) or AdaDUAL (``adaptive``,
    ``max_tasks`` 2).  ``name`` is the network scheme it stands for."""

    name: str
    max_tasks: int | None
    adaptive: bool = False

    def __post_init__(self) -> None:
        if self.adaptive and self.max_tasks != 2:
            raise SpecError(f"network[{self.name}].max_tasks",
                            f"is {self.max_tasks} with AdaDUAL's rule",
                            "AdaDUAL admits at most 2 tasks a server: use max_tasks = 2")

    def check(self, servers: Sequence[int], message_bytes: float,
              on_server: Sequence[Sequence[T]], remaining: Callable[[T], float],
              judge: float) -> tuple[bool, T | None]:
        """``(start, read)`` for a task of ``message_bytes`` on ``servers``, given each
        server's running tasks (``on_server[s]``) and each task's remaining bytes
        (``remaining``); ``read``: the old task whose remaining bytes AdaDUAL's check
        read (what the released code's quirk advances), None if none.

        With one task on the busiest server, Algorithm 2's collected set is the task of
        the first server that has one (a later server with one task does not raise the
        count), so the rule compares the new task with that one alone."""
        busiest, first = 0, None
        for server in servers:
            tasks = on_server[server]
            if len(tasks) > busiest:                 # Algorithm 2 lines 4-7
                if not busiest:
                    first = tasks[0]
                busiest = len(tasks)
        if not self.adaptive:
            return self.max_tasks is None or busiest <= self.max_tasks - 1, None
        if busiest == 0:
            return True, None
        if busiest > 1:
            return False, None
        return remaining(first) / message_bytes >= judge, first


def gate_of(network: Network) -> Gate:
    """The gate a network scheme stands for on time-shared GPUs: ``ada-dual`` ->
    AdaDUAL, ``srsf-n`` -> SRSF(n), plain fair sharing -> no gate (every all-reduce starts
    at once and Eq. 5 shares the NICs); a one-line SpecError for schemes the paper's
    simulator cannot run (MLTCP's F, Cassini's time-shifts)."""
    from mltcp.lab.cluster.papers.ada_srsf.schedulers import CommOrderNetwork

    if isinstance(network, CommOrderNetwork):
        return Gate(network.name, network.max_tasks, network.eta_over_b is not None)
    if type(network) is Network and network.f is None:
        return Gate(network.name, None)
    raise SpecError("network", f"{network.name!r} has no counterpart in the ada-srsf "
                    "paper's simulator (GPUs time-shared, NICs shared by its Eq. 5 only)",
                    "use ada-dual, srsf-1, srsf-2, srsf-3 or fair with it, or run "
                    f"{network.name} under ada-srsf-excl (one job per GPU)")
