"""The report's figures, each as PNG and PDF (mltcp.lab.common.plotting), each saying
the N it is over.

    timeline  communication phases per job over time, one panel per scheme (its
              first seed: a timeline cannot be averaged), the first
              TIMELINE_ITERATIONS iterations of the first TIMELINE_JOBS jobs (more are
              a smear at any size; the title says what is shown)
    overlap   overlap per iteration per scheme: the mean over jobs and runs, with the
              range over the runs shaded (N runs in the legend)
    cdf       iteration-time ECDF per scheme, all jobs and runs pooled (from 0)
    cwnd      congestion windows per connection over time, one panel per scheme (first
              seed), where the traces record them (ns-3)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mltcp.lab.common import plotting
from mltcp.lab.scenario import metrics
from mltcp.lab.scenario.trace import Trace

TIMELINE_ITERATIONS = 100
TIMELINE_JOBS = 16


def draw(out: Path, by_scheme: dict[str, list[Trace]], summaries: dict[str, dict],
         threshold: float) -> list[str]:
    """Every figure of the report into ``out``; the names drawn (without suffix).  A
    figure with nothing to show is removed, so no stale one from an earlier report stays."""
    drawn = []
    for name, fn in (("timeline", lambda: _timeline(by_scheme)),
                     ("overlap", lambda: _overlap(by_scheme, summaries, threshold)),
                     ("cdf", lambda: _cdf(by_scheme)),
                     ("cwnd", lambda: _cwnd(by_scheme))):
        fig = fn()
        if fig is None:
            for suffix in plotting.FORMATS:
                (out / f"{name}.{suffix}").unlink(missing_ok=True)
            continue
        plotting.save(fig, out / name)
        drawn.append(name)
    return drawn


def _first(traces: list[Trace]) -> Trace:
    return min(traces, key=lambda t: t.seed)


def _timeline(by_scheme: dict[str, list[Trace]]):  # type: ignore[no-untyped-def]
    names = list(by_scheme)
    fig, axes = plotting.figure(len(names), 1, figsize=(10, 1.2 + 1.1 * len(names)),
                                squeeze=False, sharex=True)
    for ax, name in zip(axes[:, 0], names, strict=True):
        trace = _first(by_scheme[name])
        jobs = trace.jobs[:TIMELINE_JOBS]
        longest = max(len(j.iterations) for j in jobs)
        until = min(j.iterations[min(TIMELINE_ITERATIONS, len(j.iterations)) - 1].end
                    for j in jobs if j.iterations)
        for row, job in enumerate(jobs):
            spans = [(s, e - s) for s, e in job.comm_intervals() if s <= until]
            ax.broken_barh(spans, (row - 0.4, 0.8), color=f"C{row}")
        ax.set_yticks(range(len(jobs)), [j.name for j in jobs])
        shown = (f", the first {TIMELINE_ITERATIONS} of {longest} iterations"
                 if longest > TIMELINE_ITERATIONS else "")
        if len(trace.jobs) > len(jobs):
            shown += f", the first {len(jobs)} of {len(trace.jobs)} jobs"
        ax.set_title(f"{name}: communication phases, seed {trace.seed} "
                     f"(1 of N={len(by_scheme[name])} runs){shown}", fontsize=9)
    axes[-1, 0].set_xlabel("time (s)")
    return fig


def _overlap(by_scheme: dict[str, list[Trace]], summaries: dict[str, dict],
             threshold: float):  # type: ignore[no-untyped-def]
    fig, ax = plotting.figure()
    style = plotting.styles()
    for name, traces in by_scheme.items():
        runs = [np.mean([j["overlap"] for j in summaries[f"{name}/seed{t.seed}"]["jobs"]
                         .values()], axis=0)
                for t in traces if _aligned(summaries[f"{name}/seed{t.seed}"])]
        if not runs:
            continue
        n = min(len(r) for r in runs)
        curves = np.array([r[:n] for r in runs])
        kw = plotting.line_style(ax, next(style), n)
        ax.plot(range(n), curves.mean(axis=0), label=plotting.with_n(name, len(runs), "runs"),
                **kw)
        if len(runs) > 1:
            ax.fill_between(range(n), curves.min(axis=0), curves.max(axis=0),
                            color=kw["color"], alpha=0.15, linewidth=0)
    ax.axhline(threshold, color="k", lw=0.7, ls="--", label=f"threshold {threshold:.0%}")
    ax.set_xlabel("iteration")
    ax.set_ylabel("overlap (mean over jobs and runs)")
    ax.set_title("Overlap per iteration; shaded: range over the runs", fontsize=9)
    plotting.legend(ax)
    return fig


def _aligned(summary: dict) -> bool:
    """Whether every job of a run has the same number of overlap values (so they can
    be averaged per iteration)."""
    return len({len(j["overlap"]) for j in summary["jobs"].values()}) == 1


def _cdf(by_scheme: dict[str, list[Trace]]):  # type: ignore[no-untyped-def]
    fig, ax = plotting.figure()
    style = plotting.styles()
    for name, traces in by_scheme.items():
        times = metrics.pooled_iteration_times(traces)
        jobs = len(traces[0].jobs)
        plotting.ecdf(ax, times, label=plotting.with_n(name, len(traces),
                                                       f"runs x {jobs} jobs"),
                      **next(style))
    ax.set_xlabel("iteration time (s)")
    ax.set_ylabel("fraction of iterations")
    ax.set_title("Iteration-time ECDF, every job and run pooled", fontsize=9)
    plotting.legend(ax)
    return fig


def _cwnd(by_scheme: dict[str, list[Trace]]):  # type: ignore[no-untyped-def]
    """What each connection's congestion control did: where MLTCP's F shows directly."""
    firsts = {name: _first(traces) for name, traces in by_scheme.items()}
    firsts = {name: t for name, t in firsts.items() if t.flows}
    if not firsts:
        return None
    fig, axes = plotting.figure(len(firsts), 1, figsize=(10, 1.4 + 1.6 * len(firsts)),
                                squeeze=False, sharex=True)
    for ax, (name, trace) in zip(axes[:, 0], firsts.items(), strict=True):
        jobs = [j.name for j in trace.jobs]
        dashes = ("-", "--", ":", "-.")
        seen: dict[str, int] = {}
        for flow in trace.flows:
            k = seen[flow.job] = seen.get(flow.job, -1) + 1
            ax.plot([s.t for s in flow.samples], [s.cwnd_bytes / 1e3 for s in flow.samples],
                    lw=0.7, color=f"C{jobs.index(flow.job)}", ls=dashes[k % len(dashes)],
                    label=flow.id)
        ax.set_ylabel("cwnd (KB)")
        ax.set_title(f"{name}: congestion windows, seed {trace.seed} "
                     f"(1 of N={len(by_scheme[name])} runs)", fontsize=9)
        plotting.legend(ax, ncol=4, loc="upper right")
    axes[-1, 0].set_xlabel("time (s)")
    return fig
