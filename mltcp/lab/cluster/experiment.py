"""Run a cluster experiment: every scheduler x network scheme x seed of a config.

The runs of one seed share one job list (drawn or read once, in this process, and
checked against the cluster before any run starts), so two runs of a seed differ only
in their scheduler or network scheme.  Runs go one after the other in this process
(``parallel=1``), or to Dask: a local cluster of ``parallel`` single-threaded worker
processes, or the scheduler at ``scheduler`` (an address) for a real cluster, connected
the way the sweeps connect (:func:`mltcp.lab.sweep._connect`).  Every finished run
prints a progress line; the results come back in the config's order whatever order
they finished in.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.lab.cluster.config import ExperimentConfig
from mltcp.lab.cluster.fabric import LeafSpine
from mltcp.lab.cluster.jobs import JobRequest
from mltcp.lab.cluster.registry import network
from mltcp.lab.cluster.registry import scheduler as make_scheduler
from mltcp.lab.cluster.sim import ClusterResult, ClusterSim


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
        jobs = cfg.jobs.requests(seed)
        ClusterSim(cfg.cluster, jobs, make_scheduler(cfg.schedulers[0], cfg.cluster),
                   network(cfg.networks[0], cfg.cluster), seed)
        out[seed] = jobs
    return out


def simulate(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
             f_steps: int = 8) -> ClusterResult:
    """One run (what a Dask task calls)."""
    sim = ClusterSim(cluster, jobs, make_scheduler(key.scheduler, cluster),
                     network(key.network, cluster), key.seed, f_steps)
    return sim.run()


def _task(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
          f_steps: int) -> ClusterResult | _Failure:
    try:
        return simulate(cluster, jobs, key, f_steps)
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


def execute(cfg: ExperimentConfig, parallel: int = 1, scheduler: str | None = None,
            progress: Progress | None = progress_line) -> ExperimentResult:
    """Run every :func:`run_keys` run: in this process (``parallel`` 1, no
    ``scheduler``), else on Dask."""
    keys = run_keys(cfg)
    jobs = job_lists(cfg)
    started = time.monotonic()
    if parallel <= 1 and not scheduler:
        results = {}
        for done, key in enumerate(keys, 1):
            results[key] = _unwrap(key, _task(cfg.cluster, jobs[key.seed], key, cfg.f_steps))
            if progress:
                progress(done, len(keys), key, results[key], time.monotonic() - started)
    else:
        results = _on_dask(cfg, keys, jobs, parallel, scheduler, progress, started)
    return ExperimentResult(cfg, tuple((k, results[k]) for k in keys))


def _on_dask(cfg: ExperimentConfig, keys: list[RunKey], jobs: dict[int, list[JobRequest]],
             parallel: int, scheduler: str | None, progress: Progress | None,
             started: float) -> dict[RunKey, ClusterResult]:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise CapabilityError("parallel cluster experiments run on Dask, which is not "
                              "installed: pip install 'mltcp[sweep]' (or drop --parallel)"
                              ) from None
    from mltcp.lab.sweep import _connect

    cluster = None
    if scheduler:
        client = _connect(Client, scheduler)
    else:
        cluster = LocalCluster(n_workers=parallel, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    try:
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
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
