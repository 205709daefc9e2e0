"""The ``ns3`` backend: plans run in ns-3 worker processes (:mod:`mltcp.lab.scenario.ns3`).

Workers are separate processes, so ``parallel`` runs may go at once (threads, each
waiting on a worker it takes from :data:`mltcp.lab.scenario.ns3.launch.POOL`: N
workers taking plans from one queue); a worker runs plan after plan with ns-3 reset in
between, so only the first of its runs pays ns-3's start-up (``reuse=False``: a fresh
process per run).  Each run reports progress in simulated seconds and has a
wall-clock budget.  When the caller stops consuming (Ctrl-C or a teardown signal in the
main thread, which the threads never see), the runs not started are cancelled and the
running ones' processes killed within a fraction of a second: a thread pool's exit
otherwise waits for every queued run, which is hours of ns-3.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed

from mltcp.lab.scenario.backends.base import Backend, Capabilities, Progress
from mltcp.lab.scenario.ns3.launch import DEFAULT_BUDGET_S, require_ns3, run_plan
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace


class Ns3Backend(Backend):
    name = "ns3"
    capabilities = Capabilities(parallel=True,
                                records=frozenset({"links", "queues", "ecn", "drops", "cwnd"}))

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S, reuse: bool = True) -> None:
        self.budget_s = budget_s
        self.reuse = reuse

    def require(self) -> None:
        require_ns3()

    def link_sample_s(self) -> float | None:
        from mltcp.lab.scenario.ns3.sim import SAMPLE_S
        return SAMPLE_S

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        if parallel <= 1:
            for i, plan in enumerate(plans):
                yield i, run_plan(plan, progress, self.budget_s, reuse=self.reuse)
            return
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=parallel)
        try:
            futures = {pool.submit(run_plan, plan, progress, self.budget_s, stop, self.reuse): i
                       for i, plan in enumerate(plans)}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            stop.set()                     # running workers: killed at their next poll
            pool.shutdown(wait=True, cancel_futures=True)


BACKEND = Ns3Backend
