"""Run a scenario's schemes x seeds on a backend, then write the report.

Output directory layout (stable):
    traces/<scheme>-seed<N>.json             one common trace per run (mltcp.trace)
    traces/dedicated-<job>-seed<N>.json      each job alone (the dedicated baseline)
    report.json, summary.md, *.png           mltcp.report
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mltcp import testbed
from mltcp.report import build_report
from mltcp.scenario import load_scenario

_last_line = [0.0]


def _progress(msg: str) -> None:
    """Live status: rewritten in place on a terminal, a line every 10 s otherwise."""
    if sys.stderr.isatty():
        print(f"\r{msg}\033[K", end="", file=sys.stderr, flush=True)
    elif time.monotonic() - _last_line[0] >= 10:
        _last_line[0] = time.monotonic()
        print(msg, file=sys.stderr, flush=True)


def run_scenario(scenario_ref: str, out_dir: str | Path, schemes: Sequence[str] | None = None,
                 seeds: Sequence[int] | None = None, dedicated: bool = False) -> dict:
    """Run, save every trace as it completes, and build the report; returns report.json."""
    scenario = load_scenario(scenario_ref)
    if schemes:
        scenario = scenario.with_schemes(schemes)
    seeds = list(seeds) if seeds else list(scenario.seeds)
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    total = len(seeds) * (len(scenario.schemes) + (len(scenario.jobs) if dedicated else 0))
    done = 0
    started = time.monotonic()

    def step(what: str) -> None:
        nonlocal done
        done += 1
        print(f"\r[{done}/{total}] {what} done after {time.monotonic() - started:.0f} s\033[K"
              if sys.stderr.isatty() else f"[{done}/{total}] {what} done", file=sys.stderr,
              flush=True)

    for seed in seeds:
        if dedicated:
            for job in scenario.jobs:
                trace = testbed.run_once(scenario, testbed.DEDICATED, seed, only_job=job.name,
                                         progress=_progress)
                trace.save(out / "traces" / f"dedicated-{job.name}-seed{seed}.json")
                step(f"dedicated {job.name} seed {seed}")
        for scheme in scenario.schemes:
            trace = testbed.run_once(scenario, scheme, seed, progress=_progress)
            trace.save(out / "traces" / f"{scheme.name}-seed{seed}.json")
            step(f"{scheme.name} seed {seed}")
    report = build_report(out)
    print(f"wrote {out}/report.json, summary.md and plots", file=sys.stderr)
    return report
