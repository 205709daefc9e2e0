"""The contract every backend keeps: run resolved plans, return common traces.

A backend is one module of :mod:`mltcp.lab.scenario.backends` that defines ``BACKEND``, a class
implementing :class:`Backend`: a name, what it can do (:class:`Capabilities`), a
:meth:`~Backend.require` that says in one line why it cannot run on this host, a
:meth:`~Backend.check` that refuses a plan it cannot run before anything starts, a
:meth:`~Backend.prepare` for what worker processes should not each do at once, and
:meth:`~Backend.run`, which takes plans (:mod:`mltcp.lab.scenario.plan`) and yields one
:class:`~mltcp.lab.scenario.trace.Trace` per plan as each completes.  The runner, sweeps and
benchmarks talk to backends only through this contract and the registry.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from mltcp.core.errors import SpecError
from mltcp.lab.common.eta import eta_text
from mltcp.lab.scenario import footprint

if TYPE_CHECKING:
    from mltcp.lab.scenario.plan import RunPlan
    from mltcp.lab.scenario.trace import Trace

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the runner and sweeps decide by these, never by name.

    ``batched``: runs of one structure advance together in one call, so sweeps hand it
    chunks of points. ``vector_lanes``: a batched backend whose call costs about one run
    whatever the chunk's size (its runs are lanes of one vector, stepped together: the
    DCQCN model: 4 runs took 44 s in one chunk, 88 s in two, 142 s in four, and
    ``bench/bench_sweep_parallel.py`` compares one chunk with two), so sweeps make
    chunks as large as memory allows and never cut them to feed more workers; without it
    a call costs about its runs one after the other (the fluid engine steps each lane in
    turn), so sweeps cut chunks for every worker. ``parallel``: independent runs may
    execute at once in separate processes (``--parallel N``). ``exclusive_host``: it
    drives this host's kernel (namespaces, the eBPF datapath) in real time, so runs go
    one at a time and never to a Dask cluster. ``phases``: it runs model-parallel
    phases. ``dense_links``: it lays a run's flows x links out as a dense matrix (what
    sizes a large fabric's runs besides their samples,
    :mod:`mltcp.lab.scenario.footprint`).
    ``records``: what its traces carry besides iterations (``links``, ``queues``,
    ``ecn``, ``drops``, ``cwnd``, ``losses``).
    """

    batched: bool = False
    vector_lanes: bool = False
    parallel: bool = False
    exclusive_host: bool = False
    phases: bool = True
    records: frozenset[str] = frozenset()
    dense_links: bool = False


class Backend:
    """Base of every backend: the contract, with the checks all of them share."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]

    def require(self) -> None:
        """Raise :class:`~mltcp.core.errors.CapabilityError` (one line: what is missing
        and how to get it) unless this backend can run on this host."""

    def prepare(self) -> None:
        """Before runs go to worker processes of this host: what each would otherwise do
        first, all at once (the fluid model compiles its engine here, once; the workers
        then load it from numba's cache).  Nothing by default."""

    def link_sample_s(self) -> float | None:
        """The period of the link samples this backend's traces carry (None: none): with
        the run's length, what sizes a trace (:mod:`mltcp.lab.scenario.footprint`)."""
        return None

    def check(self, plan: RunPlan) -> None:
        """Raise :class:`~mltcp.core.errors.SpecError` naming the field if this backend
        cannot run ``plan`` (before anything is built or started), its trace's memory
        beyond the budget included."""
        footprint.check_run(plan, self.link_sample_s(), self.capabilities.dense_links)
        if not self.capabilities.phases:
            for job in plan.jobs:
                if job.spec.phases is not None:
                    raise SpecError(f"jobs[{job.index}].phases",
                                    f"the {self.name} backend runs one communication phase "
                                    "per iteration",
                                    "run model-parallel phases with --backend fluid, or give "
                                    "compute_ms instead of phases")

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        """Run every plan; yield (index into ``plans``, its trace) as each completes.
        ``parallel`` > 1 only where :attr:`Capabilities.parallel`."""
        raise NotImplementedError


def simulated_progress(model: str, plans: Sequence[RunPlan],
                       progress: Progress | None) -> Callable[[float], None]:
    """A model's progress callback (simulated seconds reached by all its lanes) turned
    into the runner's progress lines, with the time left at the pace so far (a batch
    of long runs takes minutes)."""
    say = progress or (lambda _msg: None)
    # A lower bound of the runs' length: their compute alone, or their busiest link's
    # bytes (on a loaded fabric, several times the compute).  Past it, no time is promised.
    horizon = max((max(p.nominal_duration_s, footprint.min_duration_s(p)[0]) for p in plans),
                  default=0.0)
    runs = f"{len(plans)} run{'s' if len(plans) != 1 else ''}"
    # The pace is measured from the first report (a model's first may come at once, and
    # already some way in: the runs' first event), so that one says "ETA ?", not "0 s".
    first: list[float] = []                   # [simulated s, monotonic s] at the first

    def advanced(simulated_s: float) -> None:
        if simulated_s >= horizon:
            say(f"{model} model: {runs} at {simulated_s:.2f} s simulated (past the "
                f"~{horizon:.1f} s they take at least; contention draws them out)")
            return
        if not first:
            first.extend((simulated_s, time.monotonic()))
        sim0, wall0 = first
        fraction = (simulated_s - sim0) / (horizon - sim0) if horizon > sim0 else 0.0
        say(f"{model} model: {runs} at {simulated_s:.2f} s simulated "
            f"(of ~{horizon:.1f} s at least), {eta_text(time.monotonic() - wall0, fraction)}")

    return advanced
