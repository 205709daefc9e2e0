"""Parameter sweeps on the fluid model or ns-3, spread over this host's cores or a Dask
cluster.

Which slope and intercept make jobs interleave, how fast, and at what loads?
One run answers nothing; a grid of thousands does.  A sweep takes a scenario, a
grid of parameters and seeds, runs every point on the fluid model (or, slower and
closer to the wire, on ns-3), and writes one table (one row per point and seed)
plus plots.

Grid parameters (``name=v1,v2,...``):

* ``slope``, ``intercept``, ``cap``: the MLTCP scheme's F;
* ``load``: multiplies every job's bytes per iteration (1 = as in the scenario);
* ``compute_ms``: every job's compute time per iteration;
* ``compute_jitter_ms``: every job's per-iteration compute noise (standard deviation);
* ``jobs``: that many identical copies of the scenario's first job (named j1..jN;
  on a dumbbell the topology grows to 2N hosts so each copy gets fresh hosts);
* ``iterations``: iterations per job.

Every grid point is a scenario variant that goes through the scenario parser again
(:func:`mltcp.lab.scenario.spec.parse_scenario`), so a point is validated by exactly the
rules a scenario file is, before any run starts; each axis value is checked first by
the same bounds as the field it sets.  Runs go to a backend from the registry, chosen
by its capabilities: a *batched* backend (fluid, DCQCN model) gets chunks of points
that share a structure (same jobs and links), each chunk one call that advances them
as lanes, so a chunk of 200 points costs little more than one point; any other
backend (ns-3) gets every run as one Dask task, with each job's dedicated runs as
tasks of their own, run once per scenario variant and seed, which the points that
need them wait for.  Backends that drive this host's kernel (netns) cannot sweep.
Tasks go to a pool of local worker processes, one per core by default (``--parallel
N``; 1: one after the other in this process, no pool), or to a running Dask cluster at
``--dask ADDR`` (:mod:`mltcp.lab.common.parallel`).  Each task is the same function of
the same inputs wherever it runs, so the rows are the same, bit for bit.  Every row
carries each job's dedicated-link iteration time from the same sweep, so ratios need
nothing else.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import itertools
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.core import console, validate
from mltcp.core.aggressiveness import MAX_CAP, MAX_INTERCEPT, MAX_SLOPE, MIN_INTERCEPT
from mltcp.core.errors import CapabilityError, SpecError
from mltcp.lab.common import parallel as fanning
from mltcp.lab.common import plotting, runset, stats, tables
from mltcp.lab.common.atomic import replacing, write_json
from mltcp.lab.common.eta import eta_text
from mltcp.lab.common.provenance import provenance
from mltcp.lab.scenario import backends, footprint, metrics, schedule
from mltcp.lab.scenario.plan import RunPlan, resolve
from mltcp.lab.scenario.runner import live_progress
from mltcp.lab.scenario.spec import (
    DEDICATED,
    MAX_COMPUTE_MS,
    MAX_HOSTS,
    MAX_ITERATIONS,
    Scenario,
    Scheme,
    load_scenario,
    parse_scenario,
)
from mltcp.lab.scenario.trace import Trace

SCHEME_PARAMS = ("slope", "intercept", "cap")
SCENARIO_PARAMS = ("load", "compute_ms", "compute_jitter_ms", "jobs", "iterations")
PARAMS = SCHEME_PARAMS + SCENARIO_PARAMS
MAX_LOAD = 1e6
# Each axis value is checked by the bounds of the field it sets (see parse_grid).
_AXIS_CHECKS: dict[str, Callable[[Any, str], float]] = {
    "slope": lambda v, f: validate.number(v, f, 0, MAX_SLOPE, "0.5,1,2,4"),
    "intercept": lambda v, f: validate.number(v, f, MIN_INTERCEPT, MAX_INTERCEPT, "0.5,1,2"),
    "cap": lambda v, f: validate.number(v, f, MIN_INTERCEPT, MAX_CAP, "2,4"),
    "load": lambda v, f: validate.number(v, f, 0, MAX_LOAD, "0.5,1,2", lo_open=True),
    "compute_ms": lambda v, f: validate.number(v, f, 0, MAX_COMPUTE_MS, "60,120",
                                               lo_open=True),
    "compute_jitter_ms": lambda v, f: validate.number(v, f, 0, MAX_COMPUTE_MS, "0,10"),
    "jobs": lambda v, f: validate.integer(v, f, 1, MAX_HOSTS // 2, "2,3,4"),
    "iterations": lambda v, f: validate.integer(v, f, 1, MAX_ITERATIONS, "20,40"),
}
_INT_PARAMS = ("jobs", "iterations")
DEFAULT_CHUNK = 256
MAX_RUNS = 100_000    # grid points x seeds: each a row, and a dict and a task before that


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep: a scenario, the MLTCP scheme to vary, the grid, the seeds, and the
    backend (a registry name) with the options its constructor takes."""

    scenario: Scenario
    scheme: Scheme
    grid: dict[str, tuple[float, ...]]
    seeds: tuple[int, ...]
    backend: str = "fluid"
    backend_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        runs = math.prod(len(v) for v in self.grid.values()) * len(self.seeds)
        if runs > MAX_RUNS:
            sizes = " x ".join(f"{len(v)} {k}" for k, v in self.grid.items())
            raise SpecError("param", f"{sizes} values x {len(self.seeds)} seeds make "
                            f"{runs:,} runs, over {MAX_RUNS:,}",
                            "sweep fewer values or seeds at once")
        varied = [k for k in SCHEME_PARAMS if k in self.grid]
        if varied and not self.scheme.mltcp:
            # MLTCP's F on a standard scheme would run a scheme the sweep does not name.
            raise SpecError("--scheme", f"{self.scheme.name!r} is a standard scheme "
                            f"(mltcp = false): {', '.join(varied)} set MLTCP's F, which it "
                            "does not have", "sweep an MLTCP scheme of the scenario (or "
                            "omit --scheme), or drop --param " + ", ".join(varied))
        if self.engine().capabilities.exclusive_host:
            raise SpecError("backend", f"the {self.backend} backend drives this host's "
                            "kernel in real time, one run at a time", "sweep on a model or "
                            "simulator backend (`mltcp backends`), e.g. --backend fluid")

    def points(self) -> list[dict[str, float]]:
        """Every combination of the grid's values, in a stable order."""
        names = list(self.grid)
        return [dict(zip(names, values, strict=True))
                for values in itertools.product(*(self.grid[n] for n in names))]

    def engine(self):  # type: ignore[no-untyped-def]
        """The sweep's backend, from the registry."""
        return backends.get(self.backend, **self.backend_options)


def require(fmt: str = "parquet") -> None:
    """One line (a CapabilityError) unless this installation can write a sweep's table
    as ``fmt``: pandas, and pyarrow for Parquet (the ``sweep`` extra), said before any
    run rather than after all of them."""
    missing = [m for m in ("pandas", "pyarrow")[:2 if fmt == "parquet" else 1]
               if importlib.util.find_spec(m) is None]
    if missing:
        raise CapabilityError(f"a sweep writes its table with {' and '.join(missing)}, "
                              "not installed: pip install 'mltcp[sweep]'")


def parse_grid(items: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """``["slope=0.5,1,2", "jobs=2,3"]`` -> {"slope": (0.5, 1.0, 2.0), "jobs": (2, 3)},
    every value checked against the bounds of the field it sets."""
    grid: dict[str, tuple[float, ...]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        name = name.strip()
        if not sep or not values.strip():
            raise SpecError("param", f"{item!r} is not NAME=V1,V2,...",
                            "write e.g. --param slope=0.5,1,2,4")
        if name not in PARAMS:
            raise SpecError("param", f"unknown parameter {name!r}",
                            f"use one of: {', '.join(PARAMS)}")
        if name in grid:
            raise SpecError(f"param.{name}", "given twice", "list all its values once")
        parsed = []
        for text in values.split(","):
            try:
                value: float = int(text) if name in _INT_PARAMS else float(text)
            except ValueError:
                kind = "a whole number" if name in _INT_PARAMS else "a number"
                raise SpecError(f"param.{name}", f"{text.strip()!r} is not {kind}",
                                "give values separated by commas, e.g. "
                                + ("2,3,4" if name in _INT_PARAMS else "0.5,1,2")) from None
            parsed.append(_AXIS_CHECKS[name](value, f"param.{name}"))
        grid[name] = tuple(parsed)
    if not grid:
        raise SpecError("param", "no parameter to sweep", "give e.g. --param slope=0.5,1,2,4")
    return grid


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"`` or ``"0,3,7"`` -> seeds."""
    return validate.seeds(text)


def _mltcp_scheme(scenario: Scenario, name: str | None) -> Scheme:
    if name is not None:
        return scenario.scheme(name)
    for scheme in scenario.schemes:
        if scheme.mltcp:
            return scheme
    return Scheme("mltcp", "cubic", True)


def make_spec(scenario_ref: str, params: Iterable[str], seeds: str = "0",
              scheme: str | None = None, backend: str = "fluid",
              backend_options: Mapping[str, Any] | None = None) -> SweepSpec:
    """A sweep from CLI-style inputs, every grid point validated before anything runs."""
    scenario = load_scenario(scenario_ref)
    spec = SweepSpec(scenario, _mltcp_scheme(scenario, scheme), parse_grid(params),
                     parse_seeds(seeds), backend, dict(backend_options or {}))
    for point in spec.points():
        variant(spec, point)        # fail now, not in a worker, on a bad value
    point_bytes(spec)               # and on a point whose runs would not fit in memory
    return spec


def variant(spec: SweepSpec, point: Mapping[str, float]) -> tuple[Scenario, Scheme]:
    """The scenario and scheme of one grid point, parsed (and so validated) as a
    scenario file would be."""
    data = spec.scenario.to_dict()
    # The scheme as named: F's parameters only vary an MLTCP scheme (SweepSpec).
    scheme = {**spec.scheme.to_dict(), **{k: point[k] for k in SCHEME_PARAMS if k in point}}
    data["schemes"] = [scheme]
    if "jobs" in point:
        data = _copies(data, int(point["jobs"]))
    for job in data["jobs"]:
        if "load" in point:
            job["bytes_per_iteration"] = max(1, round(job["bytes_per_iteration"]
                                                      * point["load"]))
        for key in ("compute_ms", "compute_jitter_ms", "iterations"):
            if key in point:
                job[key] = point[key]
    where = ", ".join(f"{k}={validate.fmt(v)}" for k, v in point.items())
    sc = parse_scenario(data, f"sweep point {where}")
    return sc, sc.schemes[0]


def runset_of(spec: SweepSpec) -> runset.RunSet:
    """The sweep's run set: identified by everything that decides its rows (the
    scenario, the scheme varied, the grid, the seeds, the backend and its model
    options), so the same sweep rerun replaces its table and any other is refused."""
    options = spec.backend_options.get("options")
    definition = {"scenario": spec.scenario.to_dict(), "scheme": spec.scheme.to_dict(),
                  "grid": {k: list(v) for k, v in spec.grid.items()},
                  "seeds": list(spec.seeds), "f_steps": getattr(options, "f_steps", None)}
    return runset.new("sweep", spec.scenario.name, definition, spec.backend,
                      {spec.scheme.name: {**spec.scheme.to_dict(), **spec.scheme.as_run()}},
                      spec.seeds)


def _copies(data: dict[str, Any], n: int) -> dict[str, Any]:
    """N identical copies of the first job (j1..jN); a dumbbell grows so that every
    copy gets fresh hosts."""
    base = dict(data["jobs"][0])
    base.pop("placement", None)
    topo = dict(data["topology"])
    want = 2 * n * max(1, base["workers"] // 2)
    if topo["kind"] == "dumbbell" and topo["hosts"] < want:
        topo["hosts"] = want
    return {**data, "topology": topo,
            "jobs": [{**base, "name": f"j{i + 1}"} for i in range(n)]}


def point_plans(spec: SweepSpec, point: Mapping[str, float], seed: int
                ) -> tuple[RunPlan, list[RunPlan]]:
    """A point's plan and its jobs' dedicated plans (each job alone)."""
    sc, scheme = variant(spec, point)
    plans = schedule.apply([resolve(sc, scheme, seed),
                            *(resolve(sc, DEDICATED, seed, only_job=j.name) for j in sc.jobs)])
    return plans[0], plans[1:]


# --------------------------------------------------------------------------- execution


def _structure(point: Mapping[str, float]) -> tuple:
    return tuple((k, point[k]) for k in ("jobs",) if k in point)


def point_bytes(spec: SweepSpec) -> dict[tuple, int]:
    """Peak memory of each scenario variant's runs (a point's and its jobs' dedicated
    ones, on the first seed: a seed moves paths and jitter, not sizes), each run checked
    against the budget by the backend (one line naming the field if one does not fit)."""
    engine = spec.engine()
    sample_s, dense = engine.link_sample_s(), engine.capabilities.dense_links
    out: dict[tuple, int] = {}
    for point in spec.points():
        key, _ = _scenario_key(point, spec.seeds[0])
        if key not in out:
            footprint.check_scenario(variant(spec, point)[0])
            plan, dedicated = point_plans(spec, point, spec.seeds[0])
            for p in (plan, *dedicated):
                engine.check(p)
            out[key] = sum(footprint.of(p, sample_s, dense).peak_bytes
                           for p in (plan, *dedicated))
    return out


def chunks(spec: SweepSpec, size: int = DEFAULT_CHUNK) -> list[list[tuple[dict, int]]]:
    """(point, seed) pairs cut into chunks whose points share one structure, at most
    ``size`` of them and, together, within the memory budget (a worker holds a chunk's
    traces until its rows are made)."""
    groups: dict[tuple, list[tuple[dict, int]]] = {}
    for point in spec.points():
        for seed in spec.seeds:
            groups.setdefault(_structure(point), []).append((point, seed))
    cost = point_bytes(spec)
    out = []
    for items in groups.values():
        for part in (items[i:i + size] for i in range(0, len(items), size)):
            costs = [cost[_scenario_key(p, s)[0]] for p, s in part]
            out += [[part[k] for k in ks] for ks in footprint.chunks(costs)]
    return out


def _scenario_key(point: Mapping[str, float], seed: int) -> tuple:
    """Points with equal scenario parameters and seed share their dedicated runs."""
    return tuple(sorted((k, v) for k, v in point.items() if k in SCENARIO_PARAMS)), seed


def run_chunk(spec: SweepSpec, chunk: Sequence[tuple[dict, int]],
              say: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Rows of one chunk: the points' runs and their dedicated baselines, one call of a
    batched backend (``say`` hears its progress lines)."""
    plans: list[RunPlan] = []
    point_runs: list[int] = []
    dedicated_runs: dict[tuple, list[int]] = {}
    for point, seed in chunk:
        plan, dedicated = point_plans(spec, point, seed)
        point_runs.append(len(plans))
        plans.append(plan)
        key = _scenario_key(point, seed)
        if key not in dedicated_runs:
            dedicated_runs[key] = list(range(len(plans), len(plans) + len(dedicated)))
            plans += dedicated
    traces = _run_all(spec, plans, say)
    rows = []
    for (point, seed), index in zip(chunk, point_runs, strict=True):
        ded = metrics.dedicated_means(traces[i] for i in dedicated_runs[_scenario_key(point,
                                                                                      seed)])
        rows.append(_row(point, seed, traces[index], ded))
    return rows


def _run_all(spec: SweepSpec, plans: Sequence[RunPlan],
             say: Callable[[str], None] | None = None) -> list[Trace]:
    engine = spec.engine()
    for plan in plans:
        engine.check(plan)
    traces: list[Trace | None] = [None] * len(plans)
    for index, trace in engine.run(plans, progress=say):
        traces[index] = trace
    return [t for t in traces if t is not None]


def run_dedicated(spec: SweepSpec, point: Mapping[str, float], seed: int,
                  job: str) -> dict[str, float]:
    """One job of a point's scenario alone: {job: mean iteration time}."""
    _, dedicated = point_plans(spec, point, seed)
    [trace] = _run_all(spec, [p for p in dedicated if p.only_job == job])
    return metrics.dedicated_means([trace])


def run_point(spec: SweepSpec, point: Mapping[str, float], seed: int,
              *dedicated: Mapping[str, float]) -> dict[str, Any]:
    """One grid point alone, with its jobs' dedicated means (from their own tasks)."""
    plan, _ = point_plans(spec, point, seed)
    [trace] = _run_all(spec, [plan])
    return _row(point, seed, trace, {k: v for d in dedicated for k, v in d.items()})


def _row(point: Mapping[str, float], seed: int, trace: Any,
         dedicated: Mapping[str, float]) -> dict[str, Any]:
    summary = metrics.summarize(trace, dedicated)
    jobs = summary["jobs"].values()
    conv = summary["overall"]["convergence_iteration"]
    return {**point, "seed": seed, "scheme": trace.scheme,
            "congestion_control": trace.params.get("congestion_control"),
            "convergence_iteration": conv, "converged": conv is not None,
            "first_interleaved_iteration": summary["overall"]["first_interleaved_iteration"],
            "mean_iteration_s": float(np.mean([j["mean"] for j in jobs])),
            "p99_iteration_s": max(j["p99"] for j in jobs),
            "ratio_to_dedicated": summary["overall"]["mean_ratio_to_dedicated"],
            "overlap_last5": float(np.mean([metrics.overlap_last(j["overlap"])
                                            for j in jobs]))}


def _progress_line(done: int, total: int, started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    elapsed = time.monotonic() - started
    left = f", {eta_text(elapsed, done / total)}" if 0 < done < total else ""
    msg = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} tasks, "
           f"{elapsed:.0f} s{left}")
    console.status(msg, last=done >= total)


Progress = Callable[[int, int, float], None]


def execute(spec: SweepSpec, dask_address: str | None = None, parallel: int | None = None,
            chunk_size: int | None = None, progress: Progress | None = _progress_line
            ) -> list[dict[str, Any]]:
    """Every point's rows, in grid order: run in this process (``parallel`` 1), on a
    pool of ``parallel`` local worker processes (None: one per core), or on the Dask
    cluster at ``dask_address``.  ``progress`` hears (tasks done, tasks, start time)
    once before the first task and after each."""
    engine = spec.engine()
    engine.require()                  # say so before anything starts
    if not dask_address:
        engine.prepare()              # once here, not in every local worker at once
    workers = parallel or fanning.default_workers()
    started = time.monotonic()
    batched, vector_lanes = engine.capabilities.batched, engine.capabilities.vector_lanes
    parts = (_chunk_parts(spec, chunk_size, vector_lanes, workers)
             if batched and not dask_address else [])
    if not dask_address and (workers <= 1 or (batched and len(parts) == 1)):
        # one at a time, or one chunk: here, no pool to start
        rows = (_chunks_here(spec, parts, progress, started) if batched
                else _runs_here(spec, progress, started))
    else:
        with fanning.fan_out(workers, dask_address,
                             preload=(__name__, type(engine).__module__)) as pool:
            if batched and dask_address:
                parts = _chunk_parts(spec, chunk_size, vector_lanes, pool.slots)
            rows = (_submit_chunks(pool, spec, parts, progress, started) if batched
                    else _submit_runs(pool, spec, progress, started))
    order = {(json.dumps(p, sort_keys=True), s): i
             for i, (p, s) in enumerate((p, s) for p in spec.points() for s in spec.seeds)}
    return sorted(rows, key=lambda r: order[(json.dumps({k: r[k] for k in spec.grid},
                                                        sort_keys=True), r["seed"])])


def _chunk_parts(spec: SweepSpec, chunk_size: int | None, vector_lanes: bool, slots: int
                 ) -> list[list[tuple[dict, int]]]:
    """The sweep's chunks: ``chunk_size`` points each where given; else, on a backend
    whose lanes are one vector, as large as memory allows (a chunk costs about one run:
    cutting it costs a run per cut, however many workers wait); else two chunks per
    worker (``slots``; one worker: two chunks, so that progress has a step to show), so
    every worker gets work and a slow chunk does not leave the others idle at the end."""
    if chunk_size is None:
        items = len(spec.points()) * len(spec.seeds)
        chunk_size = (DEFAULT_CHUNK if vector_lanes else
                      max(1, min(DEFAULT_CHUNK, math.ceil(items / (2 * max(slots, 1))))))
    return chunks(spec, chunk_size)


def _chunks_here(spec: SweepSpec, parts: list[list[tuple[dict, int]]],
                 progress: Progress | None, started: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for done, part in enumerate(parts):
        say = None
        if progress:
            progress(done, len(parts), started)
            # inside a chunk (one may take minutes: the DCQCN model's), the backend's
            # own lines with the time left, as `mltcp run` shows them (on a terminal in
            # the bar's place, which the next chunk's bar takes back; else one a 10 s)
            say = lambda line, k=done: live_progress(  # noqa: E731
                f"  chunk {k + 1}/{len(parts)}: {line}")
        rows += run_chunk(spec, part, say)
    if progress:
        progress(len(parts), len(parts), started)
    return rows


def _submit_chunks(pool: fanning.Fanout, spec: SweepSpec, parts: list[list[tuple[dict, int]]],
                   progress: Progress | None, started: float) -> list[dict[str, Any]]:
    shared = pool.share(spec)
    futures = {pool.submit(run_chunk, shared, part): k for k, part in enumerate(parts)}
    if progress:
        progress(0, len(parts), started)
    results: dict[int, list[dict[str, Any]]] = {}
    for done, fut in enumerate(cf.as_completed(futures), 1):
        results[futures[fut]] = fut.result()
        if progress:
            progress(done, len(parts), started)
    return [r for k in sorted(results) for r in results[k]]


def _point_runs(spec: SweepSpec) -> tuple[dict[tuple, tuple[dict, int, str]],
                                          list[tuple[dict, int, list[tuple]]]]:
    """The runs of a non-batched sweep: the dedicated ones, once per (scenario variant,
    seed, job), and every point with the dedicated runs it needs."""
    dedicated: dict[tuple, tuple[dict, int, str]] = {}
    points = []
    for point in spec.points():
        sc, _ = variant(spec, point)          # its jobs: the same for every seed
        for seed in spec.seeds:
            key = _scenario_key(point, seed)
            for job in sc.jobs:
                dedicated.setdefault((key, job.name), (point, seed, job.name))
            points.append((point, seed, [(key, job.name) for job in sc.jobs]))
    return dedicated, points


def _runs_here(spec: SweepSpec, progress: Progress | None,
               started: float) -> list[dict[str, Any]]:
    dedicated, points = _point_runs(spec)
    total, done = len(dedicated) + len(points), 0
    means: dict[tuple, dict[str, float]] = {}
    for key, args in dedicated.items():
        if progress:
            progress(done, total, started)
        means[key] = run_dedicated(spec, *args)
        done += 1
    rows = []
    for point, seed, needs in points:
        if progress:
            progress(done, total, started)
        rows.append(run_point(spec, point, seed, *(means[n] for n in needs)))
        done += 1
    if progress:
        progress(done, total, started)
    return rows


def _submit_runs(pool: fanning.Fanout, spec: SweepSpec, progress: Progress | None,
                 started: float) -> list[dict[str, Any]]:
    """One task per run.  Dedicated runs once per (scenario variant, seed, job); a
    point is submitted once its own dedicated runs are in."""
    dedicated, points = _point_runs(spec)
    shared = pool.share(spec)
    ran = {pool.submit(run_dedicated, shared, *args): key for key, args in dedicated.items()}
    means: dict[tuple, dict[str, float]] = {}
    rows: dict[cf.Future, int] = {}
    waiting = list(range(len(points)))
    pending, total, done = set(ran), len(dedicated) + len(points), 0
    if progress:
        progress(0, total, started)
    while pending:
        finished, pending = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
        for fut in finished:
            if fut in ran:
                means[ran[fut]] = fut.result()
            else:
                fut.result()                  # a failed point stops the sweep now
            done += 1
            if progress:
                progress(done, total, started)
        still = []
        for i in waiting:
            point, seed, needs = points[i]
            if all(n in means for n in needs):
                fut = pool.submit(run_point, shared, point, seed, *(means[n] for n in needs))
                rows[fut] = i
                pending.add(fut)
            else:
                still.append(i)
        waiting = still
    by_index = {i: fut.result() for fut, i in rows.items()}
    return [by_index[i] for i in range(len(points))]


# --------------------------------------------------------------------------- output


# (column of a row, what it is): the metrics aggregated per grid point with their spread.
AGGREGATED = (("ratio_to_dedicated", "iteration time / dedicated"),
              ("mean_iteration_s", "mean iteration time (s)"),
              ("overlap_last5", "overlap of the last 5 iterations"),
              ("converged", "fraction of runs converged (held to the end)"),
              ("first_interleaved", "fraction of runs that interleaved at some point"))


def aggregate(rows: Sequence[Mapping[str, Any]], by: Sequence[str]) -> list[dict[str, Any]]:
    """Per value of ``by`` (grid columns): N runs, each :data:`AGGREGATED` metric's mean
    with its 95 % bootstrap interval over the runs, and the convergence iteration over
    the converged runs only, saying how many of the N those are."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[c] for c in by), []).append(row)
    out = []
    for key, part in groups.items():
        point: dict[str, Any] = {**dict(zip(by, key, strict=True)), "n": len(part)}
        for column, _ in AGGREGATED:
            spread = stats.bootstrap(_value(r, column) for r in part)
            point |= {column: spread.mean, f"{column}_ci_lo": spread.lo,
                      f"{column}_ci_hi": spread.hi}
        conv = stats.bootstrap(r["convergence_iteration"] for r in part)
        point |= {"converged_runs": conv.n, "convergence_mean": conv.mean,
                  "convergence_ci_lo": conv.lo, "convergence_ci_hi": conv.hi,
                  "convergence_over": stats.fraction(conv.n, len(part)) + " converged"}
        out.append(point)
    return out


def _value(row: Mapping[str, Any], column: str) -> float | None:
    if column == "first_interleaved":
        return float(row["first_interleaved_iteration"] is not None)
    value = row[column]
    return float(value) if value is not None else None


def write(spec: SweepSpec, rows: list[dict[str, Any]], out_dir: str | Path,
          fmt: str = "parquet") -> Path:
    """DIR/sweep.parquet (or .csv), DIR/sweep.json (grid, aggregates with N and 95 %
    intervals, run set, provenance), plots (PNG and PDF); each file atomically."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    if fmt not in tables.FORMATS:
        raise SpecError("format", f"unknown format {fmt!r}", "use parquet or csv")
    path = out / f"sweep.{fmt}"
    with replacing(path) as tmp:
        (table.to_parquet if fmt == "parquet" else table.to_csv)(tmp, index=False)
    tables.drop_other_formats(path)
    grid_cols = list(spec.grid)
    options = spec.backend_options.get("options")
    recorded = runset.read(out)
    summary = {"schema": "mltcp.sweep/2", "scenario": spec.scenario.name,
               "scheme": {**spec.scheme.to_dict(), **spec.scheme.as_run()},
               "grid": {k: list(v) for k, v in spec.grid.items()},
               "seeds": list(spec.seeds), "backend": spec.backend,
               "f_steps": getattr(options, "f_steps", None),
               "confidence": stats.LEVEL, "bootstrap_resamples": stats.RESAMPLES,
               "table": path.name, "points": aggregate(rows, grid_cols),
               "runset": recorded.to_dict() if recorded else None,
               "provenance": provenance({"backend": spec.backend})}
    write_json(out / "sweep.json", summary)
    _plots(rows, grid_cols, out, spec)
    return path


def _plots(rows: list[dict[str, Any]], grid_cols: list[str], out: Path,
           spec: SweepSpec) -> None:
    """Each metric against the first axis, one line per value of the second, with 95 %
    bootstrap error bars over the runs at each point (the seeds, and the values of any
    further axis, which are pooled: the title says so and gives N)."""
    x = grid_cols[0]
    series = grid_cols[1] if len(grid_cols) > 1 else None
    by = [x] + ([series] if series else [])
    points = aggregate(rows, by)
    n = {p["n"] for p in points}
    pooled = (f" and {', '.join(grid_cols[2:])}" if len(grid_cols) > 2 else "")
    size = f"N={min(n)}" if len(n) == 1 else f"N={min(n)}-{max(n)}"
    title = (f"{spec.scenario.name}, {spec.scheme.name}: mean over seeds{pooled}\n"
             f"({size} runs per point), error bars: 95 % bootstrap CI")
    figures = [("ratio_to_dedicated", "ratio"), ("converged", "converged"),
               ("first_interleaved", "interleaved"), ("convergence", "convergence")]
    labels = dict(AGGREGATED) | {"convergence": "convergence iteration, converged runs only"}
    for column, name in figures:
        mean = "convergence_mean" if column == "convergence" else column
        fig, ax = plotting.figure(figsize=(6.4, 4.2))
        style = plotting.styles()
        lines = sorted({p[series] for p in points}) if series else [None]
        for value in lines:
            part = sorted((p for p in points if series is None or p[series] == value),
                          key=lambda p: p[x])
            part = [p for p in part if p[mean] is not None]
            if not part:
                continue
            means = [p[mean] for p in part]
            yerr = plotting.error_bars(means, [p[f"{column}_ci_lo"] for p in part],
                                       [p[f"{column}_ci_hi"] for p in part])
            ax.errorbar([p[x] for p in part], means, yerr=yerr,
                        capsize=3, label=f"{series}={validate.fmt(value)}" if series else None,
                        **next(style))
            if column == "convergence":
                for p in part:
                    ax.annotate(f"{p['converged_runs']}/{p['n']}", (p[x], p[mean]),
                                textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_xlabel(x)
        ax.set_ylabel(labels[column])
        ax.set_title(title + ("; k/N converged beside each point"
                              if column == "convergence" else ""), fontsize=8)
        plotting.legend(ax)
        ax.grid(alpha=0.3)
        plotting.save(fig, out / name)
