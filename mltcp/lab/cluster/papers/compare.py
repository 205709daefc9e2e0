"""The papers' reported figures next to ours, for an experiment on a paper's setup.

A paper reports "scheme beats baseline on metric by so much" (:class:`~mltcp.lab.cluster.
Reported`); an experiment on that paper's setup has a cell per scheduler x
network scheme.  This module maps the paper's scheme names onto cells and its metrics
onto the report's, and puts the two improvements side by side: who beats whom, by how
much, in the paper and here.  Improvement is the reduction in percent for times (the
gain for utilisation), ``100 (baseline - scheme) / baseline``.

What maps onto what, and the approximations:

* Ada-SRSF (ada-srsf): its schedulers are SRSF job order with a placement and a
  communication order; Ada-SRSF = ``ada-srsf`` (LWF-1) x ``ada-dual``, SRSF(n) =
  ``ada-srsf`` x ``srsf-n``, the placement study's LWF-1/FF/RAND/LS = ``ada-srsf`` /
  ``srsf/ff`` / ``srsf/rand`` / ``srsf/ls`` under ``ada-dual``;
* vClos (vclos): each routing scheme under fair sharing (the paper's fabric runs one
  congestion control for all);
* Cassini (thesis): Th+Cassini = ``themis-cassini`` x ``cassini`` (the Themis stand-in's
  candidates ranked by compatibility, and time-shifts), Themis = ``themis`` x ``fair``
  (the same candidates, one drawn blind to the network: :mod:`.cassini.themis` says
  what is modelled and what not).  Iteration time is compared with iteration time: the
  thesis's mean and p99 are over the iteration times of all jobs (Fig. 4.11b's CDF, in
  ms), ours are ``iteration_mean_s`` and ``iteration_p99_s`` (each job's time on GPUs
  over its iterations, weighted by its iterations).  Its headline "tail completion time
  up to 2.2x (2.5x)" is the p99 iteration time of the DLRM + ResNet50 stress test
  (§4.5.3, Fig. 4.13), listed with that experiment, which is not run here.

A paper's figure whose scheme, baseline or metric has no counterpart, or whose cells were
not run, is listed with "not run here" so that nothing the paper claims is silently left
out.  Given the runs' values per seed, our improvement carries its N (the seeds both
cells ran) and the 95 % paired bootstrap interval (:func:`mltcp.lab.common.stats.
bootstrap_ratio` of the two cells' means over the same seeds).  Every row also carries
the gap: ours over the paper's improvement (``ratio``; 1 = the paper's gain reproduced)
and our interval's ends over it (``ratio_ci``), so a report shows how far off we are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from mltcp.lab.cluster.papers import setups
from mltcp.lab.cluster.papers.figures import Reported
from mltcp.lab.common import stats

Cell = tuple[str, str]                  # (scheduler, network)
# (scheduler, network) -> seed -> the run's metrics
PerSeed = Mapping[Cell, Mapping[int, Mapping[str, Any]]]

CELLS: dict[str, dict[str, Cell]] = {
    "ada-srsf": {
        "Ada-SRSF": ("ada-srsf", "ada-dual"), "SRSF(1)": ("ada-srsf", "srsf-1"),
        "SRSF(2)": ("ada-srsf", "srsf-2"), "SRSF(3)": ("ada-srsf", "srsf-3"),
        "LWF-1": ("ada-srsf", "ada-dual"), "FF": ("srsf/ff", "ada-dual"),
        "RAND": ("srsf/rand", "ada-dual"), "LS": ("srsf/ls", "ada-dual")},
    "vclos-cluster512-fifo": {
        "vClos": ("vclos", "fair"), "OCS-vClos": ("ocs-vclos", "fair"),
        "ECMP": ("vclos-ecmp", "fair"), "Balanced ECMP": ("vclos-balanced", "fair"),
        "Source Routing": ("vclos-sr", "fair")},
    "cassini-poisson": {
        "Th+Cassini": ("themis-cassini", "cassini"), "Themis": ("themis", "fair")},
    **{f"deepshare-{trace}": {
        "RL-base": ("rl-base", "fair"), "RL-Hybrid": ("rl-hybrid", "fair"),
        "LAS": ("deepshare-las", "fair"), "SRTF": ("deepshare-srtf", "fair")}
       for trace in ("normal", "heavy", "medium", "low")},
}

# Contexts a setup's experiment reproduces (prefixes; absent: all of the paper's): the
# Cassini thesis also reports model-parallel and dynamic traces (its headline figures
# among them), which its Poisson setup does not run.
CONTEXTS: dict[str, tuple[str, ...]] = {
    "cassini-poisson": ("Poisson trace, data + model parallel",),
}

# The paper's metric -> (the report's metric, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "average JCT": ("jct_mean_s", False), "median JCT": ("jct_p50_s", False),
    "95th-percentile JCT": ("jct_p95_s", False),
    "average JWT": ("jwt_mean_s", False),
    # vclos's JRT, a job's running time: its time on GPUs (no vClos scheduler preempts)
    "average JRT": ("held_mean_s", False),
    "average GPU utilisation": ("gpu_utilisation", True),
    "average iteration time": ("iteration_mean_s", False),
    "p99 iteration time": ("iteration_p99_s", False),
    "tail completion time": ("jct_p99_s", False),
    "p90 JCT": ("jct_p90_s", False),
    "average JCT (time on GPUs)": ("held_mean_s", False),
    "p90 JCT (time on GPUs)": ("held_p90_s", False),
}


@dataclass(frozen=True)
class Row:
    """One of the paper's figures and ours: improvements in percent (None: not available)."""

    context: str
    metric: str
    scheme: str
    baseline: str
    source: str
    paper_pct: float | None
    ours_pct: float | None
    ours: str                   # the cells compared, or why not
    n: int = 0                  # seeds ours is over (0: not known)
    ours_ci: tuple[float, float] | None = None     # 95 % bootstrap interval of ours_pct

    @property
    def ratio(self) -> float | None:
        """Ours over the paper's improvement (1: the paper's gain reproduced, 0.3: a
        third of it, negative: the other way round); None without both or with a paper
        improvement of 0."""
        if self.ours_pct is None or not self.paper_pct:
            return None
        return self.ours_pct / self.paper_pct

    @property
    def ratio_ci(self) -> tuple[float, float] | None:
        """Our interval's ends over the paper's improvement, low end first."""
        if self.ours_ci is None or not self.paper_pct:
            return None
        lo, hi = sorted(end / self.paper_pct for end in self.ours_ci)
        return lo, hi

    def to_json(self) -> dict[str, Any]:
        """The row with its ratio to the paper (``ratio``, ``ratio_ci``: derived, so
        :meth:`from_json` recomputes rather than reads them)."""
        out = dict(self.__dict__)
        out["ours_ci"] = list(self.ours_ci) if self.ours_ci is not None else None
        out["ratio"] = self.ratio
        out["ratio_ci"] = list(self.ratio_ci) if self.ratio_ci is not None else None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Row:
        """A row from :meth:`to_json`'s dict, or from a report written before the
        intervals or the ratios (missing fields take their defaults)."""
        names = {f.name for f in fields(cls)}
        ci = data.get("ours_ci")
        return cls(**{k: v for k, v in data.items() if k in names and k != "ours_ci"},
                   ours_ci=(ci[0], ci[1]) if ci else None)


def _improvement(scheme: float, baseline: float, higher_is_better: bool) -> float | None:
    if not baseline:
        return None
    return 100 * ((scheme - baseline) if higher_is_better else (baseline - scheme)) / baseline


def _paper_pct(r: Reported) -> float | None:
    if r.improvement_pct is not None:
        return r.improvement_pct
    if r.stated_pct is not None:
        return r.stated_pct
    if r.stated_factor:                          # "x times better": 1 - 1/x of the time
        return 100 * (1 - 1 / r.stated_factor)
    return None


def _improvement_spread(a: Mapping[int, Mapping[str, Any]], b: Mapping[int, Mapping[str, Any]],
                        key: str, higher_is_better: bool) -> tuple[int, tuple[float, float] | None]:
    """N and the interval of the improvement of cell ``a`` over cell ``b`` on ``key``,
    over the seeds both ran with a value: the paired bootstrap of mean(a) / mean(b),
    mapped through the improvement (monotone in the ratio)."""
    seeds = [s for s in a if s in b and a[s].get(key) is not None
             and b[s].get(key) is not None]
    spread = stats.bootstrap_ratio([a[s][key] for s in seeds], [b[s][key] for s in seeds])
    if spread.lo is None or spread.hi is None:
        return spread.n, None
    # the ratio r = mean(a) / mean(b) improves on b as r improves on a baseline of 1
    lo, hi = sorted(_improvement(r, 1.0, higher_is_better) or 0.0
                    for r in (spread.lo, spread.hi))
    return spread.n, (lo, hi)


def rows(setup: str, cells: Mapping[Cell, Mapping[str, Any]],
         per_seed: PerSeed | None = None) -> list[Row]:
    """Every figure ``setup``'s paper reports, with ours from ``cells`` ((scheduler,
    network) -> the report's metric means) and, with ``per_seed`` (each cell's runs'
    metrics by seed), its N and 95 % interval."""
    names = CELLS.get(setup, {})
    contexts = CONTEXTS.get(setup)
    out = []
    for r in setups.setup(setup).results:
        a, b, metric = names.get(r.scheme), names.get(r.baseline), METRICS.get(r.metric)
        if contexts and not r.context.startswith(contexts):
            ours = _Ours(text="not run here: another experiment of the paper")
        elif a is None or b is None or metric is None:
            what = [x for x, ok in ((f"scheme {r.scheme!r}", a),
                                    (f"baseline {r.baseline!r}", b),
                                    (f"metric {r.metric!r}", metric)) if ok is None]
            ours = _Ours(text=f"not modelled: {', '.join(what)}")
        elif a in cells and b in cells:
            ours = _compared(a, b, metric, cells, per_seed)
        else:
            missing = [f"{sched}/{net}" for sched, net in (a, b) if (sched, net) not in cells]
            ours = _Ours(text=f"not run here: add {', '.join(missing)}")
        out.append(Row(r.context, r.metric, r.scheme, r.baseline, r.source, _paper_pct(r),
                       ours.pct, ours.text, ours.n, ours.ci))
    return out


@dataclass(frozen=True)
class _Ours:
    """Our side of a row: the improvement, what it compares (or why there is none),
    its N and interval."""

    pct: float | None = None
    text: str = "not run here"
    n: int = 0
    ci: tuple[float, float] | None = None


def _compared(a: Cell, b: Cell, metric: tuple[str, bool],
              cells: Mapping[Cell, Mapping[str, Any]], per_seed: PerSeed | None) -> _Ours:
    """Cell ``a``'s improvement over cell ``b`` on ``metric`` (both were run)."""
    key, higher = metric
    mine, base = cells[a].get(key), cells[b].get(key)
    pct = _improvement(mine, base, higher) if mine is not None and base is not None else None
    n, ci = 0, None
    if per_seed is not None and a in per_seed and b in per_seed:
        n, ci = _improvement_spread(per_seed[a], per_seed[b], key, higher)
    return _Ours(pct, f"{'/'.join(a)} vs {'/'.join(b)} ({key})", n, ci)


def table(found: Sequence[Row]) -> str:
    """Markdown: the paper's improvement, ours and their ratio, figure by figure."""
    lines = ["| paper figure | context | paper | ours [95 % CI] (N seeds) "
             "| ours / paper [95 % CI] | our cells |",
             "|---|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| {r.scheme} vs {r.baseline}, {r.metric} | {r.context} ({r.source}) "
                     f"| {_pct(r.paper_pct)} | {_ours(r)} | {_ratio(r)} | {r.ours} |")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1f} %"


def _ours(r: Row) -> str:
    """``+12.3 % [+8.1, +15.0] (N=3)``; the bare value without an interval."""
    if r.ours_pct is None:
        return ""
    ci = f" [{r.ours_ci[0]:+.1f}, {r.ours_ci[1]:+.1f}]" if r.ours_ci else ""
    return f"{_pct(r.ours_pct)}{ci}" + (f" (N={r.n})" if r.n else "")


def _ratio(r: Row) -> str:
    """``0.34 [0.21, 0.47]``; the bare ratio without an interval."""
    if r.ratio is None:
        return ""
    ci = f" [{r.ratio_ci[0]:.2f}, {r.ratio_ci[1]:.2f}]" if r.ratio_ci else ""
    return f"{r.ratio:.2f}{ci}"
