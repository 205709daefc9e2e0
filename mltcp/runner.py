"""Run a scenario's schemes x seeds on a backend and write traces plus metric summaries.

Layout of the output directory (stable; the report reads it):
    traces/<scheme>-seed<N>.json             one common trace per run (mltcp.trace)
    traces/dedicated-<job>-seed<N>.json      each job alone, with --dedicated
    summary.json                             mltcp.metrics.summarize() of every run, keyed
                                             "<scheme>/seed<N>", with dedicated means applied
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mltcp import metrics, testbed
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
    scenario = load_scenario(scenario_ref)
    if schemes:
        scenario = scenario.with_schemes(schemes)
    seeds = list(seeds) if seeds else list(scenario.seeds)
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    dedicated_means: dict[str, float] | None = None
    if dedicated:
        traces = [t for seed in seeds for t in testbed.run_dedicated(scenario, seed, _progress)]
        for t in traces:
            t.save(out / "traces" / f"dedicated-{t.params['only_job']}-seed{t.seed}.json")
        dedicated_means = metrics.dedicated_means(traces)
    summary: dict[str, dict] = {}
    for scheme in scenario.schemes:
        for seed in seeds:
            trace = testbed.run_once(scenario, scheme, seed, progress=_progress)
            trace.save(out / "traces" / f"{scheme.name}-seed{seed}.json")
            summary[f"{scheme.name}/seed{seed}"] = metrics.summarize(trace, dedicated_means)
            conv = summary[f"{scheme.name}/seed{seed}"]["overall"]["convergence_iteration"]
            _progress(f"{scheme.name} seed {seed}: convergence iteration {conv}")
            if sys.stderr.isatty():
                print(file=sys.stderr)
    doc = {"scenario": scenario.to_dict(), "dedicated_means": dedicated_means,
           "runs": summary, "elapsed_s": round(time.monotonic() - started, 1)}
    (out / "summary.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {len(summary)} runs to {out}", file=sys.stderr)
    return doc
