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
* Cassini (thesis): Themis + Cassini = ``cassini`` x ``cassini`` (ranked placements and
  time-shifts), Themis ~ ``fifo/first_fit`` x ``fair`` (Themis's auctions and elastic
  re-sizing are not modelled: a FIFO first-fit stands for its placement).  The paper's
  "iteration time" is the jobs' time per iteration; ours is the *run slowdown* (time on
  GPUs over the dedicated run time, i.e. a job's mean iteration time over its dedicated
  one), mean and 99th percentile over jobs; its "tail completion time" is our p99 JCT.

A paper's figure whose scheme, baseline or metric has no counterpart, or whose cells were
not run, is listed with "not run here" so that nothing the paper claims is silently left
out.  Given the runs' values per seed, our improvement carries its N (the seeds both
cells ran) and the 95 % paired bootstrap interval (:func:`mltcp.lab.common.stats.
bootstrap_ratio` of the two cells' means over the same seeds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
        "Th+Cassini": ("cassini", "cassini"), "Cassini": ("cassini", "cassini"),
        "Themis": ("fifo/first_fit", "fair")},
    **{f"deepshare-{trace}": {
        "RL-base": ("rl-base", "fair"), "RL-Hybrid": ("rl-hybrid", "fair"),
        "LAS": ("deepshare-las", "fair"), "SRTF": ("deepshare-srtf", "fair")}
       for trace in ("normal", "heavy", "medium", "low")},
}

# Contexts a setup's experiment reproduces (prefixes; absent: all of the paper's): the
# Cassini thesis also reports model-parallel and dynamic traces, which its Poisson setup
# does not run.
CONTEXTS: dict[str, tuple[str, ...]] = {
    "cassini-poisson": ("Poisson trace, data + model parallel", "all traces"),
}

# The paper's metric -> (the report's metric, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "average JCT": ("jct_mean_s", False), "median JCT": ("jct_p50_s", False),
    "95th-percentile JCT": ("jct_p95_s", False),
    "average JWT": ("jwt_mean_s", False),
    "average GPU utilisation": ("gpu_utilisation", True),
    "average iteration time": ("run_slowdown_mean", False),
    "p99 iteration time": ("run_slowdown_p99", False),
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

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["ours_ci"] = list(self.ours_ci) if self.ours_ci is not None else None
        return out


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
    """Markdown: the paper's improvement and ours, figure by figure."""
    lines = ["| paper figure | context | paper | ours [95 % CI] (N seeds) | our cells |",
             "|---|---|---|---|---|"]
    for r in found:
        lines.append(f"| {r.scheme} vs {r.baseline}, {r.metric} | {r.context} ({r.source}) "
                     f"| {_pct(r.paper_pct)} | {_ours(r)} | {r.ours} |")
    return "\n".join(lines)


def _pct(v: float | None) -> str:
    return "" if v is None else f"{v:+.1f} %"


def _ours(r: Row) -> str:
    """``+12.3 % [+8.1, +15.0] (N=3)``; the bare value without an interval."""
    if r.ours_pct is None:
        return ""
    ci = f" [{r.ours_ci[0]:+.1f}, {r.ours_ci[1]:+.1f}]" if r.ours_ci else ""
    return f"{_pct(r.ours_pct)}{ci}" + (f" (N={r.n})" if r.n else "")
