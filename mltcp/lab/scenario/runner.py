"""Run a scenario's schemes x seeds on a backend, then write the report.

The pipeline, one way: load the scenario -> resolve one plan per run
(:func:`mltcp.lab.scenario.plan.resolve`) -> apply centralized schedules
(:func:`mltcp.lab.scenario.schedule.apply`) -> a backend from the registry runs the plans
(:mod:`mltcp.lab.scenario.backends`) -> every trace is saved as it completes -> the report
(:mod:`mltcp.lab.scenario.report`).  The runner knows no backend by name: it asks the
registry for one and decides by its capabilities.

Output directory layout (stable):
    traces/<scheme>-seed<N>.json             one common trace per run (mltcp.lab.scenario.trace)
    traces/dedicated-<job>-seed<N>.json      each job alone (the dedicated baseline)
    runset.json                              which run set the directory holds
                                             (mltcp.lab.common.runset)
    report.json, summary.md, iterations.*, *.png, *.pdf   mltcp.lab.scenario.report
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mltcp.core import console, validate
from mltcp.core.errors import SpecError
from mltcp.lab.common import runset
from mltcp.lab.scenario import backends, footprint, schedule
from mltcp.lab.scenario.backends.base import Backend, Progress
from mltcp.lab.scenario.plan import RunPlan, resolve
from mltcp.lab.scenario.spec import DEDICATED, Scenario, Scheme, load_scenario
from mltcp.lab.scenario.trace import Trace

_last_line = [0.0]


def live_progress(msg: str) -> None:
    """Live status: rewritten in place on a terminal, a line every 10 s otherwise."""
    if sys.stderr.isatty():
        console.status(msg)
    elif time.monotonic() - _last_line[0] >= 10:
        _last_line[0] = time.monotonic()
        console.line(msg)


def plan_runs(scenario: Scenario, seeds: Sequence[int], dedicated: bool,
              dedicated_seeds: Sequence[int] | None = None) -> list[RunPlan]:
    """Every run's plan, in the order they execute: per seed, each job alone (with
    ``dedicated``; only for ``dedicated_seeds`` if given: a job alone varies little with
    the seed), then every scheme; centralized schedules applied."""
    plans = []
    for seed in seeds:
        if dedicated and (dedicated_seeds is None or seed in dedicated_seeds):
            plans += [resolve(scenario, DEDICATED, seed, only_job=job.name)
                      for job in scenario.jobs]
        plans += [resolve(scenario, scheme, seed) for scheme in scenario.schemes]
    return schedule.apply(plans)


def check_memory(engine: Backend, scenario: Scenario, seeds: Sequence[int], dedicated: bool,
                 dedicated_seeds: Sequence[int] | None = None) -> None:
    """Every run of the run set, and the traces its report reads back together, within
    the memory budget: checked on the first seed's plans, before every seed's are made
    (thousands of seeds of a long scenario would fill memory with plans alone)."""
    footprint.check_scenario(scenario)
    per_seed = plan_runs(scenario, seeds[:1], dedicated)
    for plan in per_seed:
        engine.check(plan)
    n_dedicated = (0 if not dedicated else len(seeds) if dedicated_seeds is None
                   else len(set(seeds) & set(dedicated_seeds)))
    footprint.check_runset(per_seed, len(seeds), n_dedicated, engine.link_sample_s(),
                           engine.capabilities.dense_links)


def backend_for(name: str, parallel: int = 1,
                options: Mapping[str, Any] | None = None) -> Backend:
    """The registry's backend ``name``, checked for this host and for ``parallel``."""
    validate.at_least(parallel, "parallel", 1,
                      "give the number of runs to execute at once, e.g. --parallel 2")
    backend = backends.get(name, **dict(options or {}))
    if parallel > 1 and not backend.capabilities.parallel:
        raise SpecError("parallel", f"the {name} backend runs one run at a time",
                        "drop --parallel, or use a backend whose runs are separate processes "
                        "(`mltcp backends`)")
    backend.require()
    return backend


def run_plans(backend: Backend, plans: Sequence[RunPlan], out_dir: str | Path,
              parallel: int = 1, progress: Progress | None = live_progress,
              checked: bool = False) -> None:
    """Check every plan (unless ``checked`` already), run them, and save each trace as
    ``traces/<stem>.json`` as soon as it completes (a long run interrupted keeps what
    finished; each trace is written whole or not at all)."""
    if not checked:
        for plan in plans:
            backend.check(plan)
    out = Path(out_dir)
    (out / "traces").mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    for done, (index, trace) in enumerate(backend.run(plans, progress, parallel), 1):
        stem = plans[index].stem
        trace.save(out / "traces" / f"{stem}.json")
        if sys.stderr.isatty():
            console.status(f"[{done}/{len(plans)}] {stem} done after "
                           f"{time.monotonic() - started:.0f} s", last=True)
        else:
            console.line(f"[{done}/{len(plans)}] {stem} done")


def traces_of(backend: str | Backend, plans: Sequence[RunPlan],
              progress: Progress | None = None, **options: Any) -> list[Trace]:
    """The traces of ``plans`` in their order, from a backend (a registry name, built
    with ``options``, or an instance), each plan checked first; nothing is written."""
    engine = backends.get(backend, **options) if isinstance(backend, str) else backend
    for plan in plans:
        engine.check(plan)
    out: list[Trace | None] = [None] * len(plans)
    for index, trace in engine.run(plans, progress):
        out[index] = trace
    return [t for t in out if t is not None]


def run_one(backend: str, scenario: Scenario, scheme: Scheme, seed: int,
            only_job: str | None = None, **options: Any) -> Trace:
    """One run through the pipeline (resolve, centralized schedule, backend): its trace."""
    [plan] = schedule.apply([resolve(scenario, scheme, seed, only_job)])
    return traces_of(backend, [plan], **options)[0]


def scenario_runset(scenario: Scenario, backend: str, schemes: Sequence[Scheme],
                    seeds: Sequence[int]) -> runset.RunSet:
    """The run set of a scenario's runs: identified by the whole scenario (every scheme
    of it, so running its schemes one at a time adds to one run set) and the backend;
    holding the schemes run, as run, and the seeds."""
    return runset.new("scenario", scenario.name, scenario.to_dict(), backend,
                      {s.name: {**s.to_dict(), **s.as_run()} for s in schemes}, seeds)


def run_scenario(scenario_ref: str, out_dir: str | Path, schemes: Sequence[str] | None = None,
                 seeds: Sequence[int] | None = None, dedicated: bool = False,
                 backend: str = "netns", parallel: int = 1,
                 backend_options: Mapping[str, Any] | None = None,
                 dedicated_seeds: Sequence[int] | None = None, force: bool = False) -> dict:
    """Check every run, claim ``out_dir`` for the run set (another run set there is
    refused unless ``force``: mltcp.lab.common.runset), run, save every trace as it
    completes, and build the report; returns report.json.

    ``parallel`` runs that many at once where the backend can (ns-3: one worker process each);
    ``backend_options`` go to the backend's constructor (e.g. the models' options)."""
    from mltcp.lab.scenario.report import build_report

    engine = backend_for(backend, parallel, backend_options)
    whole = load_scenario(scenario_ref)
    scenario = whole.with_schemes(schemes) if schemes else whole
    chosen = list(seeds) if seeds else list(scenario.seeds)
    check_memory(engine, scenario, chosen, dedicated, dedicated_seeds)
    plans = plan_runs(scenario, chosen, dedicated, dedicated_seeds)
    for plan in plans:
        engine.check(plan)
    runset.claim(out_dir, scenario_runset(whole, backend, scenario.schemes, chosen), force)
    run_plans(engine, plans, out_dir, parallel, checked=True)
    report = build_report(out_dir)
    console.line(f"wrote {out_dir}/report.json, summary.md and plots")
    return report
