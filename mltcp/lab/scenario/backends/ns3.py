"""The ``ns3`` backend: each plan in its own ns-3 worker process (:mod:`mltcp.lab.scenario.ns3`).

Runs are independent processes, so ``parallel`` of them may run at once (threads
waiting on processes); each reports progress in simulated seconds and has a
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

    def __init__(self, budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.budget_s = budget_s

    def require(self) -> None:
        require_ns3()

    def link_sample_s(self) -> float | None:
        from mltcp.lab.scenario.ns3.sim import SAMPLE_S
        return SAMPLE_S

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        if parallel <= 1:
            for i, plan in enumerate(plans):
                yield i, run_plan(plan, progress, self.budget_s)
            return
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=parallel)
        try:
            futures = {pool.submit(run_plan, plan, progress, self.budget_s, stop): i
                       for i, plan in enumerate(plans)}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
        finally:
            stop.set()                     # running workers: killed at their next poll
            pool.shutdown(wait=True, cancel_futures=True)


BACKEND = Ns3Backend
