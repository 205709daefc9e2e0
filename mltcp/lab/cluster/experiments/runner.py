"""Run a cluster experiment: every scheduler x network scheme x seed of a config.

The runs of one seed share one job list (drawn or read once, in this process, and
checked against the cluster before any run starts), so two runs of a seed differ only
in their scheduler or network scheme.  Runs go one after the other in this process
(``parallel=1``), or to Dask: a local cluster of ``parallel`` single-threaded worker
processes, or a running Dask cluster at ``dask_address``
(:func:`mltcp.lab.common.distributed.dask_client`, as the sweeps).  Every finished run
prints a progress line; the results come back in the config's order whatever order
they finished in.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mltcp.core.errors import MltcpError, SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.simulator import ClusterResult, ClusterSim, check_requests
from mltcp.lab.cluster.experiments.config import ExperimentConfig
from mltcp.lab.cluster.experiments.registry import SchedulerSpec, network, parse_scheduler
from mltcp.lab.common.distributed import dask_client


@dataclass(frozen=True)
class RunKey:
    """Which run: a scheduler spec, a network scheme, a seed."""

    scheduler: str
    network: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.scheduler} x {self.network}, seed {self.seed}"


@dataclass(frozen=True)
class ExperimentResult:
    """Every run's result, in :func:`run_keys` order."""

    config: ExperimentConfig
    runs: tuple[tuple[RunKey, ClusterResult], ...]

    def result(self, scheduler: str, network: str, seed: int) -> ClusterResult:
        return dict(self.runs)[RunKey(scheduler, network, seed)]


@dataclass(frozen=True)
class _Failure:
    """A run's bad input, carried back from a worker as data rather than raised there,
    so that the client re-raises it naming the run (and the other runs go on)."""

    field: str
    problem: str
    fix: str
    spec: bool = True


Progress = Callable[[int, int, RunKey, ClusterResult, float], None]


def run_keys(cfg: ExperimentConfig) -> list[RunKey]:
    """The cross product, schedulers outermost, seeds innermost."""
    return [RunKey(s, n, seed) for s in cfg.schedulers for n in cfg.networks
            for seed in cfg.seeds]


def job_lists(cfg: ExperimentConfig) -> dict[int, list[JobRequest]]:
    """Each seed's jobs, checked by the simulator's own rules (they fit the cluster,
    names are distinct) before any run starts."""
    out: dict[int, list[JobRequest]] = {}
    for seed in cfg.seeds:
        out[seed] = cfg.jobs.requests(seed)
        check_requests(cfg.cluster, out[seed])
    return out


def scheduler_specs(cfg: ExperimentConfig) -> dict[str, SchedulerSpec]:
    """Each scheduler of ``cfg`` parsed: those the config parsed when it was read, else
    parsed here, once."""
    specs = cfg.scheduler_specs or tuple(parse_scheduler(s, cfg.cluster)
                                         for s in cfg.schedulers)
    return {s.spec: s for s in specs}


def simulate(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
             f_steps: int = 8, scheduler: SchedulerSpec | None = None) -> ClusterResult:
    """One run (what a Dask task calls): its scheduler built from ``scheduler``, the
    spec parsed already, or else from ``key``'s."""
    spec = scheduler or parse_scheduler(key.scheduler, cluster)
    sim = ClusterSim(cluster, jobs, spec.build(), network(key.network, cluster), key.seed,
                     f_steps)
    return sim.run()


def _task(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
          f_steps: int, scheduler: SchedulerSpec | None = None) -> ClusterResult | _Failure:
    try:
        return simulate(cluster, jobs, key, f_steps, scheduler)
    except SpecError as err:
        return _Failure(err.field, err.problem, err.fix)
    except MltcpError as err:
        return _Failure("", str(err), "", spec=False)


def _unwrap(key: RunKey, out: ClusterResult | _Failure) -> ClusterResult:
    if isinstance(out, _Failure):
        if out.spec:
            raise SpecError(out.field, f"{out.problem} ({key.label})", out.fix)
        raise MltcpError(f"{key.label}: {out.problem}")
    return out


def progress_line(done: int, total: int, key: RunKey, result: ClusterResult,
                  elapsed_s: float) -> None:
    """One line on stderr per finished run: which, and its headline numbers."""
    jct = result.jct_summary()
    print(f"[{done}/{total}] {key.label}: {len(result.jobs)} jobs, JCT mean "
          f"{jct['mean']:.1f} s, p99 {jct['p99']:.1f} s, makespan {result.makespan_s:.1f} s "
          f"({elapsed_s:.0f} s)", file=sys.stderr, flush=True)


def execute(cfg: ExperimentConfig, parallel: int = 1, dask_address: str | None = None,
            progress: Progress | None = progress_line) -> ExperimentResult:
    """Run every :func:`run_keys` run: in this process (``parallel`` 1, no
    ``dask_address``), else on Dask."""
    keys = run_keys(cfg)
    jobs = job_lists(cfg)
    started = time.monotonic()
    if parallel <= 1 and not dask_address:
        specs = scheduler_specs(cfg)
        results = {}
        for done, key in enumerate(keys, 1):
            results[key] = _unwrap(key, _task(cfg.cluster, jobs[key.seed], key, cfg.f_steps,
                                              specs[key.scheduler]))
            if progress:
                progress(done, len(keys), key, results[key], time.monotonic() - started)
    else:
        results = _on_dask(cfg, keys, jobs, parallel, dask_address, progress, started)
    return ExperimentResult(cfg, tuple((k, results[k]) for k in keys))


def _on_dask(cfg: ExperimentConfig, keys: list[RunKey], jobs: dict[int, list[JobRequest]],
             parallel: int, dask_address: str | None, progress: Progress | None,
             started: float) -> dict[RunKey, ClusterResult]:
    with dask_client(dask_address, parallel, "parallel cluster experiments",
                     "or drop --parallel") as client:
        from distributed import as_completed

        shared = {seed: client.scatter(js, broadcast=False) for seed, js in jobs.items()}
        futures = {client.submit(_task, cfg.cluster, shared[key.seed], key, cfg.f_steps,
                                 pure=False): key for key in keys}
        results = {}
        for done, fut in enumerate(as_completed(futures), 1):
            key = futures[fut]
            results[key] = _unwrap(key, fut.result())
            if progress:
                progress(done, len(keys), key, results[key], time.monotonic() - started)
        return results
