"""Run a cluster experiment: every scheduler x network scheme x seed of a config.

The runs of one seed share one job list (drawn or read once, in this process, and
checked against the cluster before any run starts), so two runs of a seed differ only
in their scheduler or network scheme.  Runs go one after the other in this process
(``parallel=1``), to a pool of ``parallel`` local worker processes, or to a running
Dask cluster at ``dask_address`` (:func:`mltcp.lab.common.parallel.fan_out`, as the
sweeps); each run is the same function of the same inputs wherever it runs, so the
results are the same, bit for bit.  Every finished run prints a progress line (with
the time left at the pace so far); the results come back in the config's order
whatever order they finished in.  A run here or in a local worker that takes long
prints lines while it goes on too (:class:`RunWatch`: simulated time, iterations
done, the time left).

An interrupted experiment (Ctrl-C, or SIGTERM/SIGHUP where the CLI turns them into the
same unwinding: :mod:`mltcp.core.signals`) keeps the runs that finished: :func:`execute`
raises :class:`RunsInterrupted`, a KeyboardInterrupt that carries them (runs fanned
out and not finished are cancelled, local workers terminated; those finished but not
yet collected are kept), so that the caller writes a report marked partial instead of
throwing hours of runs away.  A rerun of the same config runs every run again (there
is no resuming).
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mltcp.core import console, signals
from mltcp.core.errors import MltcpError, SpecError
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.simulator import (
    ClusterResult,
    ClusterSim,
    Run,
    RunProgress,
    check_requests,
)
from mltcp.lab.cluster.experiments.config import ExperimentConfig, fit_cluster
from mltcp.lab.cluster.experiments.registry import SchedulerSpec, network, parse_scheduler
from mltcp.lab.common import parallel as fanning
from mltcp.lab.common import runset
from mltcp.lab.common.eta import eta_text
from mltcp.lab.models import fluid_engine

BACKEND = "cluster-sim"         # what runs a cluster experiment, in its run set


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
    """The runs' results, in :func:`run_keys` order: every run's, or, when the
    experiment was interrupted, those that finished (``runs_total``: how many it had;
    0 means all of them are here)."""

    config: ExperimentConfig
    runs: tuple[tuple[RunKey, ClusterResult], ...]
    runs_total: int = 0

    def result(self, scheduler: str, network: str, seed: int) -> ClusterResult:
        return dict(self.runs)[RunKey(scheduler, network, seed)]

    @property
    def complete(self) -> bool:
        return not self.runs_total or len(self.runs) >= self.runs_total

    @property
    def partial(self) -> dict[str, int] | None:
        """``{runs_done, runs_total}`` for a result that lacks runs, else None."""
        if self.complete:
            return None
        return {"runs_done": len(self.runs), "runs_total": self.runs_total}


class RunsInterrupted(signals.Terminated):
    """The experiment was interrupted (Ctrl-C, or a teardown signal); ``result`` holds
    the runs that finished.  A :class:`~mltcp.core.signals.Terminated` (so a
    KeyboardInterrupt) with the signal that stopped it, so that whoever does not look
    at the runs still unwinds and exits as for that signal."""

    def __init__(self, signo: int, result: ExperimentResult) -> None:
        super().__init__(signo)
        self.result = result


def _interrupted(cause: KeyboardInterrupt, cfg: ExperimentConfig, keys: list[RunKey],
                 results: dict[RunKey, ClusterResult]) -> RunsInterrupted:
    """The RunsInterrupted for ``cause`` with the finished ``results`` (in order)."""
    signo = cause.signo if isinstance(cause, signals.Terminated) else signal.SIGINT
    return RunsInterrupted(signo, _collected(cfg, keys, results))


def _collected(cfg: ExperimentConfig, keys: list[RunKey],
               results: dict[RunKey, ClusterResult]) -> ExperimentResult:
    return ExperimentResult(cfg, tuple((k, results[k]) for k in keys if k in results),
                            len(keys))


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
    names are distinct) before any run starts, and before the CLI makes --out: a job
    too large for the cluster is refused naming the config's field (fit_cluster)."""
    out: dict[int, list[JobRequest]] = {}
    for seed in cfg.seeds:
        out[seed] = cfg.jobs.requests(seed)
        fit_cluster(cfg.jobs, cfg.cluster, out[seed], seed)
        check_requests(cfg.cluster, out[seed])
    return out


def scheduler_specs(cfg: ExperimentConfig) -> dict[str, SchedulerSpec]:
    """Each scheduler of ``cfg`` parsed: those the config parsed when it was read, else
    parsed here, once."""
    specs = cfg.scheduler_specs or tuple(parse_scheduler(s, cfg.cluster, cfg.base_dir)
                                         for s in cfg.schedulers)
    return {s.spec: s for s in specs}


def simulate(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
             f_steps: int = 8, scheduler: SchedulerSpec | None = None,
             watch: Callable[[Run], None] | None = None,
             base_dir: Path | None = None) -> ClusterResult:
    """One run (what a Dask task calls): its scheduler built from ``scheduler``, the
    spec parsed already, or else from ``key``'s (an RL policy's path relative to
    ``base_dir``, the config's directory); ``watch`` sees it while it runs."""
    spec = scheduler or parse_scheduler(key.scheduler, cluster, base_dir)
    sim = ClusterSim(cluster, jobs, spec.build(), network(key.network, cluster), key.seed,
                     f_steps)
    return sim.run(watch=watch)


def _task(cluster: LeafSpine, jobs: Sequence[JobRequest], key: RunKey,
          f_steps: int, scheduler: SchedulerSpec | None = None,
          watch: Callable[[Run], None] | None = None,
          base_dir: Path | None = None) -> ClusterResult | _Failure:
    try:
        return simulate(cluster, jobs, key, f_steps, scheduler, watch, base_dir)
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
    """One line on stderr per finished run: which, its headline numbers, and, while
    runs are left, the time they should take at the pace so far."""
    jct = result.jct_summary()
    left = f", {eta_text(elapsed_s, done / total)}" if done < total else ""
    console.line(f"[{done}/{total}] {key.label}: {len(result.jobs)} jobs, JCT mean "
                 f"{jct['mean']:.1f} s, p99 {jct['p99']:.1f} s, makespan "
                 f"{result.makespan_s:.1f} s ({elapsed_s:.0f} s{left})")


def in_run_line(label: str, p: RunProgress, elapsed_s: float) -> str:
    """A line during a long run: simulated time against the least the run can take,
    the iterations finished, and the time left at the pace so far."""
    return (f"{label}: running, simulated {p.t:.0f} s (at least {p.makespan_floor_s:.3g} s "
            f"in all), {p.iterations_done} of {p.iterations} iterations "
            f"({100 * p.fraction:.3g} %), {eta_text(elapsed_s, p.fraction)}")


class RunWatch:
    """Progress lines on stderr while one run goes on: a run that takes minutes or days
    (a trace of long jobs, a fine F) says how far it is and when it should end.  The
    clock starts when the engine first reports (loading the compiled engine is no
    pace); the first line FIRST_S later (a short run prints none), then one every
    EVERY_S."""

    FIRST_S, EVERY_S = 5.0, 10.0

    def __init__(self, label: str) -> None:
        self.label = label
        self.began = self.due = math.inf

    def __call__(self, run: Run) -> None:
        now = time.monotonic()
        if self.began == math.inf:
            self.began, self.due = now, now + self.FIRST_S
        if now < self.due:
            return
        self.due = now + self.EVERY_S
        console.line(in_run_line(self.label, run.progress(), now - self.began))


def runset_of(cfg: ExperimentConfig) -> runset.RunSet:
    """The run set ``cfg``'s runs make: its name, the digest of what decides them
    (:meth:`ExperimentConfig.definition`), the simulator, each network scheme as it
    runs (its F, where it has one) and the seeds."""
    schemes = {}
    for name in cfg.networks:
        scheme = network(name, cfg.cluster)
        schemes[name] = {"scheme": type(scheme).__name__,
                         "f": asdict(scheme.f) if scheme.f is not None else None}
    return runset.new("cluster", cfg.name, cfg.definition(), BACKEND, schemes, cfg.seeds)


def claim(cfg: ExperimentConfig, out_dir: str | Path, force: bool = False) -> runset.RunSet:
    """Claim ``out_dir`` for ``cfg``'s run set: another run set there is a one-line
    SpecError naming --out unless ``force`` (which removes its results first); the same
    config again is allowed.  Its report is rewritten from this invocation's runs."""
    return runset.claim(out_dir, runset_of(cfg), force)


def execute(cfg: ExperimentConfig, parallel: int = 1, dask_address: str | None = None,
            progress: Progress | None = progress_line, out_dir: str | Path | None = None,
            force: bool = False, jobs: dict[int, list[JobRequest]] | None = None
            ) -> ExperimentResult:
    """Run every :func:`run_keys` run: in this process (``parallel`` 1, no
    ``dask_address``), on ``parallel`` local worker processes, or on the Dask cluster
    at ``dask_address``, with ``jobs`` (:func:`job_lists`, drawn here when None).  With
    ``out_dir``, :func:`claim` it once the job lists are checked, before any run.
    Interrupted (a KeyboardInterrupt, from Ctrl-C, a teardown signal or ``progress``),
    it raises :class:`RunsInterrupted` with the runs that finished."""
    keys = run_keys(cfg)
    jobs = job_lists(cfg) if jobs is None else jobs
    if out_dir is not None:
        claim(cfg, out_dir, force)
    results: dict[RunKey, ClusterResult] = {}
    try:
        if not dask_address:
            # Compiled here, if it must be (once per installation, said on stderr),
            # before the clock of the time left starts, and before local workers would
            # each do it.
            fluid_engine.ensure_compiled()
        started = time.monotonic()
        if parallel <= 1 and not dask_address:
            _here(cfg, keys, jobs, progress, started, results)
        else:
            _fanned_out(cfg, keys, jobs, parallel, dask_address, progress, started, results)
    except RunsInterrupted:
        raise
    except KeyboardInterrupt as stop:
        raise _interrupted(stop, cfg, keys, results) from None
    return _collected(cfg, keys, results)


def _here(cfg: ExperimentConfig, keys: list[RunKey], jobs: dict[int, list[JobRequest]],
          progress: Progress | None, started: float,
          results: dict[RunKey, ClusterResult]) -> None:
    """Every run in this process, one after the other, each into ``results`` as it
    finishes (what an interruption keeps)."""
    specs = scheduler_specs(cfg)
    for done, key in enumerate(keys, 1):
        watch = RunWatch(f"[{done}/{len(keys)}] {key.label}") if progress else None
        results[key] = _unwrap(key, _task(cfg.cluster, jobs[key.seed], key, cfg.f_steps,
                                          specs[key.scheduler], watch))
        if progress:
            progress(done, len(keys), key, results[key], time.monotonic() - started)


def _fanned_out(cfg: ExperimentConfig, keys: list[RunKey],
                jobs: dict[int, list[JobRequest]], parallel: int, dask_address: str | None,
                progress: Progress | None, started: float,
                results: dict[RunKey, ClusterResult]) -> None:
    """Every run as a task of a fan-out (local workers, or Dask), each into ``results``
    as it finishes; interrupted, the tasks not finished are cancelled (a running Dask
    cluster would otherwise go on with them, a local worker is terminated) and those
    that finished unseen are collected.  A local worker prints its run's progress
    lines itself (its stderr is this one's)."""
    with fanning.fan_out(parallel, dask_address, preload=(__name__,)) as pool:
        shared = {seed: pool.share(js) for seed, js in jobs.items()}
        base_dir = cfg.base_dir.resolve()       # a worker's working directory may differ
        futures: dict[cf.Future, RunKey] = {}
        for index, key in enumerate(keys, 1):
            watch = (RunWatch(f"[{index}/{len(keys)}] {key.label}")
                     if progress and pool.local else None)
            futures[pool.submit(_task, cfg.cluster, shared[key.seed], key, cfg.f_steps,
                                None, watch, base_dir)] = key
        try:
            for done, fut in enumerate(cf.as_completed(futures), 1):
                key = futures[fut]
                results[key] = _unwrap(key, fut.result())
                if progress:
                    progress(done, len(keys), key, results[key], time.monotonic() - started)
        except KeyboardInterrupt:
            _collect(futures, results)
            raise


def _collect(futures: dict[cf.Future, RunKey], results: dict[RunKey, ClusterResult]) -> None:
    """Into ``results``: the tasks that finished and were not collected yet (a bad
    input among them is left out: it is no result)."""
    for fut, key in futures.items():
        if key not in results and fut.done() and not fut.cancelled() \
                and fut.exception() is None:
            out = fut.result()
            if not isinstance(out, _Failure):
                results[key] = out
