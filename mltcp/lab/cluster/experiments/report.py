"""A cluster experiment's results as people read them: JSON, a markdown table, plots.

Writes into the output directory:
    report.json        schema "mltcp.cluster/2" (below), with provenance
    summary.md         per scheduler x network the metrics below, then every network
                       scheme against fair sharing under the same scheduler
    jct_cdf.png        JCT CDF, one panel per scheduler, one curve per network scheme
                       (every seed's jobs pooled)
    slowdown_cdf.png   the same for slowdown (JCT over the job's dedicated run time)

report.json:
    schema, config (the experiment as parsed), provenance, metrics {name: definition},
    cells [{scheduler, network, seeds, <metric>: mean over the seeds of the run's value}],
    vs_fair [{scheduler, network, jct_mean_ratio, jct_p99_ratio,
              per_seed [{seed, jct_mean_ratio, jct_p99_ratio}]}],
    paper_figures [{context, metric, scheme, baseline, source, paper_pct, ours_pct, ours}]
                  (on a paper's setup: each figure the paper reports next to ours,
                  mltcp.lab.cluster.papers.compare; otherwise empty),
    runs [{scheduler, network, seed, metrics {<metric>: value},
           jobs [JobOutcome's fields + jct_s, jwt_s, slowdown]}]

Each metric has one definition: JCT percentiles, makespan and GPU utilisation are
:class:`~mltcp.lab.cluster.engine.simulator.ClusterResult`'s; what it lacks (JWT mean, slowdown
mean and p99, preemptions) is defined here, once, on a ClusterResult.  A ratio to fair
is the network's value over fair's under the same scheduler (< 1: faster than fair).
Slowdown skips jobs without a dedicated time (no compute and no bytes: NaN), and is
None where no job has one; JSON gets null for it, never NaN.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.lab.cluster.engine.simulator import ClusterResult
from mltcp.lab.cluster.experiments.config import SetupJobs
from mltcp.lab.cluster.experiments.runner import ExperimentResult, RunKey
from mltcp.lab.cluster.papers import compare as paper_compare

SCHEMA = "mltcp.cluster/2"
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


def preemptions(result: ClusterResult) -> int:
    return sum(j.preemptions for j in result.jobs)


def run_metrics(result: ClusterResult) -> dict[str, float | int | None]:
    """One run's :data:`METRICS`."""
    jct = result.jct_summary()
    slow = slowdown_summary(result)
    run = slowdown_summary(result, "run_slowdown")
    held = [j.held_s for j in result.jobs]
    return {"jobs": len(result.jobs), "jct_mean_s": jct["mean"], "jct_p50_s": jct["p50"],
            "jct_p90_s": jct["p90"], "jct_p95_s": jct["p95"], "jct_p99_s": jct["p99"],
            "jwt_mean_s": jwt_mean(result),
            "makespan_s": result.makespan_s, "gpu_utilisation": result.gpu_utilisation(),
            "slowdown_mean": slow["mean"], "slowdown_p99": slow["p99"],
            "run_slowdown_mean": run["mean"], "run_slowdown_p99": run["p99"],
            "held_mean_s": float(np.mean(held)), "held_p90_s": float(np.percentile(held, 90)),
            "preemptions": preemptions(result)}


def _mean(values: list[float | int | None]) -> float | None:
    return None if not values or None in values else float(np.mean(values))


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _ratios(mine: dict[str, Any], fair: dict[str, Any]) -> dict[str, float | None]:
    """Mean and p99 JCT, and mean run slowdown, over fair sharing's (the same keys in a
    cell and a run)."""
    return {"jct_mean_ratio": _ratio(mine["jct_mean_s"], fair["jct_mean_s"]),
            "jct_p99_ratio": _ratio(mine["jct_p99_s"], fair["jct_p99_s"]),
            "run_slowdown_ratio": _ratio(mine["run_slowdown_mean"], fair["run_slowdown_mean"])}


# --------------------------------------------------------------------------- report


def build(result: ExperimentResult) -> dict[str, Any]:
    """The report as a dict (what report.json holds)."""
    from mltcp.lab.common.provenance import provenance

    cfg = result.config
    per_run = {key: run_metrics(res) for key, res in result.runs}
    cells = []
    for sched in cfg.schedulers:
        for net in cfg.networks:
            runs = [per_run[RunKey(sched, net, s)] for s in cfg.seeds]
            cells.append({"scheduler": sched, "network": net, "seeds": list(cfg.seeds),
                          **{m: _mean([r[m] for r in runs]) for m in METRICS}})
    paper_figures = []
    if isinstance(cfg.jobs, SetupJobs):
        by_cell = {(c["scheduler"], c["network"]): c for c in cells}
        paper_figures = [r.to_json() for r in paper_compare.rows(cfg.jobs.name, by_cell)]
    return {
        "schema": SCHEMA, "config": cfg.to_dict(), "provenance": provenance(),
        "metrics": METRICS, "cells": cells, "vs_fair": _vs_fair(cfg.schedulers, cfg.networks,
                                                                cfg.seeds, cells, per_run),
        "paper_figures": paper_figures,
        "runs": [{"scheduler": k.scheduler, "network": k.network, "seed": k.seed,
                  "metrics": per_run[k], "jobs": [_outcome(j) for j in res.jobs]}
                 for k, res in result.runs],
    }


def _vs_fair(schedulers: tuple[str, ...], networks: tuple[str, ...], seeds: tuple[int, ...],
             cells: list[dict[str, Any]], per_run: dict[RunKey, dict[str, Any]]
             ) -> list[dict[str, Any]]:
    if FAIR not in networks:
        return []
    cell = {(c["scheduler"], c["network"]): c for c in cells}
    out = []
    for sched in schedulers:
        base = cell[sched, FAIR]
        for net in networks:
            if net == FAIR:
                continue
            out.append({"scheduler": sched, "network": net,
                        **_ratios(cell[sched, net], base),
                        "per_seed": [{"seed": s, **_ratios(per_run[RunKey(sched, net, s)],
                                                           per_run[RunKey(sched, FAIR, s)])}
                                     for s in seeds]})
    return out


def _outcome(job: Any) -> dict[str, Any]:
    slowdown = job.slowdown
    return {**asdict(job), "jct_s": job.jct_s, "jwt_s": job.jwt_s,
            "slowdown": slowdown if math.isfinite(slowdown) else None,
            "run_slowdown": job.run_slowdown if math.isfinite(job.run_slowdown) else None}


def write(result: ExperimentResult, out_dir: str | Path) -> dict[str, Any]:
    """report.json, summary.md and the two plots in ``out_dir``; returns the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = build(result)
    (out / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    _plots(result, out)
    (out / "summary.md").write_text(markdown(report))
    return report


# --------------------------------------------------------------------------- markdown


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f} s" if abs(value) >= 100 else f"{value:.3g} s"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(report: dict[str, Any]) -> str:
    """Every scheduler x network scheme, its metrics' means over the seeds."""
    lines = ["| scheduler | network | JCT mean | p50 | p90 | p99 | JWT mean | makespan | "
             "GPU util. | slowdown mean | slowdown p99 | run slowdown mean | run slowdown p99 "
             "| preemptions |", "|" + "---|" * 14]
    for c in report["cells"]:
        lines.append(
            f"| {c['scheduler']} | {c['network']} | {_seconds(c['jct_mean_s'])} | "
            f"{_seconds(c['jct_p50_s'])} | {_seconds(c['jct_p90_s'])} | "
            f"{_seconds(c['jct_p99_s'])} | {_seconds(c['jwt_mean_s'])} | "
            f"{_seconds(c['makespan_s'])} | {_num(c['gpu_utilisation'], '.0%')} | "
            f"{_num(c['slowdown_mean'], '.2f')} | {_num(c['slowdown_p99'], '.2f')} | "
            f"{_num(c['run_slowdown_mean'], '.3f')} | {_num(c['run_slowdown_p99'], '.3f')} | "
            f"{_num(c['preemptions'], 'g')} |")
    return "\n".join(lines)


def vs_fair_table(report: dict[str, Any]) -> str:
    """Each network scheme's JCT over fair sharing's, under the same scheduler."""
    if not report["vs_fair"]:
        return "No fair-sharing runs to compare with (add \"fair\" to networks)."
    lines = ["| scheduler | network | mean JCT / fair | p99 JCT / fair | run slowdown / fair "
             "| mean JCT / fair per seed |", "|---|---|---|---|---|---|"]
    for r in report["vs_fair"]:
        seeds = ", ".join(_num(s["jct_mean_ratio"], ".2f") for s in r["per_seed"])
        lines.append(f"| {r['scheduler']} | {r['network']} | "
                     f"{_num(r['jct_mean_ratio'], '.3f')} | {_num(r['jct_p99_ratio'], '.3f')} "
                     f"| {_num(r['run_slowdown_ratio'], '.3f')} | {seeds} |")
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    cfg, prov = report["config"], report["provenance"]
    c = cfg["cluster"]
    gpus = c["leaves"] * c["servers_per_leaf"] * c["gpus_per_server"]
    source = ", ".join(_poisson_text(v) if k == "poisson" else f"{k} {v}"
                       for k, v in cfg["jobs"].items())
    return "\n".join([
        f"# {cfg['name']}", "",
        *([cfg["description"], ""] if cfg["description"] else []),
        f"{gpus} GPUs: {c['leaves']} leaves x {c['servers_per_leaf']} servers x "
        f"{c['gpus_per_server']} GPUs, {c['spines']} spine{'s' if c['spines'] != 1 else ''}, "
        f"{c.get('rails', 1)} x {c['server_gbit']:g} Gbit/s NIC"
        f"{'s' if c.get('rails', 1) > 1 else ''} per server, oversubscription "
        f"{c['oversubscription']:g}. "
        f"Jobs: {source}. "
        f"Seeds: {', '.join(map(str, cfg['seeds']))} (each number a mean over them).", "",
        table(report), "",
        "JCT under each network scheme over JCT under fair sharing, same scheduler "
        "(< 1: faster than fair):", "",
        vs_fair_table(report), "",
        *(["The paper's figures next to ours (improvement of the scheme over the baseline; "
           "mltcp.lab.cluster.papers.compare says what maps onto what):", "",
           paper_compare.table([paper_compare.Row(**r) for r in report["paper_figures"]]),
           ""]
          if report.get("paper_figures") else []),
        f"git {prov.get('git_sha', '?')[:12]}{' (dirty)' if prov.get('git_dirty') else ''}, "
        f"{prov.get('time_utc', '')}", "",
        "![JCT CDF](jct_cdf.png) ![slowdown CDF](slowdown_cdf.png)", ""])


def _poisson_text(p: dict[str, Any]) -> str:
    rate = f"GPU load {p['load']:g}" if "load" in p else f"{p['jobs_per_hour']:g}/hour"
    return (f"{p['n']} Poisson arrivals at {rate} of "
            f"{', '.join(p['models'])} on {', '.join(p['gpus'])} GPUs")


# --------------------------------------------------------------------------- plots


def _plots(result: ExperimentResult, out: Path) -> None:
    cfg = result.config
    pooled: dict[tuple[str, str], list[ClusterResult]] = {}
    for key, res in result.runs:
        pooled.setdefault((key.scheduler, key.network), []).append(res)
    jct = {k: np.concatenate([[j.jct_s for j in r.jobs] for r in rs])
           for k, rs in pooled.items()}
    slow = {k: np.concatenate([slowdowns(r) for r in rs]) for k, rs in pooled.items()}
    _cdf_panels(cfg.schedulers, cfg.networks, jct, "JCT (s)", out / "jct_cdf.png")
    _cdf_panels(cfg.schedulers, cfg.networks, slow, "slowdown (JCT / dedicated)",
                out / "slowdown_cdf.png")


def _cdf_panels(schedulers: tuple[str, ...], networks: tuple[str, ...],
                values: dict[tuple[str, str], np.ndarray], xlabel: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(schedulers))
    rows = math.ceil(len(schedulers) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False,
                             sharey=True)
    for ax, sched in zip(axes.flat, schedulers, strict=False):
        spread = []
        for i, net in enumerate(networks):
            x = np.sort(values[sched, net])
            if x.size:
                ax.step(x, np.arange(1, x.size + 1) / x.size, where="post", color=f"C{i}",
                        label=net)
                spread += [x[0], x[-1]]
        positive = [v for v in spread if v > 0]
        if positive and max(positive) / min(positive) > 100:
            ax.set_xscale("log")
        ax.set_title(sched, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes.flat[len(schedulers):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("CDF")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
