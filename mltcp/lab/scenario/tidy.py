"""The tidy per-iteration table of a scenario run set: one row per job iteration of
every run (dedicated runs included), for a researcher's own analysis.

Columns: run (the trace's stem: ``mltcp-cubic/seed0``, ``dedicated-a/seed0``), backend,
scheme, seed, job, iteration, start, comm_start, comm_end, end (seconds since the
run's t0), bytes, overlap (the metric's value for that iteration; empty for dedicated
runs, which have nothing to overlap with).  Written as ``iterations.parquet`` where
pyarrow is installed, else ``iterations.csv`` (mltcp.lab.common.tables).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mltcp.lab.common.tables import write_table
from mltcp.lab.scenario.trace import Trace

COLUMNS = ("run", "backend", "scheme", "seed", "job", "iteration", "start", "comm_start",
           "comm_end", "end", "bytes", "overlap")
STEM = "iterations"      # runset.OUTPUTS lists its files, so --force removes them


def run_name(trace: Trace) -> str:
    """``mltcp-cubic/seed0``; a dedicated run adds its job: ``dedicated-a/seed0``."""
    scheme = trace.scheme
    if scheme == "dedicated":
        scheme = f"dedicated-{trace.jobs[0].name}"
    return f"{scheme}/seed{trace.seed}"


def iteration_rows(traces: Sequence[Trace],
                   summaries: Mapping[str, dict]) -> list[dict[str, Any]]:
    """One row per job iteration of every trace; overlap from ``summaries`` (report's
    ``runs``, keyed like :func:`run_name`) where the run has one."""
    rows = []
    for trace in traces:
        run = run_name(trace)
        summary = summaries.get(run)
        for job in trace.jobs:
            overlaps = summary["jobs"][job.name]["overlap"] if summary else None
            for i, r in enumerate(job.iterations):
                rows.append({"run": run, "backend": trace.backend, "scheme": trace.scheme,
                             "seed": trace.seed, "job": job.name, "iteration": r.index,
                             "start": r.start, "comm_start": r.comm_start,
                             "comm_end": r.comm_end, "end": r.end, "bytes": r.bytes,
                             "overlap": overlaps[i] if overlaps else None})
    return rows


def write_iterations(out: Path, traces: Sequence[Trace], summaries: Mapping[str, dict]) -> Path:
    """``out/iterations.parquet`` (or .csv; the other format's stale file is removed)."""
    return write_table(iteration_rows(traces, summaries), out / STEM, COLUMNS)
