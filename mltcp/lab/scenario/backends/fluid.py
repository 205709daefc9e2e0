"""The ``fluid`` backend: plans on the flow-level model (:mod:`mltcp.lab.scenario.batched.fluid`).

All plans go in one call: plans of one structure form one batch, each run an engine
state of the compiled event engine (:mod:`mltcp.lab.models.fluid_engine`); runs whose
traces together exceed the memory budget go in consecutive chunks that fit, each
chunk's traces handed on before the next starts (:mod:`mltcp.lab.scenario.footprint`).
No root, no queues: link samples carry throughput only.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mltcp.lab.models import fluid_engine
from mltcp.lab.scenario import footprint
from mltcp.lab.scenario.backends.base import Backend, Capabilities, Progress, simulated_progress
from mltcp.lab.scenario.batched.fluid import FluidOptions, run_many
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace


class FluidBackend(Backend):
    name = "fluid"
    capabilities = Capabilities(batched=True, records=frozenset({"links"}))

    def __init__(self, options: FluidOptions | None = None, record_links: bool = True) -> None:
        self.options = options or FluidOptions()
        self.record_links = record_links

    def prepare(self) -> None:
        fluid_engine.ensure_compiled()

    def link_sample_s(self) -> float | None:
        return self.options.sample_s if self.record_links else None

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        sample_s = self.link_sample_s()
        for chunk in footprint.chunks([footprint.of(p, sample_s, False).peak_bytes
                                       for p in plans]):
            part = [plans[i] for i in chunk]
            traces = run_many(part, self.options, record_links=self.record_links,
                              progress=simulated_progress("fluid", part, progress))
            yield from zip(chunk, traces, strict=True)


BACKEND = FluidBackend
