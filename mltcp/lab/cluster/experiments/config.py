"""A cluster experiment as a TOML file: the cluster, the jobs, and what to compare.

An experiment runs the same jobs on the same cluster under every scheduler x network
scheme x seed (:mod:`mltcp.lab.cluster.experiments.runner`), so that a difference between two
runs is the scheduler's or the network's and nothing else's.  The file::

    name = "small"
    schedulers = ["fifo/consolidated", "srtf/first_fit+backfill"]   # registry specs
    networks = ["fair", "mltcp"]                                    # default: both
    seeds = [0, 1]                                                  # or "0-4"; default [0]
    f_steps = 8                                                     # optional

    [cluster]                      # LeafSpine's fields (optional with jobs.setup)
    leaves = 2
    servers_per_leaf = 2
    spines = 1

    [jobs]                         # exactly one of:
    trace = "jobs.csv"             # a CSV trace (mltcp.lab.cluster.arrivals.job_traces), relative
                                   # to this file
    poisson = { n = 20, jobs_per_hour = 120,          # or load = 0.8 (of the GPUs)
                models = { "resnet50" = 2, "bert" = 1 },  # catalogue names: weights
                gpus = { "2" = 1, "8" = 2 },          # or a list: equally likely
                iterations = [100, 500] }             # drawn from lo..hi (or one number)
    setup = "ada-srsf"             # a paper's experiment (mltcp.lab.cluster.papers.setups);
                                   # its cluster is the default [cluster]; or
                                   # { name = "...", first = 1000 }: its first jobs

Where the jobs come from is a *job source*: one frozen dataclass per kind with
``requests(seed)``, and one parser per ``[jobs]`` key in :data:`JOB_SOURCES`; a new kind
is one parser and one class.  The generators and the CSV reader are
:mod:`~mltcp.lab.cluster.arrivals.job_traces`' and
:mod:`~mltcp.lab.cluster.papers.setups`'; this module only maps the file onto them.  A Poisson trace
is drawn with each run's seed unless
``poisson.seed`` fixes it, so seeds vary the arrivals as well as ECMP's and the
placements' picks; a CSV trace is the same for every seed.

Everything is checked when the file is read (the trace's rows, each against the
cluster's GPUs, and their count against the memory budget before they are parsed; the
schedulers and networks by the registries that will build them, an RL policy's file as
a policy of this scheduler, one scheduler under two spellings; the mix against the
catalogue and the cluster's size; a Poisson rate that spreads the jobs past 1e9 s), so a
bad field fails in one line naming it before any run starts.  What only a drawn job
list shows (a paper's setup under a smaller [cluster] than its own) is checked by
:func:`fit_cluster` before ``--out`` is made, naming ``jobs.setup``, not a job.  Paths
(``jobs.trace``, ``rl-base@PATH``) are relative to the file's directory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.arrivals import job_traces as traces
from mltcp.lab.cluster.engine.gpu_jobs import JobRequest
from mltcp.lab.cluster.engine.leafspine import LeafSpine
from mltcp.lab.cluster.engine.simulator import check_memory
from mltcp.lab.cluster.papers import setups
from mltcp.lab.cluster.papers.figures import PaperSetup
from mltcp.lab.common import inputfile
from mltcp.lab.common.tomlfile import example_names, read_toml

if TYPE_CHECKING:
    from mltcp.lab.cluster.experiments.registry import SchedulerSpec

TOP_KEYS = ("name", "description", "cluster", "jobs", "schedulers", "networks", "seeds",
            "f_steps")
CLUSTER_KEYS = ("leaves", "servers_per_leaf", "spines", "gpus_per_server", "server_gbit",
                "oversubscription", "mtu_bytes", "rails")
POISSON_KEYS = ("n", "jobs_per_hour", "load", "models", "gpus", "iterations", "seed")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
DEFAULT_NETWORKS = ("fair", "mltcp")
MAX_JOBS = 10**7
MAX_ITERATIONS = 10**9
MAX_ARRIVAL_S = 1e9             # a job's latest arrival (JobRequest.arrival_s)


@dataclass(frozen=True)
class PoissonJobs:
    """``n`` jobs drawn from ``mix`` at ``jobs_per_hour`` (from ``load``, the fraction
    of the cluster's GPUs kept busy, when the file gave that); ``seed`` fixes the trace
    (None: each run's seed draws its own)."""

    n: int
    jobs_per_hour: float
    mix: traces.JobMix
    seed: int | None = None
    load: float | None = None

    def requests(self, seed: int) -> list[JobRequest]:
        """The seed's draw; a draw whose gaps carry a job past 1e9 s (rare where the
        config's mean span was within it) is refused naming the rate the file gave."""
        drawn = self.seed if self.seed is not None else seed
        try:
            return traces.poisson_trace(self.n, self.jobs_per_hour, self.mix, drawn)
        except SpecError as err:
            if not err.field.endswith(".arrival_s"):
                raise
            key = "load" if self.load is not None else "jobs_per_hour"
            raise SpecError(f"jobs.poisson.{key}", f"seed {drawn} draws a job arriving past "
                            f"{MAX_ARRIVAL_S:.0e} s ({err.problem})",
                            "give a higher rate, or fewer jobs (n)") from None

    def to_dict(self) -> dict[str, Any]:
        """The ``[jobs]`` table this was parsed from (parsing it gives this back)."""
        mix = self.mix
        rate = {"load": self.load} if self.load is not None \
            else {"jobs_per_hour": self.jobs_per_hour}
        out: dict[str, Any] = {
            "n": self.n, **rate,
            "models": dict(zip(mix.models.values, mix.models.weights, strict=True)),
            "gpus": {str(g): w for g, w in zip(mix.gpus.values, mix.gpus.weights,
                                               strict=True)},
            "iterations": [mix.iterations.lo, mix.iterations.hi]}
        if self.seed is not None:
            out["seed"] = self.seed
        return {"poisson": out}


@dataclass(frozen=True)
class TraceJobs:
    """The jobs of a CSV trace (read, and so checked, once when the config is)."""

    path: Path
    jobs: tuple[JobRequest, ...] = field(repr=False, default=())

    def requests(self, seed: int) -> list[JobRequest]:
        return list(self.jobs)

    def to_dict(self) -> dict[str, Any]:
        return {"trace": str(self.path)}

    def definition(self) -> dict[str, Any]:
        """The file's name and the jobs read from it: a trace edited in place is
        another experiment, though its path is the same."""
        return {**self.to_dict(), "jobs": [asdict(j) for j in self.jobs]}


@dataclass(frozen=True)
class SetupJobs:
    """The jobs of one of the papers' experiments, by its key in
    :mod:`mltcp.lab.cluster.papers.setups`; ``first``: only the first so many by arrival
    (a large setup, vClos's 5,000 jobs, cut to what a run should take)."""

    name: str
    first: int | None = None

    def requests(self, seed: int) -> list[JobRequest]:
        jobs = setups.jobs(self.name, seed)
        return jobs if self.first is None else \
            sorted(jobs, key=lambda j: (j.arrival_s, j.name))[:self.first]

    def to_dict(self) -> dict[str, Any]:
        if self.first is None:
            return {"setup": self.name}
        return {"setup": {"name": self.name, "first": self.first}}


JobSource = PoissonJobs | TraceJobs | SetupJobs


def fit_cluster(source: JobSource, cluster: LeafSpine, jobs: list[JobRequest],
                seed: int) -> None:
    """Every job of ``jobs`` (``source``'s draw for ``seed``) fits ``cluster``, refused
    otherwise naming the config's field rather than a job it generated
    (``jobs[j000].gpus``): a paper's setup under a smaller [cluster] than its own."""
    biggest = max(jobs, key=lambda j: j.gpus, default=None)
    if biggest is None or biggest.gpus <= cluster.gpus:
        return
    where = next(k for k in JOB_SOURCES if k in source.to_dict())
    fix = f"give [cluster] at least {biggest.gpus} GPUs"
    if isinstance(source, SetupJobs):
        fix = f"drop [cluster] (the setup brings its own), or give it at least {biggest.gpus} GPUs"
    raise SpecError(f"jobs.{where}", f"job {biggest.name} (seed {seed}) asks for "
                    f"{biggest.gpus} GPUs, more than the cluster's {cluster.gpus}", fix)


@dataclass(frozen=True)
class ExperimentConfig:
    """Every scheduler x network x seed on ``cluster`` with the jobs of ``jobs``."""

    name: str
    cluster: LeafSpine
    jobs: JobSource
    schedulers: tuple[str, ...]
    networks: tuple[str, ...] = DEFAULT_NETWORKS
    seeds: tuple[int, ...] = (0,)
    f_steps: int = 8
    description: str = ""
    # Each of ``schedulers`` parsed and checked once, when the file was read (what the
    # runs build their schedulers from; a config made in code has none, and the runner
    # parses its schedulers once).
    scheduler_specs: tuple[SchedulerSpec, ...] = field(default=(), compare=False,
                                                       repr=False)
    # The config file's directory: what an RL policy's relative path is taken from,
    # here and on every Dask worker (a worker's working directory is not the user's).
    base_dir: Path = field(default=Path("."), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The config as a file would give it (:func:`parse_config` gives it back)."""
        return {"name": self.name, "description": self.description,
                "cluster": asdict(self.cluster), "jobs": self.jobs.to_dict(),
                "schedulers": list(self.schedulers), "networks": list(self.networks),
                "seeds": list(self.seeds), "f_steps": self.f_steps}

    def definition(self) -> dict[str, Any]:
        """What decides this experiment's runs, for its run set's digest
        (:mod:`mltcp.lab.common.runset`): :meth:`to_dict` without the description (which
        decides nothing), a CSV trace's jobs as read (not only its path), and the digest
        of each RL policy file a scheduler loads (a retrained ``policy.zip`` at the same
        path schedules differently)."""
        data = self.to_dict()
        del data["description"]
        jobs = self.jobs
        if isinstance(jobs, TraceJobs):
            data["jobs"] = jobs.definition()
        policies = {spec: _file_digest(path) for spec in self.schedulers
                    if (path := policy_file(spec, self.base_dir)) is not None}
        if policies:
            data["policies"] = policies
        return data


def policy_file(spec: str, base_dir: Path | None = None) -> Path | None:
    """The policy checkpoint an RL scheduler spec loads (``rl-base@PATH``: PATH, relative
    to ``base_dir``, or the shipped policy PATH names; bare ``rl-base``/``rl-hybrid``: the
    shipped one), None for every other scheduler."""
    from mltcp.lab.cluster.papers.deepshare_rl.schedulers import policy_path

    kind, sep, path = spec.partition("@")
    if kind not in ("rl-base", "rl-hybrid"):
        return None
    return policy_path(path if sep else None, base_dir)


def _file_digest(path: Path) -> str:
    """A short SHA-256 of a file's bytes ("missing" where there is none: the run would
    refuse it anyway)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "missing"


# --------------------------------------------------------------------------- reading


def load_config(path_or_name: str | Path) -> ExperimentConfig:
    """An experiment from a TOML file, or a packaged example (``examples/``) by bare
    name; a relative trace path is taken from the file's directory."""
    path = Path(path_or_name)
    if not path.is_file() and isinstance(path_or_name, str) and NAME.fullmatch(path_or_name):
        example = examples_dir().joinpath(f"{path_or_name}.toml")
        if example.is_file():
            path = Path(str(example))
    return parse_config(read_toml(path, "config", list_examples()), path.parent, str(path),
                        default_name=path.stem)


def parse_config(data: Mapping[str, Any], base_dir: Path = Path("."), source: str = "",
                 default_name: str = "experiment") -> ExperimentConfig:
    """The experiment of a dict as tomllib reads it; errors name the field (and
    ``source``, the file, when given)."""
    try:
        return _parse(data, base_dir, default_name)
    except SpecError as err:
        if not source:
            raise
        raise SpecError(err.field, f"{err.problem} (in {source})", err.fix) from None


def _parse(data: Mapping[str, Any], base_dir: Path, default_name: str) -> ExperimentConfig:
    _table(data, "", TOP_KEYS, "write the experiment as name, schedulers, [cluster], [jobs]")
    name = data.get("name", default_name if NAME.fullmatch(default_name) else "experiment")
    name = validate.name(name, "name", NAME, "1-40 of a-z, 0-9, '_' and '-'", '"small"')
    description = validate.text(data.get("description", ""), "description", '"what it shows"')
    jobs_table = _table(_required(data, "jobs", 'a [jobs] table with trace = "jobs.csv"'),
                        "jobs", tuple(JOB_SOURCES), 'write [jobs] with trace = "jobs.csv"')
    if "cluster" in data:
        cluster = _cluster(data["cluster"])
    elif isinstance(jobs_table.get("setup"), str | Mapping):
        cluster = _setup(jobs_table["setup"]).fabric         # the paper's own cluster
    else:
        _missing("cluster", "a [cluster] table with leaves = 2, servers_per_leaf = 2, "
                            "spines = 1 (or [jobs] setup = ..., which brings its own)")
    # How many seeds and runs there are is known before the jobs are read, so that a
    # trace's rows are counted against the memory budget before they are parsed.
    schedulers = _names(_required(data, "schedulers", 'schedulers = ["fifo/consolidated"]'),
                        "schedulers", '["fifo/consolidated", "srtf/first_fit"]')
    networks = _names(data.get("networks", list(DEFAULT_NETWORKS)), "networks",
                      '["fair", "mltcp"]')
    seeds = _seeds(data.get("seeds", [0]))
    ctx = _Context(base_dir, cluster, len(seeds), len(seeds) * len(schedulers) * len(networks))
    jobs = _jobs(jobs_table, ctx)
    specs = _scheduler_specs(schedulers, ctx)
    for i, scheme in enumerate(networks):
        _check_network(scheme, f"networks[{i}]", cluster, specs)
    _check_memory(cluster, jobs, ctx.seeds, ctx.runs)
    f_steps = validate.integer(data.get("f_steps", 8), "f_steps", 0, 1_000_000, "8")
    return ExperimentConfig(name, cluster, jobs, schedulers, networks, seeds, f_steps,
                            description, specs, base_dir)


@dataclass(frozen=True)
class _Context:
    """What a config's parts are read against: its directory (relative paths), the
    cluster, and the seeds and runs that the memory budget counts."""

    base_dir: Path
    cluster: LeafSpine
    seeds: int = 1
    runs: int = 1


def _check_memory(cluster: LeafSpine, jobs: JobSource, seeds: int, runs: int) -> None:
    """The experiment within the memory budget before any job list is drawn: each of
    jobs.poisson.n (up to 10^7), the seeds and the schedulers x networks may be in range
    while the runs' jobs together are not.  A paper's setup without ``first`` brings the
    size its paper ran."""
    if isinstance(jobs, PoissonJobs):
        n, field_ = jobs.n, "jobs.poisson.n"
    elif isinstance(jobs, TraceJobs):
        n, field_ = len(jobs.jobs), "jobs.trace"
    elif jobs.first is not None:
        n, field_ = jobs.first, "jobs.setup.first"
    else:
        return
    check_memory(cluster, n, f"{field_} x seeds x schedulers x networks", seeds, runs)


def _table(value: object, path: str, allowed: tuple[str, ...], example: str
           ) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(path or "config", f"must be a table (got {type(value).__name__})",
                        example)
    validate.known_keys(value, path, allowed)
    return value


def _required(data: Mapping[str, Any], key: str, example: str) -> Any:
    if key not in data:
        _missing(key, example)
    return data[key]


def _missing(field_: str, example: str) -> NoReturn:
    raise SpecError(field_, "is missing", f"add {example}")


def _cluster(value: object) -> LeafSpine:
    table = _table(value, "cluster", CLUSTER_KEYS, "write [cluster] with leaves = 2, ...")
    for key in ("leaves", "servers_per_leaf", "spines"):
        if key not in table:
            _missing(f"cluster.{key}", f"{key} = 2 under [cluster]")
    return LeafSpine(**table)               # checks every field as cluster.<field>


def _names(value: object, field_: str, example: str) -> tuple[str, ...]:
    """A non-empty list of distinct strings."""
    if not isinstance(value, list) or not value:
        raise SpecError(field_, f"must be a non-empty list (got {value!r})", f"use {example}")
    names = tuple(validate.text(v, f"{field_}[{i}]", example) for i, v in enumerate(value))
    for i, v in enumerate(names):
        if v in names[:i]:
            raise SpecError(f"{field_}[{i}]", f"{v!r} is listed twice", "list each once")
    return names


def _parse_scheduler(spec: str, field_: str, ctx: _Context) -> SchedulerSpec:
    from mltcp.lab.cluster.experiments.registry import parse_scheduler

    try:
        return parse_scheduler(spec, ctx.cluster, ctx.base_dir)
    except SpecError as err:
        raise SpecError(field_, err.problem, err.fix) from None


def _scheduler_specs(schedulers: tuple[str, ...], ctx: _Context) -> tuple[SchedulerSpec, ...]:
    """Each scheduler parsed and checked, and no scheduler twice under two spellings
    (``+backfill+preempt`` and ``+preempt+backfill``, ``rl-base`` and the shipped
    policy's path): it would run twice and fill the report with equal rows."""
    specs: list[SchedulerSpec] = []
    for i, spec in enumerate(schedulers):
        parsed = _parse_scheduler(spec, f"schedulers[{i}]", ctx)
        for j, earlier in enumerate(specs):
            if earlier.identity == parsed.identity:
                raise SpecError(f"schedulers[{i}]", f"{spec!r} is the same scheduler as "
                                f"schedulers[{j}] {earlier.spec!r}", "list each scheduler once")
        specs.append(parsed)
    return tuple(specs)


def _check_network(scheme: str, field_: str, cluster: LeafSpine,
                   specs: tuple[SchedulerSpec, ...] = ()) -> None:
    """The scheme builds, and every scheduler of ``specs`` can run with it."""
    from mltcp.lab.cluster.experiments.registry import network

    try:
        built = network(scheme, cluster)
        for spec in specs:
            spec.check_network(built)
    except SpecError as err:
        raise SpecError(field_, err.problem, err.fix) from None


def _seeds(value: object) -> tuple[int, ...]:
    if isinstance(value, str):
        return validate.seeds(value, "seeds")
    if not isinstance(value, list) or not value:
        raise SpecError("seeds", f"must be a non-empty list or a range (got {value!r})",
                        'use e.g. [0, 1, 2] or "0-4"')
    return validate.seed_list(value)


# --------------------------------------------------------------------------- job sources


def _jobs(table: Mapping[str, Any], ctx: _Context) -> JobSource:
    given = [k for k in JOB_SOURCES if k in table]
    if len(given) != 1:
        problem = "has none of" if not given else f"has {' and '.join(given)}, more than one of"
        raise SpecError("jobs", f"{problem} {', '.join(JOB_SOURCES)}",
                        "give exactly one source of jobs")
    key = given[0]
    return JOB_SOURCES[key](table[key], f"jobs.{key}", ctx)


def _trace(value: object, field_: str, ctx: _Context) -> TraceJobs:
    """A CSV trace, relative to the config's directory, read and checked now: every row
    (file:line), each job's GPUs against the cluster, and the row count against the
    memory budget before the rows are parsed."""
    fix = "give a CSV file (relative paths are taken from the config's directory)"
    text = inputfile.path_text(validate.text(value, field_, '"jobs.csv"'), field_, fix)
    path = Path(text)
    path = path if path.is_absolute() else ctx.base_dir / path
    inputfile.regular_file(path, field_, "a CSV file", fix)

    def check_rows(rows: int) -> None:
        check_memory(ctx.cluster, rows, f"{field_} x seeds x schedulers x networks",
                     ctx.seeds, ctx.runs)

    return TraceJobs(path, tuple(traces.read_csv(path, ctx.cluster.gpus, check_rows,
                                                 field_)))


def _poisson(value: object, field_: str, ctx: _Context) -> PoissonJobs:
    table = _table(value, field_, POISSON_KEYS, "write poisson = { n = 20, jobs_per_hour = "
                   '120, models = { "resnet50" = 1 }, gpus = [8], iterations = [100, 500] }')
    for key in ("n", "models", "gpus", "iterations"):
        if key not in table:
            _missing(f"{field_}.{key}", f"{key} to {field_}")
    rates = [k for k in ("jobs_per_hour", "load") if k in table]
    if len(rates) != 1:
        raise SpecError(field_, "needs exactly one of jobs_per_hour and load",
                        "give jobs_per_hour = 120, or load = 0.8 (of the cluster's GPUs)")
    n = validate.integer(table["n"], f"{field_}.n", 1, MAX_JOBS, "20")
    mix = traces.JobMix(
        _weighted(table["models"], f"{field_}.models", _catalogue_name, '"resnet50"'),
        _weighted(table["gpus"], f"{field_}.gpus", lambda v, f: _gpus(v, f, ctx.cluster),
                  "8"),
        _iterations(table["iterations"], f"{field_}.iterations"))
    load = None
    if "load" in table:
        load = validate.number(table["load"], f"{field_}.load", 0, 10, "0.8", lo_open=True)
        rate = traces.jobs_per_hour_for_load(load, ctx.cluster.gpus, mix,
                                             ctx.cluster.nic_gbit, ctx.cluster.gpus_per_server)
    else:
        rate = validate.number(table["jobs_per_hour"], f"{field_}.jobs_per_hour", 0, 1e9,
                               "120", lo_open=True)
    _check_span(n, rate, f"{field_}.{rates[0]}", load)
    seed = table.get("seed")
    if seed is not None:
        seed = validate.integer(seed, f"{field_}.seed", 0, validate.MAX_SEED, "0")
    return PoissonJobs(n, rate, mix, seed, load)


def _check_span(n: int, jobs_per_hour: float, field_: str, load: float | None) -> None:
    """The n jobs' arrivals within the 1e9 s an arrival may be (JobRequest's bound): a
    rate so low that even the mean gap puts the last job past it is refused here,
    named by the rate the file gave (``load``, when it gave a load), not later as a
    generated job's arrival_s."""
    span_s = (n - 1) * 3600.0 / jobs_per_hour
    if span_s <= MAX_ARRIVAL_S:
        return
    least = (n - 1) * 3600.0 / MAX_ARRIVAL_S
    rate = f"{jobs_per_hour:.3g} jobs an hour"
    given = rate if load is None else f"load {validate.fmt(load)} ({rate})"
    more = (f"a rate of at least {least:.3g} jobs an hour" if load is None else
            f"a load of at least {load * least / jobs_per_hour:.3g}")
    raise SpecError(field_, f"{given} puts the last of {n} jobs at ~{span_s:.3g} s, past "
                    f"the {MAX_ARRIVAL_S:.0e} s an arrival may be",
                    f"give {more} (a few times more for margin), or fewer jobs (n)")


def _weighted(value: object, field_: str, check: Callable[[Any, str], Any],
              example: str) -> traces.Weighted:
    """A list (equally likely) or a table of value = weight, each value checked."""
    if isinstance(value, list) and value:
        pairs = [(v, 1.0, f"{field_}[{i}]") for i, v in enumerate(value)]
    elif isinstance(value, Mapping) and value:
        pairs = [(k, w, f"{field_}.{k}") for k, w in value.items()]
    else:
        raise SpecError(field_, f"must be a non-empty list or table (got {value!r})",
                        f"give e.g. [{example}] or {{ {example} = 1 }}")
    values, weights = [], []
    for v, w, where in pairs:
        values.append(check(v, where))
        weights.append(validate.number(w, where, 0, 1e12, "1", lo_open=True,
                                       fix="give a weight > 0, e.g. 1"))
    for i, v in enumerate(values):
        if v in values[:i]:
            raise SpecError(pairs[i][2], f"{v!r} is listed twice", "list each once")
    return traces.Weighted(tuple(values), tuple(weights), field_)


def _catalogue_name(value: object, where: str) -> str:
    try:
        return catalogue.profile(value).name          # type: ignore[arg-type]
    except SpecError as err:
        raise SpecError(where, err.problem, err.fix) from None


def _gpus(value: object, where: str, cluster: LeafSpine) -> int:
    """A GPU count (a table's keys are strings: "8" = 2)."""
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return validate.integer(value, where, 1, cluster.gpus, "8")


def _iterations(value: object, field_: str) -> traces.IntRange:
    if validate.is_integer(value):
        value = [value, value]
    if not isinstance(value, list) or len(value) != 2:
        raise SpecError(field_, f"must be [lo, hi] or one number (got {value!r})",
                        "give e.g. [100, 500]")
    lo = validate.integer(value[0], f"{field_}[0]", 1, MAX_ITERATIONS, "100")
    hi = validate.integer(value[1], f"{field_}[1]", 1, MAX_ITERATIONS, "500")
    if hi < lo:
        raise SpecError(f"{field_}[1]", f"{hi} is below lo = {lo}", "give [lo, hi], lo <= hi")
    return traces.IntRange(lo, hi, field_)


def _setup_jobs(value: object, field_: str, ctx: _Context) -> SetupJobs:
    """``setup = "name"`` or ``setup = { name = "name", first = 1000 }``."""
    if not isinstance(value, Mapping):
        return SetupJobs(_setup(value, field_).key)
    table = _table(value, field_, ("name", "first"),
                   f'write setup = {{ name = "{setups.names()[0]}", first = 100 }}')
    first = validate.integer(table["first"], f"{field_}.first", 1, 10**7, "1000") \
        if "first" in table else None
    return SetupJobs(_setup(table, field_).key, first)


def _setup(value: object, field_: str = "jobs.setup") -> PaperSetup:
    if isinstance(value, Mapping):
        if "name" not in value:
            _missing(f"{field_}.name", f'name = "{setups.names()[0]}" to {field_}')
        value, field_ = value["name"], f"{field_}.name"
    name = validate.text(value, field_, f'"{setups.names()[0]}"')
    try:
        return setups.setup(name)
    except SpecError as err:
        raise SpecError(field_, err.problem, err.fix) from None


JOB_SOURCES: dict[str, Callable[[Any, str, _Context], JobSource]] = {
    "trace": _trace, "poisson": _poisson, "setup": _setup_jobs}


# --------------------------------------------------------------------------- examples


def examples_dir() -> Any:
    return resources.files("mltcp.lab.cluster.experiments").joinpath("examples")


def list_examples() -> list[str]:
    return example_names(examples_dir())
