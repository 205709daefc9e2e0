"""The ``dcqcn`` backend: plans on the DCQCN model (:mod:`mltcp.lab.models.dcqcn`).

RoCE: every scheme runs DCQCN; an MLTCP scheme's F reaches the queue pairs through the
tuner's own knob policy.  Plans of one structure advance as lanes of one model; runs
whose traces together exceed the memory budget go in consecutive chunks that fit
(:mod:`mltcp.lab.scenario.footprint`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from mltcp.lab.scenario import footprint
from mltcp.lab.scenario.backends.base import Backend, Capabilities, Progress, simulated_progress
from mltcp.lab.scenario.batched.dcqcn import DcqcnOptions, run_many
from mltcp.lab.scenario.plan import RunPlan
from mltcp.lab.scenario.trace import Trace


class DcqcnBackend(Backend):
    name = "dcqcn"
    capabilities = Capabilities(batched=True, vector_lanes=True,
                                records=frozenset({"links", "queues", "ecn", "drops"}))

    def __init__(self, options: DcqcnOptions | None = None) -> None:
        self.options = options or DcqcnOptions()

    def link_sample_s(self) -> float | None:
        return self.options.sample_s

    def run(self, plans: Sequence[RunPlan], progress: Progress | None = None,
            parallel: int = 1) -> Iterator[tuple[int, Trace]]:
        sample_s = self.link_sample_s()
        for chunk in footprint.chunks([footprint.of(p, sample_s, True).peak_bytes
                                       for p in plans]):
            part = [plans[i] for i in chunk]
            traces = run_many(part, self.options,
                              progress=simulated_progress("dcqcn", part, progress))
            yield from zip(chunk, traces, strict=True)


BACKEND = DcqcnBackend
