"""What a paper reports, and how its cluster experiment maps onto the simulator.

Each paper reproduced in :mod:`mltcp.lab.cluster.papers` has a :class:`PaperSetup`
(its ``setup`` module) holding what a report needs to run our simulator on the paper's
experiment and print the paper's own numbers beside ours:

* the paper's cluster mapped onto :class:`~mltcp.lab.cluster.engine.leafspine.LeafSpine`,
  with every assumption the mapping needed spelt out (``mapping``);
* a job generator (:meth:`PaperSetup.jobs`, seeded) following the paper's workload, with
  what the paper leaves open filled in and said (``workload_assumptions``);
* the schemes the paper compares and the closest thing in this simulator (``schemes``);
* the paper's reported results, one :class:`Reported` per (scheme, baseline, metric).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mltcp.core import validate
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine


@dataclass(frozen=True)
class Reported:
    """One result a paper reports: ``scheme`` against ``baseline`` on ``metric``.

    ``scheme_value``/``baseline_value`` are the paper's numbers where it gives them;
    ``stated_pct`` (the improvement in percent) and ``stated_factor`` (x) are what its
    text claims.  Improvement means lower for times, higher where ``higher_is_better``."""

    context: str
    metric: str
    scheme: str
    baseline: str
    source: str
    scheme_value: float | None = None
    baseline_value: float | None = None
    unit: str = ""
    stated_pct: float | None = None
    stated_factor: float | None = None
    higher_is_better: bool = False
    note: str = ""

    @property
    def improvement_pct(self) -> float | None:
        """From the values: the reduction (or, higher-is-better, the gain) in percent."""
        s, b = self.scheme_value, self.baseline_value
        if s is None or b is None or b == 0:
            return None
        return 100 * ((s - b) if self.higher_is_better else (b - s)) / b

    @property
    def improvement_factor(self) -> float | None:
        """From the values: baseline / scheme (scheme / baseline if higher is better)."""
        s, b = self.scheme_value, self.baseline_value
        if s is None or b is None or 0 in (s, b):
            return None
        return s / b if self.higher_is_better else b / s

    def line(self) -> str:
        """One line for a report: values, the paper's claim, where it is."""
        parts = [f"{self.scheme} vs {self.baseline}, {self.metric}:"]
        if self.scheme_value is not None and self.baseline_value is not None:
            parts.append(f"{self.scheme_value:g} vs {self.baseline_value:g} {self.unit}".rstrip())
        claims = []
        if self.stated_pct is not None:
            claims.append(f"{self.stated_pct:g} %")
        if self.stated_factor is not None:
            claims.append(f"{self.stated_factor:g}x")
        if claims:
            parts.append(f"(paper: {', '.join(claims)})")
        parts.append(f"[{self.source}; {self.context}]")
        return " ".join(parts)


@dataclass(frozen=True)
class Scheme:
    """A scheme a paper compares, and what in this simulator comes closest (or none)."""

    name: str
    what: str
    ours: str


@dataclass(frozen=True)
class PaperSetup:
    """One experiment of a paper (``paper``: its key in
    :mod:`mltcp.lab.common.references`), as the simulator runs it."""

    key: str
    paper: str
    title: str
    source: str
    fabric: LeafSpine
    topology: str                        # the paper's cluster, in its words
    mapping: tuple[str, ...]             # assumptions mapping it onto LeafSpine
    workload: str                        # the paper's workload, in its words
    workload_assumptions: tuple[str, ...]
    schemes: tuple[Scheme, ...]
    results: tuple[Reported, ...]
    generate: Callable[[int], list[JobRequest]]

    def jobs(self, seed: int = 0) -> list[JobRequest]:
        """The setup's jobs for ``seed`` (the same seed, the same jobs)."""
        validate.integer(seed, "seed", 0, 2**63 - 1, "0")
        return self.generate(seed)
