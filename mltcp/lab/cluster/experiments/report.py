"""A cluster experiment's results as people read them: JSON, markdown, tables, plots.

Writes into the output directory (each file atomically: mltcp.lab.common.atomic):
    report.json        schema "mltcp.cluster/3" (below), with provenance
    summary.md         per scheduler x network the metrics below with N and their 95 %
                       intervals, then every network scheme against fair sharing under
                       the same scheduler
    jobs.parquet       one row per job per run: scheduler, network, seed, job and every
                       number the simulator records for it (.csv without pyarrow)
    cells.parquet      one row per scheduler x network cell: N and each metric's mean,
                       ci_lo, ci_hi over the seeds (and the ratios to fair's)
    jct_cdf.png/.pdf   JCT ECDF, one panel per scheduler, one curve per network scheme
                       (every seed's jobs pooled; N seeds and jobs in the legend)
    slowdown_cdf.png/.pdf   the same for slowdown (JCT over the job's dedicated run time)

report.json:
    schema, config (the experiment as parsed), runset (runset.json's record, null
    without one), partial ({runs_done, runs_total} when interrupted, else null),
    settings {confidence, bootstrap_resamples}, provenance, metrics {name: definition},
    cells [{scheduler, network, seeds, n, <metric>: mean over the seeds of the run's
            value, spread {<metric>: {n, mean, ci_lo, ci_hi, level}}}],
    vs_fair [{scheduler, network, n, jct_mean_ratio, jct_p99_ratio, run_slowdown_ratio,
              spread {<ratio>: {n, mean, ci_lo, ci_hi, level}},
              per_seed [{seed, jct_mean_ratio, jct_p99_ratio, run_slowdown_ratio}]}],
    paper_figures [{context, metric, scheme, baseline, source, paper_pct, ours_pct, ours,
                    n, ours_ci, ratio, ratio_ci}]
                  (on a paper's setup: each figure the paper reports next to ours,
                  the gap as ours_pct / paper_pct and our interval's ends over
                  paper_pct, mltcp.lab.cluster.papers.compare; otherwise empty),
    runs [{scheduler, network, seed, metrics {<metric>: value},
           jobs [JobOutcome's fields + jct_s, jwt_s, slowdown]}]

Each metric has one definition: JCT percentiles, makespan and GPU utilisation are
:class:`~mltcp.lab.cluster.engine.simulator.ClusterResult`'s; what it lacks (JWT mean, slowdown
mean and p99, preemptions) is defined here, once, on a ClusterResult.  A cell's value is
the mean over its seeds with N and the seeded 95 % percentile-bootstrap interval
(:func:`mltcp.lab.common.stats.bootstrap`; none with N = 1); a run without a value
(slowdown where no job has a dedicated time) is left out of N, not counted as zero.  A
ratio to fair is the network's mean over fair's under the same scheduler, over the seeds
both ran (< 1: faster than fair), with the paired bootstrap interval.  JSON gets null
for a missing value, never NaN.

An interrupted experiment's report (``partial``) is built from the runs that finished:
each cell over its seeds that ran, cells without a run left out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.lab.cluster.engine.simulator import ClusterResult, JobOutcome
from mltcp.lab.cluster.experiments.config import SetupJobs
from mltcp.lab.cluster.experiments.runner import ExperimentResult, RunKey
from mltcp.lab.cluster.papers import compare as paper_compare
from mltcp.lab.common import plotting, runset, stats, tables
from mltcp.lab.common.atomic import write_json, write_text

SCHEMA = "mltcp.cluster/3"
FAIR = "fair"

METRICS: dict[str, str] = {
    "jobs": "jobs finished",
    "jct_mean_s": "job completion time (end - arrival), mean over jobs",
    "jct_p50_s": "JCT, 50th percentile",
    "jct_p90_s": "JCT, 90th percentile",
    "jct_p95_s": "JCT, 95th percentile",
    "jct_p99_s": "JCT, 99th percentile",
    "jwt_mean_s": "job waiting time (start - arrival), mean over jobs",
    "makespan_s": "last end - first arrival",
    "gpu_utilisation": "GPU-seconds held by jobs / GPU-seconds of the cluster in the makespan",
    "slowdown_mean": "JCT / the job's dedicated run time, mean over jobs",
    "slowdown_p99": "slowdown, 99th percentile",
    "run_slowdown_mean": "time on GPUs / the job's dedicated run time (the network's cost, "
                         "waiting left out), mean over jobs",
    "run_slowdown_p99": "run slowdown, 99th percentile",
    "held_mean_s": "time on GPUs (end - start less time preempted), mean over jobs "
                   "(what deepshare-rl's simulator counts as a job's JCT)",
    "held_p90_s": "time on GPUs, 90th percentile",
    "iteration_mean_s": "iteration time (a job's time on GPUs / its iterations), mean over "
                        "all iterations of all jobs, each job's at its mean (what the "
                        "Cassini thesis's iteration-time CDFs are over)",
    "iteration_p99_s": "iteration time, 99th percentile over all iterations, each job's at "
                       "its mean",
    "preemptions": "times a job was sent back to the queue, summed over jobs",
}


# --------------------------------------------------------------------------- metrics


def jwt_mean(result: ClusterResult) -> float:
    return float(np.mean([j.jwt_s for j in result.jobs]))


def slowdowns(result: ClusterResult, which: str = "slowdown") -> np.ndarray:
    """Every job's ``which`` (slowdown or run_slowdown) that is defined (a job with a
    dedicated time)."""
    values = np.array([getattr(j, which) for j in result.jobs])
    return values[np.isfinite(values)]


def slowdown_summary(result: ClusterResult, which: str = "slowdown"
                     ) -> dict[str, float | None]:
    values = slowdowns(result, which)
    if not values.size:
        return {"mean": None, "p99": None}
    return {"mean": float(values.mean()), "p99": float(np.percentile(values, 99))}


def iteration_summary(result: ClusterResult) -> dict[str, float | None]:
    """Mean and 99th percentile of iteration time over every iteration of every job
    that records its iterations, each job's iterations at its mean (the engine keeps no
    per-iteration times: contention that comes and goes within a job is averaged)."""
    jobs = [j for j in result.jobs if j.iterations > 0]
    if not jobs:
        return {"mean": None, "p99": None}
    times = np.array([j.held_s / j.iterations for j in jobs])
    counts = np.array([j.iterations for j in jobs], dtype=float)
    order = np.argsort(times, kind="stable")
    reached = np.cumsum(counts[order]) / counts.sum()
    p99 = times[order][min(int(np.searchsorted(reached, 0.99)), len(jobs) - 1)]
    return {"mean": float(times @ counts / counts.sum()), "p99": float(p99)}


def preemptions(result: ClusterResult) -> int:
    return sum(j.preemptions for j in result.jobs)


def run_metrics(result: ClusterResult) -> dict[str, float | int | None]:
    """One run's :data:`METRICS`."""
    jct = result.jct_summary()
    slow = slowdown_summary(result)
    run = slowdown_summary(result, "run_slowdown")
    held = [j.held_s for j in result.jobs]
    iteration = iteration_summary(result)
    return {"jobs": len(result.jobs), "jct_mean_s": jct["mean"], "jct_p50_s": jct["p50"],
            "jct_p90_s": jct["p90"], "jct_p95_s": jct["p95"], "jct_p99_s": jct["p99"],
            "jwt_mean_s": jwt_mean(result),
            "makespan_s": result.makespan_s, "gpu_utilisation": result.gpu_utilisation(),
            "slowdown_mean": slow["mean"], "slowdown_p99": slow["p99"],
            "run_slowdown_mean": run["mean"], "run_slowdown_p99": run["p99"],
            "held_mean_s": float(np.mean(held)), "held_p90_s": float(np.percentile(held, 90)),
            "iteration_mean_s": iteration["mean"], "iteration_p99_s": iteration["p99"],
            "preemptions": preemptions(result)}


# Each ratio to fair sharing: the metric it is the ratio of.
RATIOS: dict[str, str] = {"jct_mean_ratio": "jct_mean_s", "jct_p99_ratio": "jct_p99_s",
                          "run_slowdown_ratio": "run_slowdown_mean"}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ratios(mine: dict[str, Any], fair: dict[str, Any]) -> dict[str, float | None]:
    """Mean and p99 JCT, and mean run slowdown, over fair sharing's (one run's)."""
    return {name: _ratio(mine[metric], fair[metric]) for name, metric in RATIOS.items()}


def _paired_ratio(mine: list[dict[str, Any]], fair: list[dict[str, Any]], metric: str
                  ) -> stats.Spread:
    """mean(mine) / mean(fair) of ``metric`` over the seeds both have a value for, with
    the paired bootstrap interval (a seed's two runs resampled together)."""
    pairs = [(a[metric], b[metric]) for a, b in zip(mine, fair, strict=True)
             if a[metric] is not None and b[metric] is not None]
    return stats.bootstrap_ratio([a for a, _ in pairs], [b for _, b in pairs])


# --------------------------------------------------------------------------- report


def build(result: ExperimentResult, recorded: runset.RunSet | None = None) -> dict[str, Any]:
    """The report as a dict (what report.json holds); ``recorded``: the output
    directory's run set, recorded beside the results."""
    from mltcp.lab.common.provenance import provenance

    cfg = result.config
    per_run = {key: run_metrics(res) for key, res in result.runs}
    cells = [cell for sched in cfg.schedulers for net in cfg.networks
             if (cell := _cell(sched, net, cfg.seeds, per_run)) is not None]
    paper_figures = []
    if isinstance(cfg.jobs, SetupJobs):
        by_cell = {(c["scheduler"], c["network"]): c for c in cells}
        per_seed = {(c["scheduler"], c["network"]):
                    {s: per_run[RunKey(c["scheduler"], c["network"], s)] for s in c["seeds"]}
                    for c in cells}
        paper_figures = [r.to_json() for r in paper_compare.rows(cfg.jobs.name, by_cell,
                                                                 per_seed)]
    return {
        "schema": SCHEMA, "config": cfg.to_dict(),
        "runset": recorded.to_dict() if recorded is not None else None,
        "partial": result.partial,
        "settings": {"confidence": stats.LEVEL, "bootstrap_resamples": stats.RESAMPLES},
        "provenance": provenance(),
        "metrics": METRICS, "cells": cells,
        "vs_fair": _vs_fair(cfg.schedulers, cfg.networks, cfg.seeds, per_run),
        "paper_figures": paper_figures,
        "runs": [{"scheduler": k.scheduler, "network": k.network, "seed": k.seed,
                  "metrics": per_run[k], "jobs": [_outcome(j) for j in res.jobs]}
                 for k, res in result.runs],
    }


def _cell(sched: str, net: str, seeds: tuple[int, ...],
          per_run: dict[RunKey, dict[str, Any]]) -> dict[str, Any] | None:
    """One scheduler x network cell over the seeds it ran (None: none ran): each
    metric's mean, and its N and interval under ``spread``."""
    ran = [s for s in seeds if RunKey(sched, net, s) in per_run]
    if not ran:
        return None
    runs = [per_run[RunKey(sched, net, s)] for s in ran]
    spreads = {m: stats.bootstrap(r[m] for r in runs) for m in METRICS}
    return {"scheduler": sched, "network": net, "seeds": ran, "n": len(ran),
            **{m: sp.mean for m, sp in spreads.items()},
            "spread": {m: sp.to_dict() for m, sp in spreads.items()}}


def _vs_fair(schedulers: tuple[str, ...], networks: tuple[str, ...], seeds: tuple[int, ...],
             per_run: dict[RunKey, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each network scheme over fair sharing under the same scheduler, over the seeds
    both ran."""
    if FAIR not in networks:
        return []
    out = []
    for sched in schedulers:
        for net in networks:
            both = [s for s in seeds if RunKey(sched, net, s) in per_run
                    and RunKey(sched, FAIR, s) in per_run]
            if net == FAIR or not both:
                continue
            mine = [per_run[RunKey(sched, net, s)] for s in both]
            fair = [per_run[RunKey(sched, FAIR, s)] for s in both]
            spreads = {name: _paired_ratio(mine, fair, metric)
                       for name, metric in RATIOS.items()}
            out.append({"scheduler": sched, "network": net, "n": len(both),
                        **{name: sp.mean for name, sp in spreads.items()},
                        "spread": {name: sp.to_dict() for name, sp in spreads.items()},
                        "per_seed": [{"seed": s, **_ratios(m, f)}
                                     for s, m, f in zip(both, mine, fair, strict=True)]})
    return out


def _outcome(job: Any) -> dict[str, Any]:
    slowdown = job.slowdown
    return {**asdict(job), "jct_s": job.jct_s, "jwt_s": job.jwt_s,
            "slowdown": slowdown if math.isfinite(slowdown) else None,
            "run_slowdown": job.run_slowdown if math.isfinite(job.run_slowdown) else None}


def write(result: ExperimentResult, out_dir: str | Path) -> dict[str, Any]:
    """report.json, the two tables, the two figures and summary.md (last: what points
    at the others) in ``out_dir``, each atomically; returns the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build(result, runset.read(out))
    write_json(out / "report.json", report)
    written = write_tables(report, out)
    _plots(result, out)
    write_text(out / "summary.md", markdown(report, [p.name for p in written]))
    return report


# --------------------------------------------------------------------------- tables


def job_columns() -> list[str]:
    """The jobs table's columns: which run, which job, and every number the simulator
    records for a job (JobOutcome's fields) with those derived from them."""
    recorded = [f.name for f in fields(JobOutcome) if f.name != "name"]
    return ["scheduler", "network", "seed", "job", *recorded,
            "jct_s", "jwt_s", "slowdown", "run_slowdown"]


def cell_columns() -> list[str]:
    """The cells table's columns: the cell, its N, each metric's and each ratio to
    fair's mean and interval."""
    stats_of = [f"{name}_{part}" for name in (*METRICS, *RATIOS)
                for part in ("mean", "ci_lo", "ci_hi")]
    return ["scheduler", "network", "n", *stats_of]


def job_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per job per run."""
    return [{"scheduler": run["scheduler"], "network": run["network"], "seed": run["seed"],
             "job": job["name"], **{k: v for k, v in job.items() if k != "name"}}
            for run in report["runs"] for job in run["jobs"]]


def cell_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cell; its ratios to fair are empty for fair itself (and without
    fair runs)."""
    ratios = {(r["scheduler"], r["network"]): r["spread"] for r in report["vs_fair"]}
    rows = []
    for c in report["cells"]:
        spreads = {**c["spread"], **ratios.get((c["scheduler"], c["network"]), {})}
        row: dict[str, Any] = {"scheduler": c["scheduler"], "network": c["network"],
                               "n": c["n"]}
        for name in (*METRICS, *RATIOS):
            sp = spreads.get(name, {})
            row.update({f"{name}_mean": sp.get("mean"), f"{name}_ci_lo": sp.get("ci_lo"),
                        f"{name}_ci_hi": sp.get("ci_hi")})
        rows.append(row)
    return rows


def write_tables(report: dict[str, Any], out: Path) -> list[Path]:
    """jobs and cells, as Parquet (CSV without pyarrow); the paths written.  The other
    format's file from an earlier report is removed, so no stale table stays beside."""
    return [tables.write_table(job_rows(report), out / "jobs", job_columns()),
            tables.write_table(cell_rows(report), out / "cells", cell_columns())]


# --------------------------------------------------------------------------- markdown


def _sec(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{_sec(value)} s"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ci(value: float | None, spread: dict[str, Any] | None, fmt: Any, unit: str = "") -> str:
    """``"123 [110, 140] s"``: the mean and its interval (the bare mean with N = 1 or
    from a report without intervals)."""
    if value is None:
        return "-"
    if not spread or spread.get("ci_lo") is None:
        return f"{fmt(value)}{unit}"
    return f"{fmt(value)} [{fmt(spread['ci_lo'])}, {fmt(spread['ci_hi'])}]{unit}"


# (column, metric, format, unit) of the cells' table
_COLUMNS: tuple[tuple[str, str, Any, str], ...] = (
    ("JCT mean", "jct_mean_s", _sec, " s"), ("p50", "jct_p50_s", _sec, " s"),
    ("p90", "jct_p90_s", _sec, " s"), ("p99", "jct_p99_s", _sec, " s"),
    ("JWT mean", "jwt_mean_s", _sec, " s"), ("makespan", "makespan_s", _sec, " s"),
    ("GPU util.", "gpu_utilisation", lambda v: format(v, ".0%"), ""),
    ("slowdown mean", "slowdown_mean", lambda v: format(v, ".2f"), ""),
    ("slowdown p99", "slowdown_p99", lambda v: format(v, ".2f"), ""),
    ("run slowdown mean", "run_slowdown_mean", lambda v: format(v, ".3f"), ""),
    ("run slowdown p99", "run_slowdown_p99", lambda v: format(v, ".3f"), ""),
    ("preemptions", "preemptions", lambda v: format(v, ".3g"), ""))


def table(report: dict[str, Any]) -> str:
    """Every scheduler x network scheme: N (seeds) and its metrics' means over them
    with their 95 % intervals."""
    lines = ["| scheduler | network | N | " + " | ".join(c[0] for c in _COLUMNS) + " |",
             "|" + "---|" * (3 + len(_COLUMNS))]
    for c in report["cells"]:
        spread = c.get("spread", {})
        values = [_ci(c[m], spread.get(m), fmt, unit) for _, m, fmt, unit in _COLUMNS]
        lines.append(f"| {c['scheduler']} | {c['network']} | {c.get('n', len(c['seeds']))} | "
                     + " | ".join(values) + " |")
    return "\n".join(lines)


def vs_fair_table(report: dict[str, Any]) -> str:
    """Each network scheme's JCT over fair sharing's, under the same scheduler, with N
    (seeds both ran) and the paired 95 % intervals."""
    if not report["vs_fair"]:
        return _no_comparison(report)
    lines = ["| scheduler | network | N | mean JCT / fair | p99 JCT / fair | "
             "run slowdown / fair | mean JCT / fair per seed |", "|---|---|---|---|---|---|---|"]

    def ratio(v: float | None) -> str:
        return format(v, ".3f")

    for r in report["vs_fair"]:
        spread = r.get("spread", {})
        seeds = ", ".join(_num(s["jct_mean_ratio"], ".2f") for s in r["per_seed"])
        values = [_ci(r[name], spread.get(name), ratio) for name in RATIOS]
        lines.append(f"| {r['scheduler']} | {r['network']} | {r.get('n', len(r['per_seed']))} "
                     f"| " + " | ".join(values) + f" | {seeds} |")
    return "\n".join(lines)


def _no_comparison(report: dict[str, Any]) -> str:
    """Why the 'vs fair' table is empty, with the advice that fits: no fair sharing,
    fair sharing alone (adding "fair" would change nothing), or runs that did not
    finish in pairs (an interrupted experiment)."""
    networks = report.get("config", {}).get("networks", [])
    if FAIR not in networks:
        return "No fair-sharing runs to compare with (add \"fair\" to networks)."
    if all(n == FAIR for n in networks):
        return ("Only fair sharing ran: no other network scheme to compare with it (add "
                "\"mltcp\" to networks).")
    return "No scheme finished a seed that fair sharing finished too: nothing to compare."


def partial_line(report: dict[str, Any]) -> str | None:
    """The line that opens an interrupted experiment's summary (None when complete)."""
    part = report.get("partial")
    if not part:
        return None
    return (f"**PARTIAL: interrupted after {part['runs_done']} of {part['runs_total']} "
            "runs.** Every number below is over the runs that finished; cells without "
            "a finished run are left out.")


def markdown(report: dict[str, Any], table_files: list[str] | None = None) -> str:
    cfg, prov = report["config"], report["provenance"]
    c = cfg["cluster"]
    gpus = c["leaves"] * c["servers_per_leaf"] * c["gpus_per_server"]
    source = ", ".join(_poisson_text(v) if k == "poisson" else f"{k} {v}"
                       for k, v in cfg["jobs"].items())
    settings = report.get("settings", {"confidence": stats.LEVEL,
                                       "bootstrap_resamples": stats.RESAMPLES})
    partial = partial_line(report)
    files = table_files or []
    return "\n".join([
        *([partial, ""] if partial else []),
        f"# {cfg['name']}", "",
        *([cfg["description"], ""] if cfg["description"] else []),
        f"{gpus} GPUs: {c['leaves']} leaves x {c['servers_per_leaf']} servers x "
        f"{c['gpus_per_server']} GPUs, {c['spines']} spine{'s' if c['spines'] != 1 else ''}, "
        f"{c.get('rails', 1)} x {c['server_gbit']:g} Gbit/s NIC"
        f"{'s' if c.get('rails', 1) > 1 else ''} per server, oversubscription "
        f"{c['oversubscription']:g}. "
        f"Jobs: {source}. "
        f"Seeds: {', '.join(map(str, cfg['seeds']))} "
        "(each number a mean over those its cell ran: N).", "",
        f"N = seeds per cell; [lo, hi] = the {settings['confidence']:.0%} bootstrap "
        f"confidence interval of the mean over the seeds "
        f"({settings['bootstrap_resamples']:,} resamples, seeded; none with N = 1).", "",
        table(report), "",
        "JCT under each network scheme over JCT under fair sharing, same scheduler "
        "(< 1: faster than fair; N = seeds both ran, paired interval):", "",
        vs_fair_table(report), "",
        *(["The paper's figures next to ours (improvement of the scheme over the baseline; "
           "ours / paper: the share of the paper's improvement we reproduce; "
           "mltcp.lab.cluster.papers.compare says what maps onto what):", "",
           paper_compare.table([paper_compare.Row.from_json(r)
                                for r in report["paper_figures"]]),
           ""]
          if report.get("paper_figures") else []),
        *([f"Tables: {', '.join(f'`{f}`' for f in files)} (one row per job per run; one "
           "row per cell with N, each mean and its interval).", ""] if files else []),
        f"git {prov.get('git_sha', '?')[:12]}{' (dirty)' if prov.get('git_dirty') else ''}, "
        f"{prov.get('time_utc', '')}", "",
        "![JCT CDF](jct_cdf.png) ![slowdown CDF](slowdown_cdf.png) "
        "(vector: jct_cdf.pdf, slowdown_cdf.pdf)", ""])


def _poisson_text(p: dict[str, Any]) -> str:
    rate = f"GPU load {p['load']:g}" if "load" in p else f"{p['jobs_per_hour']:g}/hour"
    return (f"{p['n']} Poisson arrivals at {rate} of "
            f"{', '.join(p['models'])} on {', '.join(p['gpus'])} GPUs")


# --------------------------------------------------------------------------- plots


def _plots(result: ExperimentResult, out: Path) -> None:
    """The JCT and slowdown ECDFs (PNG and PDF), every seed's jobs of a cell pooled."""
    cfg = result.config
    pooled: dict[tuple[str, str], list[ClusterResult]] = {}
    for key, res in result.runs:
        pooled.setdefault((key.scheduler, key.network), []).append(res)
    jct = {k: Pooled(len(rs), np.concatenate([[j.jct_s for j in r.jobs] for r in rs]))
           for k, rs in pooled.items()}
    slow = {k: Pooled(len(rs), np.concatenate([slowdowns(r) for r in rs]))
            for k, rs in pooled.items()}
    note = _partial_note(result)
    plotting.save(_cdf_panels(cfg.schedulers, cfg.networks, jct, "JCT (s)",
                              f"JCT ECDF per scheduler, every seed's jobs pooled{note}"),
                  out / "jct_cdf")
    plotting.save(_cdf_panels(cfg.schedulers, cfg.networks, slow,
                              "slowdown (JCT / dedicated run time)",
                              f"Slowdown ECDF per scheduler, every seed's jobs pooled{note}"),
                  out / "slowdown_cdf")


def _partial_note(result: ExperimentResult) -> str:
    part = result.partial
    return "" if part is None else \
        f" (PARTIAL: {part['runs_done']} of {part['runs_total']} runs)"


@dataclass(frozen=True)
class Pooled:
    """A cell's values pooled over its ``seeds`` runs (a figure says both Ns)."""

    seeds: int
    values: np.ndarray


def _cdf_panels(schedulers: tuple[str, ...], networks: tuple[str, ...],
                values: dict[tuple[str, str], Pooled], xlabel: str, title: str) -> Any:
    """One panel per scheduler, one ECDF per network scheme, each network in the same
    style in every panel; its N (seeds, jobs) in the legend."""
    cols = min(3, len(schedulers))
    rows = math.ceil(len(schedulers) / cols)
    fig, axes = plotting.figure(rows, cols, figsize=(4.4 * cols, 0.5 + 3.3 * rows),
                                squeeze=False, sharey=True)
    for ax, sched in zip(axes.flat, schedulers, strict=False):
        ends = []
        for net, style in zip(networks, plotting.styles(), strict=False):
            cell = values.get((sched, net))
            if cell is None or not cell.values.size:
                continue
            plotting.ecdf(ax, cell.values, label=plotting.with_n(
                net, cell.seeds, f"seed{'s' if cell.seeds != 1 else ''}, "
                                 f"{cell.values.size} jobs"), **style)
            ends += [float(cell.values.min()), float(cell.values.max())]
        if not ends:
            ax.text(0.5, 0.5, "no finished run", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
            ax.set_xticks([])
        positive = [v for v in ends if v > 0]
        if positive and max(positive) / min(positive) > 100:
            ax.set_xscale("log")
        ax.set_title(sched, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        plotting.legend(ax, fontsize=7)
    for ax in axes.flat[len(schedulers):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("fraction of jobs")
    fig.suptitle(title, fontsize=10)
    return fig
