"""Run a scenario's schemes x seeds on a backend, then write the report.

Output directory layout (stable):
    traces/<scheme>-seed<N>.json             one common trace per run (mltcp.lab.trace)
    traces/dedicated-<job>-seed<N>.json      each job alone (the dedicated baseline)
    report.json, summary.md, *.png           mltcp.lab.report
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from mltcp.core.errors import SpecError
from mltcp.lab.report import build_report
from mltcp.lab.scenario import DEDICATED, Scenario, Scheme, load_scenario
from mltcp.lab.schedule import apply_schedule
from mltcp.lab.trace import Trace

_last_line = [0.0]


def _progress(msg: str) -> None:
    """Live status: rewritten in place on a terminal, a line every 10 s otherwise."""
    if sys.stderr.isatty():
        print(f"\r{msg}\033[K", end="", file=sys.stderr, flush=True)
    elif time.monotonic() - _last_line[0] >= 10:
        _last_line[0] = time.monotonic()
        print(msg, file=sys.stderr, flush=True)


BACKENDS = ("netns", "fluid", "ns3", "dcqcn")


def _nominal_duration_s(scenario: Scenario) -> float:
    """The longest job's start offset plus its iterations of compute alone: a lower
    bound of the simulated time a run needs, for the progress line."""
    return max(j.start_offset_ms / 1e3 + j.iterations * sum(p.compute_ms for p in j.phase_list())
               / 1e3 for j in scenario.jobs)


def _planned_runs(scenario: Scenario, seeds: Sequence[int],
                  dedicated: bool) -> list[tuple[str, Scheme, int, str | None]]:
    """(file stem, scheme, seed, only_job) of every run, in the order they execute."""
    runs = []
    for seed in seeds:
        if dedicated:
            runs += [(f"dedicated-{job.name}-seed{seed}", DEDICATED, seed, job.name)
                     for job in scenario.jobs]
        runs += [(f"{scheme.name}-seed{seed}", scheme, seed, None)
                 for scheme in scenario.schemes]
    return runs


def run_scenario(scenario_ref: str, out_dir: str | Path, schemes: Sequence[str] | None = None,
                 seeds: Sequence[int] | None = None, dedicated: bool = False,
                 backend: str = "netns", parallel: int = 1) -> dict:
    """Run, save every trace as it completes, and build the report; returns report.json.

    ``parallel`` runs that many ns-3 simulations at once (each is its own process).
    The netns testbed always runs one at a time: runs at once would share the
    host's CPUs and skew each other's timing."""
    if backend not in BACKENDS:
        raise SpecError("backend", f"unknown backend {backend!r}",
                        f"use one of: {', '.join(BACKENDS)}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise SpecError("parallel", f"{parallel!r} is not a positive integer",
                        "give the number of simulations to run at once, e.g. --parallel 2")
    if parallel > 1 and backend != "ns3":
        raise SpecError("parallel", f"the {backend} backend runs one run at a time",
                        "drop --parallel (it applies to --backend ns3)")
    scenario = load_scenario(scenario_ref)
    if schemes:
        scenario = scenario.with_schemes(schemes)
    seeds = list(seeds) if seeds else list(scenario.seeds)
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    planned = _planned_runs(scenario, seeds, dedicated)
    started = time.monotonic()

    def step(done: int, stem: str) -> None:
        print(f"\r[{done}/{len(planned)}] {stem} done after {time.monotonic() - started:.0f} s"
              "\033[K" if sys.stderr.isatty() else f"[{done}/{len(planned)}] {stem} done",
              file=sys.stderr, flush=True)

    scheduled = {scheme.name: apply_schedule(scenario, scheme)
                 for scheme in {s.name: s for _, s, _, _ in planned}.values()}

    def save(done: int, stem: str, trace: Trace) -> None:
        shifts = scheduled[trace.scheme][1]
        if shifts:        # a centralized schedule moved the starts: say by how much
            trace = dataclasses.replace(trace, params={**trace.params, "shifts_ms": shifts})
        trace.save(out / "traces" / f"{stem}.json")
        step(done, stem)

    if backend in ("fluid", "dcqcn"):     # models: all runs at once, as lanes of batches
        from mltcp.lab.models import fluid
        from mltcp.lab.models.dcqcn import simulate as dcqcn

        run_many = fluid.run_many if backend == "fluid" else dcqcn.run_many
        runs = [fluid.Run(scheduled[scheme.name][0], scheme, seed, only)
                for _, scheme, seed, only in planned]
        horizon = max(_nominal_duration_s(r.scenario) for r in runs)

        def advanced(simulated_s: float) -> None:
            _progress(f"{scenario.name} / {backend} model: all {len(runs)} runs at "
                      f"{simulated_s:.2f} s simulated (of ~{horizon:.1f} s), "
                      f"{time.monotonic() - started:.0f} s wall")

        traces = run_many(runs, progress=advanced)
        for done, ((stem, *_), trace) in enumerate(zip(planned, traces, strict=True), 1):
            save(done, stem, trace)
    elif backend == "ns3" and parallel > 1:
        from concurrent.futures import ThreadPoolExecutor, as_completed

        from mltcp.lab.ns3.backend import run_once as run_ns3

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = {pool.submit(run_ns3, scheduled[scheme.name][0], scheme, seed,
                                   only_job=only, progress=_progress): stem
                       for stem, scheme, seed, only in planned}
            for done, fut in enumerate(as_completed(futures), 1):
                save(done, futures[fut], fut.result())
    else:
        if backend == "ns3":
            from mltcp.lab.ns3.backend import run_once
        else:
            from mltcp.lab.emulation.testbed import run_once
        for done, (stem, scheme, seed, only) in enumerate(planned, 1):
            save(done, stem, run_once(scheduled[scheme.name][0], scheme, seed, only_job=only,
                                      progress=_progress))
    report = build_report(out)
    print(f"wrote {out}/report.json, summary.md and plots", file=sys.stderr)
    return report
