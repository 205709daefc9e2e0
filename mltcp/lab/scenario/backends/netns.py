"""The ``netns`` backend: plans on the emulated testbed (:mod:`mltcp.lab.scenario.emulation`).

Real kernel TCP and the real eBPF datapath between hosts in network namespaces, in
real time: runs go one at a time (they would share the host's CPUs and skew each
other) and never to a Dask cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mltcp.lab.scenario.backends.base import Backend, Capabilities, Progress
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace


class NetnsBackend(Backend):
    name = "netns"
    capabilities = Capabilities(exclusive_host=True, phases=False,
                                records=frozenset({"links", "queues", "ecn", "drops",
                                                   "losses"}))

    def require(self) -> None:
        from mltcp.lab.scenario.emulation.netns import require_netns

        require_netns()

    def link_sample_s(self) -> float | None:
        from mltcp.lab.scenario.emulation.testbed import SAMPLE_S
        return SAMPLE_S

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        from mltcp.lab.scenario.emulation.testbed import run_plan

        for i, plan in enumerate(plans):
            yield i, run_plan(plan, progress)


BACKEND = NetnsBackend
