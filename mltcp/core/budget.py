"""Per-iteration byte budgets: computed from a job description or learned from traffic.

F needs ``bytes_ratio = bytes acked this iteration / budget``, so each job needs a
budget: the payload bytes one host *sends* per training iteration. Every figure here is
TCP payload (what the kernel's ``bytes_acked`` counts), with no IP/TCP headers and no
retransmissions, so the ratio reaches 1.0 exactly when the iteration's data is out.

When the job's shape is unknown, :class:`BudgetLearner` infers the budget from the
bytes observed between idle gaps (see :mod:`mltcp.core.iteration`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from mltcp.core import validate
from mltcp.core.aggressiveness import MAX_BUDGET_BYTES
from mltcp.core.errors import SpecError


class Collective(StrEnum):
    """The communication pattern a job runs once per iteration.

    A StrEnum (a ``str`` and an ``Enum``) so members compare equal to, and print as,
    the names used on the command line and in config files.
    """

    RING_ALLREDUCE = "ring_allreduce"
    TREE_ALLREDUCE = "tree_allreduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER_ALL_GATHER = "reduce_scatter_all_gather"
    ALL_TO_ALL = "all_to_all"
    PARAMETER_SERVER = "parameter_server"

    @classmethod
    def parse(cls, value: Collective | str) -> Collective:
        """Accept the enum or its name in any case, with '-' or '_' ("Ring-AllReduce")."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower().replace("-", "_"))
            except ValueError:
                pass
        choices = ", ".join(c.value for c in cls)
        raise SpecError("collective", f"unknown collective {value!r}", f"use one of: {choices}")


ROLES = ("worker", "server")


def _ceil_div(num: int, den: int) -> int:
    """Exact integer ceiling; floats would misround budgets above 2**53 bytes."""
    return -(-num // den)


@dataclass(frozen=True)
class JobDescription:
    """What one host of a training job exchanges per iteration.

    ``gradient_bytes`` (G) is the model's gradient size, or for all_to_all the
    per-worker buffer. ``role`` and ``servers`` only matter for parameter_server.
    """

    gradient_bytes: int
    workers: int
    collective: Collective = Collective.RING_ALLREDUCE
    role: str = "worker"
    servers: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "collective", Collective.parse(self.collective))
        validate.at_least(self.gradient_bytes, "gradient_bytes", 1,
                          "give the gradient size, e.g. 100MB")
        if self.gradient_bytes > MAX_BUDGET_BYTES:
            raise SpecError(
                "gradient_bytes", f"must be <= {MAX_BUDGET_BYTES} (got {self.gradient_bytes})",
                "use a gradient size of at most 1 TiB",
            )
        is_ps = self.collective is Collective.PARAMETER_SERVER
        min_workers = 1 if is_ps else 2
        validate.at_least(self.workers, "workers", min_workers,
                          f"a {self.collective.value} job needs at least {min_workers} workers")
        validate.at_least(self.servers, "servers", 1, "use at least one parameter server")
        role = self.role.strip().lower() if isinstance(self.role, str) else self.role
        if role not in ROLES:
            raise SpecError("role", f"unknown role {self.role!r}", "use 'worker' or 'server'")
        if role == "server" and not is_ps:
            raise SpecError(
                "role",
                f"'server' is only valid for parameter_server (got {self.collective.value})",
                "use role 'worker' or collective parameter_server",
            )
        object.__setattr__(self, "role", role)
        budget = self.bytes_per_iteration()
        if budget > MAX_BUDGET_BYTES:
            raise SpecError(
                "gradient_bytes", f"gives {budget} bytes per iteration, over {MAX_BUDGET_BYTES}",
                "use a smaller gradient or more servers",
            )

    def bytes_per_iteration(self) -> int:
        """Payload bytes one host of this job sends per iteration, rounded up.

        With N workers and gradient size G:

        - ring_allreduce: 2(N-1)/N * G (reduce-scatter then all-gather, each (N-1)/N * G).
        - tree_allreduce: 2(N-1)/N * G on average per rank. NCCL's double binary tree
          sends about 2G from its busiest ranks, but the average equals ring's; the
          tree only saves latency, not bytes.
        - reduce_scatter, all_gather: (N-1)/N * G.
        - reduce_scatter_all_gather: 2(N-1)/N * G (FSDP/ZeRO style, same bytes as ring).
        - all_to_all: (N-1)/N * G, where G is the per-worker buffer.
        - parameter_server worker: G (the push; pulled parameters are received, not sent).
        - parameter_server server: G * N / servers (updated parameters to every worker,
          sharded over the servers).
        """
        g, n = self.gradient_bytes, self.workers
        match self.collective:
            case (
                Collective.RING_ALLREDUCE
                | Collective.TREE_ALLREDUCE
                | Collective.REDUCE_SCATTER_ALL_GATHER
            ):
                return _ceil_div(2 * (n - 1) * g, n)
            case Collective.REDUCE_SCATTER | Collective.ALL_GATHER | Collective.ALL_TO_ALL:
                return _ceil_div((n - 1) * g, n)
            case Collective.PARAMETER_SERVER:
                return g if self.role == "worker" else _ceil_div(g * n, self.servers)
        raise AssertionError(f"unhandled collective {self.collective}")  # pragma: no cover


@dataclass
class BudgetLearner:
    """Learns a job's budget from the bytes it sends per completed iteration.

    Uses the median of the last ``window`` samples and trusts it only when the median
    absolute deviation is within ``max_spread`` of it: a job whose iterations really
    alternate in size (or that is mis-segmented) has no single budget, and guessing one
    would make F wrong half of the time.
    """

    window: int = 8
    min_samples: int = 5
    max_spread: float = 0.10
    _samples: deque[int] = dataclasses.field(default_factory=deque, init=False, repr=False)

    def __post_init__(self) -> None:
        validate.at_least(self.min_samples, "min_samples", 3, "use --min-samples 5")
        validate.at_least(self.window, "window", self.min_samples,
                          f"use a window of at least min_samples ({self.min_samples}), e.g. 8")
        spread = self.max_spread
        if not validate.is_number(spread) or not 0 < spread < 1:
            raise SpecError(
                "max_spread", f"must be in (0, 1) (got {spread!r})", "use e.g. --max-spread 0.10"
            )
        self._samples = deque(maxlen=self.window)

    def add(self, sample_bytes: int) -> None:
        """Record one iteration's bytes; empty iterations carry no information."""
        if sample_bytes > 0:
            self._samples.append(sample_bytes)

    @property
    def samples(self) -> list[int]:
        """The retained samples (at most ``window``), oldest first."""
        return list(self._samples)

    def learned(self) -> int | None:
        """The median budget once enough stable samples exist, else None."""
        samples = self._samples
        if len(samples) < self.min_samples:
            return None
        m = int(round(statistics.median(samples)))
        mad = statistics.median(abs(x - m) for x in samples)
        return m if mad <= self.max_spread * m else None

    def reset(self) -> None:
        """Forget everything, e.g. after the job changed its batch size or model."""
        self._samples.clear()
