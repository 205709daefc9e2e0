"""Parameter sweeps on the fluid model or ns-3, spread over a Dask cluster.

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

Fluid: work is cut into chunks of points that share a structure (same jobs and
links), and each chunk runs as lanes of one fluid batch (:mod:`mltcp.lab.models.fluid`), so a
chunk of 200 points costs little more than one point.  ns-3: every run is one Dask
task (which starts its own ns-3 process); each job's dedicated runs are tasks of
their own, run once per scenario variant and seed, and the points that need them
wait for them.  Tasks go to Dask: a local cluster with one single-threaded worker
process per core by default, or the scheduler at ``--scheduler`` for a real
cluster.  Every row carries each job's dedicated-link iteration time from the same
sweep, so ratios need nothing else.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mltcp.core.errors import SpecError
from mltcp.lab import metrics
from mltcp.lab.models.fluid import FluidOptions, Run, run_many
from mltcp.lab.scenario import DEDICATED, Scenario, ScenarioJob, Scheme, load_scenario
from mltcp.lab.trace import provenance

SCHEME_PARAMS = ("slope", "intercept", "cap")
SCENARIO_PARAMS = ("load", "compute_ms", "compute_jitter_ms", "jobs", "iterations")
PARAMS = SCHEME_PARAMS + SCENARIO_PARAMS
_INT_PARAMS = ("jobs", "iterations")
DEFAULT_CHUNK = 256
BACKENDS = ("fluid", "ns3")


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep: a scenario, the MLTCP scheme to vary, the grid, the seeds."""

    scenario: Scenario
    scheme: Scheme
    grid: dict[str, tuple[float, ...]]
    seeds: tuple[int, ...]
    options: FluidOptions = field(default_factory=FluidOptions)
    backend: str = "fluid"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SpecError("backend", f"sweeps run on {' or '.join(BACKENDS)}, not "
                            f"{self.backend!r}", "use --backend fluid (fast) or ns3 "
                            "(packet level)")

    def points(self) -> list[dict[str, float]]:
        """Every combination of the grid's values, in a stable order."""
        names = list(self.grid)
        return [dict(zip(names, values, strict=True))
                for values in itertools.product(*(self.grid[n] for n in names))]


def parse_grid(items: Iterable[str]) -> dict[str, tuple[float, ...]]:
    """``["slope=0.5,1,2", "jobs=2,3"]`` -> {"slope": (0.5, 1.0, 2.0), "jobs": (2, 3)}."""
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
        try:
            parsed = tuple(float(v) for v in values.split(","))
        except ValueError:
            raise SpecError(f"param.{name}", f"{values!r} has a value that is not a number",
                            "give numbers separated by commas") from None
        if name in _INT_PARAMS:
            if any(v != int(v) or v < 1 for v in parsed):
                raise SpecError(f"param.{name}", f"{values!r} are not whole numbers >= 1",
                                "give counts such as 2,3,4")
            parsed = tuple(int(v) for v in parsed)
        grid[name] = parsed
    if not grid:
        raise SpecError("param", "no parameter to sweep", "give e.g. --param slope=0.5,1,2,4")
    return grid


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-4"`` or ``"0,3,7"`` -> seeds."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.partition("-")
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    except ValueError:
        raise SpecError("seeds", f"{text!r} is not a list or range of integers",
                        "write e.g. 0-9 or 0,1,5") from None
    if not seeds or min(seeds) < 0:
        raise SpecError("seeds", f"{text!r} gives no non-negative seed", "write e.g. 0-9")
    return tuple(dict.fromkeys(seeds))


def _mltcp_scheme(scenario: Scenario, name: str | None) -> Scheme:
    if name is not None:
        return scenario.scheme(name)
    for scheme in scenario.schemes:
        if scheme.mltcp:
            return scheme
    return Scheme("mltcp", "cubic", True)


def make_spec(scenario_ref: str, params: Iterable[str], seeds: str = "0",
              scheme: str | None = None, options: FluidOptions | None = None,
              backend: str = "fluid") -> SweepSpec:
    """A sweep from CLI-style inputs (validated)."""
    scenario = load_scenario(scenario_ref)
    spec = SweepSpec(scenario, _mltcp_scheme(scenario, scheme), parse_grid(params),
                     parse_seeds(seeds), options or FluidOptions(), backend)
    for point in spec.points()[:1] + spec.points()[-1:]:
        variant(spec, point)        # fail now, not in a worker, on a bad value
    return spec


def variant(spec: SweepSpec, point: Mapping[str, float]) -> tuple[Scenario, Scheme]:
    """The scenario and scheme of one grid point."""
    sc, scheme = spec.scenario, spec.scheme
    agg = {k: point[k] for k in SCHEME_PARAMS if k in point}
    if agg:
        scheme = dataclasses.replace(scheme, mltcp=True, **agg)
        scheme.aggressiveness.validate()
    if "jobs" in point:
        sc = _copies(sc, int(point["jobs"]))
    jobs = list(sc.jobs)
    if "load" in point:
        if point["load"] <= 0:
            raise SpecError("param.load", f"{point['load']} is not positive", "use e.g. 0.5,1,2")
        jobs = [dataclasses.replace(j, bytes_per_worker=max(1, round(j.bytes_per_worker
                                                                        * point["load"])))
                for j in jobs]
    if "compute_ms" in point:
        if point["compute_ms"] < 0:
            raise SpecError("param.compute_ms", f"{point['compute_ms']} is negative",
                            "use compute times >= 0")
        jobs = [dataclasses.replace(j, compute_ms=point["compute_ms"]) for j in jobs]
    if "compute_jitter_ms" in point:
        if point["compute_jitter_ms"] < 0:
            raise SpecError("param.compute_jitter_ms", f"{point['compute_jitter_ms']} is "
                            "negative", "use standard deviations >= 0 (ms)")
        jobs = [dataclasses.replace(j, compute_jitter_ms=point["compute_jitter_ms"])
                for j in jobs]
    if "iterations" in point:
        jobs = [dataclasses.replace(j, iterations=int(point["iterations"])) for j in jobs]
    return dataclasses.replace(sc, jobs=tuple(jobs)), scheme


def _copies(sc: Scenario, n: int) -> Scenario:
    base: ScenarioJob = sc.jobs[0]
    topo = sc.topology
    if topo.kind == "dumbbell" and topo.hosts < 2 * n * max(1, base.workers // 2):
        topo = dataclasses.replace(topo, hosts=2 * n * max(1, base.workers // 2))
    jobs = tuple(dataclasses.replace(base, name=f"j{i + 1}", placement=None)
                 for i in range(n))
    return dataclasses.replace(sc, topology=topo, jobs=jobs)


# --------------------------------------------------------------------------- execution


def _structure(point: Mapping[str, float]) -> tuple:
    return tuple((k, point[k]) for k in ("jobs",) if k in point)


def chunks(spec: SweepSpec, size: int = DEFAULT_CHUNK) -> list[list[tuple[dict, int]]]:
    """(point, seed) pairs cut into chunks whose points share one structure."""
    groups: dict[tuple, list[tuple[dict, int]]] = {}
    for point in spec.points():
        for seed in spec.seeds:
            groups.setdefault(_structure(point), []).append((point, seed))
    out = []
    for items in groups.values():
        out += [items[i:i + size] for i in range(0, len(items), size)]
    return out


def _scenario_key(point: Mapping[str, float], seed: int) -> tuple:
    """Points with equal scenario parameters and seed share their dedicated runs."""
    return tuple(sorted((k, v) for k, v in point.items() if k in SCENARIO_PARAMS)), seed


def run_chunk(spec: SweepSpec, chunk: Sequence[tuple[dict, int]]) -> list[dict[str, Any]]:
    """Rows of one chunk: the points' runs and their dedicated baselines, one batch."""
    runs: list[Run] = []
    point_runs: list[int] = []
    dedicated_runs: dict[tuple, list[int]] = {}
    for point, seed in chunk:
        sc, scheme = variant(spec, point)
        point_runs.append(len(runs))
        runs.append(Run(sc, scheme, seed))
        key = _scenario_key(point, seed)
        if key not in dedicated_runs:
            dedicated_runs[key] = list(range(len(runs), len(runs) + len(sc.jobs)))
            runs += [Run(sc, DEDICATED, seed, only_job=j.name) for j in sc.jobs]
    traces = run_many(runs, spec.options, record_links=False)
    rows = []
    for (point, seed), index in zip(chunk, point_runs, strict=True):
        ded = metrics.dedicated_means(traces[i] for i in dedicated_runs[_scenario_key(point,
                                                                                      seed)])
        rows.append(_row(point, seed, traces[index], ded))
    return rows


def run_ns3_dedicated(spec: SweepSpec, point: Mapping[str, float], seed: int,
                      job: str) -> dict[str, float]:
    """One job of a point's scenario alone on ns-3: {job: mean iteration time}."""
    from mltcp.lab.ns3.backend import run_once

    sc, _ = variant(spec, point)
    return metrics.dedicated_means([run_once(sc, DEDICATED, seed, only_job=job)])


def run_ns3_point(spec: SweepSpec, point: Mapping[str, float], seed: int,
                  *dedicated: Mapping[str, float]) -> dict[str, Any]:
    """One grid point on ns-3, with its jobs' dedicated means (from their own tasks)."""
    from mltcp.lab.ns3.backend import run_once

    sc, scheme = variant(spec, point)
    return _row(point, seed, run_once(sc, scheme, seed),
                {k: v for d in dedicated for k, v in d.items()})


def _row(point: Mapping[str, float], seed: int, trace: Any,
         dedicated: Mapping[str, float]) -> dict[str, Any]:
    summary = metrics.summarize(trace, dedicated)
    jobs = summary["jobs"].values()
    last = [float(np.mean(j["overlap"][-5:])) for j in jobs]
    conv = summary["overall"]["convergence_iteration"]
    return {**point, "seed": seed, "convergence_iteration": conv, "converged": conv is not None,
            "mean_iteration_s": float(np.mean([j["mean"] for j in jobs])),
            "p99_iteration_s": max(j["p99"] for j in jobs),
            "ratio_to_dedicated": summary["overall"]["mean_ratio_to_dedicated"],
            "overlap_last5": float(np.mean(last))}


def _progress_line(done: int, total: int, started: float) -> None:
    width = 30
    filled = width * done // max(total, 1)
    msg = (f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} tasks, "
           f"{time.monotonic() - started:.0f} s")
    if sys.stderr.isatty():
        print(f"\r{msg}\033[K", end="" if done < total else "\n", file=sys.stderr, flush=True)
    else:
        print(msg, file=sys.stderr, flush=True)


def execute(spec: SweepSpec, scheduler: str | None = None, workers: int | None = None,
            chunk_size: int | None = None,
            progress: Callable[[int, int, float], None] | None = _progress_line
            ) -> list[dict[str, Any]]:
    """Run every point on Dask and return all rows (in grid order)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SpecError("sweep", "Dask is not installed",
                        "pip install 'mltcp[sweep]' (dask[distributed], pandas, pyarrow)") from None
    if spec.backend == "ns3":
        from mltcp.lab.ns3.backend import require_ns3

        require_ns3()         # say so before a cluster starts
    started = time.monotonic()
    cluster = None
    if scheduler:
        client = Client(scheduler)
    else:
        cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1,
                               processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        rows = (_submit_ns3(client, spec, progress, started) if spec.backend == "ns3"
                else _submit_fluid(client, spec, chunk_size, progress, started))
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    order = {(json.dumps(p, sort_keys=True), s): i
             for i, (p, s) in enumerate((p, s) for p in spec.points() for s in spec.seeds)}
    return sorted(rows, key=lambda r: order[(json.dumps({k: r[k] for k in spec.grid},
                                                        sort_keys=True), r["seed"])])


def _submit_fluid(client: Any, spec: SweepSpec, chunk_size: int | None,
                  progress: Callable[[int, int, float], None] | None,
                  started: float) -> list[dict[str, Any]]:
    from distributed import as_completed

    if chunk_size is None:
        # Two chunks per worker thread at least, so every worker gets work and a
        # slow chunk does not leave the others idle at the end.
        slots = max(sum(client.nthreads().values()), 1)
        items = len(spec.points()) * len(spec.seeds)
        chunk_size = max(1, min(DEFAULT_CHUNK, math.ceil(items / (2 * slots))))
    parts = chunks(spec, chunk_size)
    futures = {client.submit(run_chunk, spec, part, pure=False): k
               for k, part in enumerate(parts)}
    results: dict[int, list[dict[str, Any]]] = {}
    for done, fut in enumerate(as_completed(futures), 1):
        results[futures[fut]] = fut.result()
        if progress:
            progress(done, len(parts), started)
    return [r for k in sorted(results) for r in results[k]]


def _submit_ns3(client: Any, spec: SweepSpec,
                progress: Callable[[int, int, float], None] | None,
                started: float) -> list[dict[str, Any]]:
    """Dedicated runs once per (scenario variant, seed, job); every point waits for its
    own (Dask passes a finished future's result as the argument)."""
    from distributed import as_completed

    dedicated: dict[tuple, Any] = {}
    points = []
    for point in spec.points():
        sc, _ = variant(spec, point)          # its jobs: the same for every seed
        for seed in spec.seeds:
            key = _scenario_key(point, seed)
            for job in sc.jobs:
                if (key, job.name) not in dedicated:
                    dedicated[key, job.name] = client.submit(
                        run_ns3_dedicated, spec, point, seed, job.name, pure=False)
            points.append(client.submit(run_ns3_point, spec, point, seed,
                                        *(dedicated[key, j.name] for j in sc.jobs),
                                        pure=False))
    everything = [*dedicated.values(), *points]
    for done, _fut in enumerate(as_completed(everything), 1):
        if progress:
            progress(done, len(everything), started)
    return [fut.result() for fut in points]


# --------------------------------------------------------------------------- output


def write(spec: SweepSpec, rows: list[dict[str, Any]], out_dir: str | Path,
          fmt: str = "parquet") -> Path:
    """DIR/sweep.parquet (or .csv), DIR/sweep.json (grid, aggregates, provenance), plots."""
    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame(rows)
    if fmt == "parquet":
        path = out / "sweep.parquet"
        table.to_parquet(path, index=False)
    elif fmt == "csv":
        path = out / "sweep.csv"
        table.to_csv(path, index=False)
    else:
        raise SpecError("format", f"unknown format {fmt!r}", "use parquet or csv")
    grid_cols = list(spec.grid)
    agg = (table.groupby(grid_cols, dropna=False)
           .agg(runs=("seed", "count"), converged=("converged", "mean"),
                convergence_median=("convergence_iteration", "median"),
                ratio_to_dedicated=("ratio_to_dedicated", "mean"),
                overlap_last5=("overlap_last5", "mean"))
           .reset_index())
    summary = {"schema": "mltcp.sweep/1", "scenario": spec.scenario.name,
               "scheme": spec.scheme.to_dict(), "grid": {k: list(v) for k, v in
                                                         spec.grid.items()},
               "seeds": list(spec.seeds), "backend": spec.backend,
               "f_steps": spec.options.f_steps if spec.backend == "fluid" else None,
               "table": path.name, "points": json.loads(agg.to_json(orient="records")),
               "provenance": provenance({"backend": spec.backend})}
    (out / "sweep.json").write_text(json.dumps(summary, indent=2) + "\n")
    _plots(agg, grid_cols, out, spec.scenario.name)
    return path


def _plots(agg: Any, grid_cols: list[str], out: Path, scenario: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = grid_cols[0]
    series = grid_cols[1] if len(grid_cols) > 1 else None
    title = f"{scenario}: mean over seeds" + (
        f" and {', '.join(grid_cols[2:])}" if len(grid_cols) > 2 else "")
    for column, label, name in (("convergence_median", "convergence iteration (median)",
                                 "convergence.png"),
                                ("ratio_to_dedicated", "iteration time / dedicated",
                                 "ratio.png"),
                                ("converged", "fraction of seeds that interleave",
                                 "converged.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        groups = agg.groupby(series) if series else [(None, agg)]
        for value, part in groups:
            part = part.groupby(x)[column].mean().reset_index()
            ax.plot(part[x], part[column], marker="o",
                    label=f"{series}={value}" if series else None)
        ax.set_xlabel(x)
        ax.set_ylabel(label)
        ax.set_title(title, fontsize="medium")
        if series:
            ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
