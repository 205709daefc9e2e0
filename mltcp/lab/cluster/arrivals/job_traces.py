"""Job arrival traces for the cluster simulator: drawn (Poisson) or read from a file.

A trace is a list of :class:`~mltcp.lab.cluster.engine.simulator.JobRequest`; nothing here knows
about queues, placement or schedulers, so any scheduler can replay any trace.

**Poisson traces.**  :func:`poisson_trace` draws ``n`` jobs with exponential gaps at
``jobs_per_hour``; each job's model, GPU count and iteration count come from a
:class:`JobMix` (independent draws from a seeded :class:`random.Random`, so one seed
is one trace).  :func:`jobs_per_hour_for_load` converts a GPU load (the fraction of the
cluster's GPUs busy on average, as Cassini states its traces' load) into that rate.

**CSV traces** (one job a row, a header naming the columns, in any order)::

    name,arrival_s,model,compute_s,gradient_bytes,gpus,iterations
    j0,0,vgg16,,,4,1000
    j1,12.5,,0.2,100MB,8,500
    j2,30,my-bert,0.15,4.2e8,2,800

* ``name``: unique per trace (it names the job in results and errors);
* ``arrival_s``: seconds from the trace's start (>= 0);
* the costs, one of:

  - ``model`` alone: a catalogue name (:mod:`mltcp.lab.cluster.arrivals.catalogue`) whose
    compute time and gradient bytes the job takes (``j0``);
  - ``compute_s`` (seconds per iteration) and ``gradient_bytes`` (bytes reduced per
    iteration: a number or a size such as ``100MB``/``4MiB``), ``model`` empty (``j1``);
  - both: the explicit costs, with ``model`` kept as the job's label only (``j2``; it
    need not be in the catalogue), which is what :func:`format_csv` writes;

* ``gpus``, ``iterations``: positive integers.

Blank lines and lines starting with ``#`` are skipped; an unknown or missing column,
an empty required cell or a bad value is one :class:`~mltcp.core.errors.SpecError`
naming the file, line, row and column.  Reading what :func:`format_csv` wrote gives
equal requests (floats are written with ``repr``).

The file is UTF-8 (a leading byte-order mark, as Windows editors write, is dropped;
other bytes are refused naming the line and the byte).  A row is a line, so a quoted
cell cannot hold a line break (refused as such); a header separated by semicolons or
tabs is refused as not comma-separated; a header without rows is refused (an
experiment of no jobs has nothing to report).  ``gradient_bytes`` has one cap in both
forms, 1e13 bytes.  A job with ``compute_s`` and
``gradient_bytes`` both 0 takes no time and is refused.
"""

from __future__ import annotations

import csv
import difflib
import io
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.cluster.arrivals import catalogue
from mltcp.lab.cluster.engine.simulator import JobRequest, poisson_arrivals
from mltcp.lab.common import inputfile

T = TypeVar("T")

COLUMNS = ("name", "arrival_s", "model", "compute_s", "gradient_bytes", "gpus", "iterations")
REQUIRED = ("name", "arrival_s", "gpus", "iterations")
MAX_GRADIENT_BYTES = 1e13       # the simulator's cap (gpu_jobs.check_costs)
MAX_GPUS = 1 << 20
# Reading a trace holds its bytes, its text and a str per line at once (a str costs
# ~50 bytes beyond its characters, and rows are ~20-40 characters): a file is refused
# before it is read when this many times its size exceeds the memory budget.
TEXT_MEMORY_FACTOR = 6
OTHER_SEPARATORS = {";": "semicolons", "\t": "tabs", "|": "'|'"}


@dataclass(frozen=True)
class Weighted(Generic[T]):
    """A discrete distribution: ``values[i]`` with probability ``weights[i] / sum``."""

    values: tuple[T, ...]
    weights: tuple[float, ...]
    label: str = "choice"

    def __post_init__(self) -> None:
        if not self.values:
            raise SpecError(f"{self.label}.values", "is empty", "give at least one value")
        if len(self.weights) != len(self.values):
            raise SpecError(f"{self.label}.weights",
                            f"has {len(self.weights)} weights for {len(self.values)} values",
                            "give one weight per value")
        for w in self.weights:
            validate.number(w, f"{self.label}.weights", 0, 1e12, "1")
        if sum(self.weights) <= 0:
            raise SpecError(f"{self.label}.weights", "sum to 0", "give some weight > 0")

    @classmethod
    def uniform(cls, values: Iterable[T], label: str = "choice") -> Weighted[T]:
        vals = tuple(values)
        return cls(vals, (1.0,) * len(vals), label)

    def draw(self, rng: random.Random) -> T:
        return rng.choices(self.values, self.weights)[0]

    def probabilities(self) -> dict[T, float]:
        total = sum(self.weights)
        out: dict[T, float] = {}
        for v, w in zip(self.values, self.weights, strict=True):
            out[v] = out.get(v, 0.0) + w / total
        return out


@dataclass(frozen=True)
class IntRange:
    """An integer drawn uniformly from ``lo`` to ``hi``, both included."""

    lo: int
    hi: int
    label: str = "range"

    def __post_init__(self) -> None:
        validate.integer(self.lo, f"{self.label}.lo", 1, 10**9, "1000")
        validate.integer(self.hi, f"{self.label}.hi", 1, 10**9, "6000")
        if self.hi < self.lo:
            raise SpecError(f"{self.label}.hi", f"{self.hi} is below lo = {self.lo}",
                            "give hi >= lo")

    def draw(self, rng: random.Random) -> int:
        return rng.randint(self.lo, self.hi)

    @property
    def mean(self) -> float:
        return (self.lo + self.hi) / 2


@dataclass(frozen=True)
class JobMix:
    """What a drawn job trains (a catalogue name), on how many GPUs, for how long."""

    models: Weighted[str]
    gpus: Weighted[int]
    iterations: IntRange

    def __post_init__(self) -> None:
        for m in self.models.values:
            catalogue.profile(m)
        for g in self.gpus.values:
            validate.integer(g, "mix.gpus", 1, 1 << 20, "8")

    def draw(self, index: int, arrival_s: float, rng: random.Random) -> JobRequest:
        """Job ``index``, named ``j<index>-<model>``: model, GPUs, iterations, in that
        order from ``rng`` (so a trace depends only on the seed and the mix)."""
        model = self.models.draw(rng)
        gpus = self.gpus.draw(rng)
        iterations = self.iterations.draw(rng)
        return catalogue.job_request(model, name=f"j{index}-{model}", arrival_s=arrival_s,
                                     gpus=gpus, iterations=iterations)

    def mean_gpu_seconds(self, link_gbit: float, gpus_per_server: int) -> float:
        """The expected GPU-seconds of one job run alone: GPUs x iterations x (compute +,
        when it spans servers, a 2-server ring all-reduce of its bytes at ``link_gbit``).
        A dedicated-network estimate: contention and wider rings make jobs longer."""
        validate.number(link_gbit, "link_gbit", 0, 10_000, "10", lo_open=True)
        validate.integer(gpus_per_server, "gpus_per_server", 1, 64, "8")
        per_iter = 0.0
        for model, pm in self.models.probabilities().items():
            p = catalogue.profile(model)
            comm = catalogue.ring_allreduce_s(p.gradient_bytes, 2, link_gbit)
            for g, pg in self.gpus.probabilities().items():
                per_iter += pm * pg * g * (p.compute_s + (comm if g > gpus_per_server else 0.0))
        return per_iter * self.iterations.mean


def jobs_per_hour_for_load(load: float, cluster_gpus: int, mix: JobMix, link_gbit: float,
                           gpus_per_server: int) -> float:
    """The arrival rate at which ``mix``'s jobs keep ``load`` of ``cluster_gpus`` busy on
    average (Little's law on GPU-seconds, with :meth:`JobMix.mean_gpu_seconds`)."""
    validate.number(load, "load", 0, 10, "0.9", lo_open=True)
    validate.integer(cluster_gpus, "cluster_gpus", 1, 1 << 24, "64")
    return load * cluster_gpus * 3600.0 / mix.mean_gpu_seconds(link_gbit, gpus_per_server)


def poisson_trace(n: int, jobs_per_hour: float, mix: JobMix, seed: int = 0) -> list[JobRequest]:
    """``n`` jobs with exponential gaps at ``jobs_per_hour`` (the first at 0), each
    drawn from ``mix``; the same ``seed`` gives the same trace."""
    validate.integer(n, "n", 1, 10**7, "160")
    validate.number(jobs_per_hour, "jobs_per_hour", 0, 1e9, "30", lo_open=True)
    return poisson_arrivals(n, jobs_per_hour, random.Random(seed), mix.draw)


# --- CSV ----------------------------------------------------------------------------


def _cell_field(source: str, line: int, row: int, column: str) -> str:
    return f"{source}:{line} (row {row}) column {column}"


def _number(text: str, field: str, lo: float, hi: float, example: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(field, f"{text!r} is not a number",
                        f"write a number, e.g. {example}") from None
    return validate.number(value, field, lo, hi, example)


def _integer(text: str, field: str, lo: int, hi: int, example: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(field, f"{text!r} is not an integer",
                        f"write an integer, e.g. {example}") from None
    return validate.integer(value, field, lo, hi, example)


def _bytes(text: str, field: str) -> float:
    """Gradient bytes as a number (``4.2e8``) or a size (``100MB``), under one cap for
    both forms: at most 1e13, what a job may reduce per iteration (the size form used to
    pass any size here and be refused later, naming a job instead of the cell).  A
    number may have a fraction: the simulator's costs are real numbers, and what
    :func:`format_csv` writes (``repr`` of a float) must read back."""
    try:
        value = float(text)
    except ValueError:
        value = float(validate.parse_bytes(text, field))
    return validate.number(value, field, 0, MAX_GRADIENT_BYTES, "100e6",
                           fix="give at most 1e13 bytes, e.g. 100e6 or 100MB")


def _row(cells: Mapping[str, str], source: str, line: int, row: int,
         seen: set[str], max_gpus: int = MAX_GPUS) -> JobRequest:
    def at(column: str) -> str:
        return _cell_field(source, line, row, column)

    for column in REQUIRED:
        if not cells.get(column, "").strip():
            raise SpecError(at(column), "is empty", f"give the job's {column}")
    name = cells["name"].strip()
    if name in seen:
        raise SpecError(at("name"), f"{name!r} is used by an earlier row",
                        "give every job its own name")
    arrival = _number(cells["arrival_s"].strip(), at("arrival_s"), 0, 1e9, "12.5")
    gpus = _integer(cells["gpus"].strip(), at("gpus"), 1, MAX_GPUS, "8")
    if gpus > max_gpus:
        raise SpecError(at("gpus"), f"{gpus} is more than the cluster's {max_gpus} GPUs",
                        f"ask for at most {max_gpus}, or give [cluster] more servers")
    iterations = _integer(cells["iterations"].strip(), at("iterations"), 1, 10**9, "1000")
    model = cells.get("model", "").strip()
    compute = cells.get("compute_s", "").strip()
    nbytes = cells.get("gradient_bytes", "").strip()
    if model and not compute and not nbytes:
        try:
            p = catalogue.profile(model)
        except SpecError as e:
            raise SpecError(at("model"), e.problem, e.fix) from None
        return JobRequest(name, arrival, gpus, p.compute_s, p.gradient_bytes, iterations,
                          p.name)
    if not compute or not nbytes:
        missing = "compute_s" if not compute else "gradient_bytes"
        given = "a model" if model else "the other cost"
        raise SpecError(at(missing), f"is empty, with {given} given",
                        "give a catalogue model alone, or both compute_s and gradient_bytes")
    compute_s = _number(compute, at("compute_s"), 0, 86_400, "0.2")
    gradient_bytes = _bytes(nbytes, at("gradient_bytes"))
    if compute_s == 0 and gradient_bytes == 0:
        raise SpecError(at("compute_s"), "is 0 and so is gradient_bytes: the job would take "
                        "no time", "give the job a compute time or gradient bytes per "
                        "iteration (or a catalogue model)")
    return JobRequest(name, arrival, gpus, compute_s, gradient_bytes, iterations, model)


def _cells(text: str, where: str) -> list[str]:
    """The cells of one line of CSV.  Strict: a quote left open is refused, not read
    to the line's end (rows are lines here, so a quoted cell cannot hold a line break).
    A NUL byte (a binary file, or text in another encoding) is refused, not kept in a
    job's name."""
    if "\x00" in text:
        raise SpecError(where, "holds a NUL byte (binary data, or UTF-16 text)",
                        "save the trace as UTF-8 text")
    try:
        return next(csv.reader([text], strict=True))
    except csv.Error as err:
        if text.count('"') % 2:
            raise SpecError(where, "has a quoted cell that is not closed on its line (a "
                            "cell cannot hold a line break)",
                            "close the quote on the same line, or take the line break "
                            "out of the cell") from None
        raise SpecError(where, f"is not valid CSV ({err})",
                        'write plain cells, or quote a whole cell: "a,b"') from None


def _separator(header: list[str], where: str) -> None:
    """A header of one column that holds another separator: the file is not comma
    separated (a spreadsheet's export with semicolons or tabs), which is what to say
    rather than "unknown column" for the whole line."""
    if len(header) != 1:
        return
    for sep, name in OTHER_SEPARATORS.items():
        if sep in header[0]:
            raise SpecError(where, f"columns are separated by {name}, not commas",
                            "save the file as CSV with commas between the columns")


def _header(text: str, where: str) -> list[str]:
    header = [c.strip() for c in _cells(text, where)]
    _separator(header, where)
    for column in header:
        if column not in COLUMNS:
            close = difflib.get_close_matches(column, COLUMNS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpecError(f"{where} column {column or '(empty)'}",
                            "unknown column", f"{hint}use columns from: {', '.join(COLUMNS)}")
    if len(set(header)) != len(header):
        dup = next(c for c in header if header.count(c) > 1)
        raise SpecError(f"{where} column {dup}", "appears twice", "name every column once")
    for column in REQUIRED:
        if column not in header:
            raise SpecError(f"{where} column {column}", "is missing",
                            f"add it to the header: {','.join(COLUMNS)}")
    if "model" not in header and not {"compute_s", "gradient_bytes"} <= set(header):
        raise SpecError(f"{where} column model", "is missing",
                        "add model, or both compute_s and gradient_bytes")
    return header


def parse_csv(text: str, source: str = "<trace>", max_gpus: int = MAX_GPUS,
              check_rows: Callable[[int], None] | None = None) -> list[JobRequest]:
    """The jobs of a CSV trace (the module docstring's format), in file order.

    ``max_gpus``: the cluster's GPUs, so that a job too large for it is refused here
    with its line, not later by the simulator naming a job nobody wrote.
    ``check_rows(count)`` sees the number of rows before any is parsed (an experiment's
    memory budget refuses 3,000,000 rows in a second, not after a minute of parsing)."""
    lines = text.splitlines()
    body = [(i + 1, s) for i, s in enumerate(lines) if s.strip() and not s.lstrip().startswith("#")]
    if not body:
        raise SpecError(source, "has no header", f"start it with: {','.join(COLUMNS)}")
    header_line, header_text = body[0]
    header = _header(header_text, f"{source}:{header_line}")
    if len(body) == 1:
        raise SpecError(source, "has a header and no rows",
                        "add a job per line under the header, e.g. j0,0,resnet50,,,4,1000")
    if check_rows is not None:
        check_rows(len(body) - 1)
    out: list[JobRequest] = []
    seen: set[str] = set()
    for row, (line, row_text) in enumerate(body[1:], start=1):
        values = _cells(row_text, f"{source}:{line} (row {row})")
        if len(values) != len(header):
            raise SpecError(f"{source}:{line} (row {row})",
                            f"has {len(values)} cells for {len(header)} columns",
                            "give one cell per column (empty cells still need their comma)")
        req = _row(dict(zip(header, values, strict=True)), source, line, row, seen, max_gpus)
        seen.add(req.name)
        out.append(req)
    return out


def decode(data: bytes, source: str) -> str:
    """A trace's bytes as text: UTF-8, a leading byte-order mark (what Windows editors
    write) dropped; other bytes are one line naming the line and the byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise SpecError(f"{source}:{line}", f"is not UTF-8 text (byte 0x{data[err.start]:02x} "
                        f"at offset {err.start})", "save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def read_csv(path: str | Path, max_gpus: int = MAX_GPUS,
             check_rows: Callable[[int], None] | None = None,
             field: str | None = None) -> list[JobRequest]:
    """The jobs of the CSV trace at ``path`` (:func:`parse_csv`); a path that is not a
    readable regular file, or one too large to hold in memory, is refused on ``field``
    (default: the path) before it is opened."""
    p = Path(path)
    field = field or str(p)
    fix = "give a readable CSV file"
    inputfile.regular_file(p, field, "a CSV file", fix)
    size = p.stat().st_size
    validate.within_memory(size * TEXT_MEMORY_FACTOR, field,
                           f"{p.name} ({validate.fmt_bytes(size)}) read as text would",
                           "split the trace, or run fewer of its jobs")
    return parse_csv(decode(inputfile.read_bytes(p, field, fix), p.name), p.name, max_gpus,
                     check_rows)


def format_csv(requests: Sequence[JobRequest]) -> str:
    """The CSV text of ``requests``: every row with its explicit costs and its model
    label (if any), so that the file needs no catalogue to be read back."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for r in requests:
        w.writerow([r.name, repr(r.arrival_s), r.model, repr(r.compute_s),
                    repr(r.gradient_bytes), r.gpus, r.iterations])
    return buf.getvalue()


def write_csv(requests: Sequence[JobRequest], path: str | Path) -> None:
    Path(path).write_text(format_csv(requests), encoding="utf-8")


def mean_gap_s(requests: Sequence[JobRequest]) -> float:
    """The mean gap between consecutive arrivals (NaN with fewer than two jobs)."""
    times = sorted(r.arrival_s for r in requests)
    return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else math.nan
