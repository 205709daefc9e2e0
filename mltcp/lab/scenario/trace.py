"""The one trace format that every backend writes (fluid model, ns-3, netns testbed, real hosts).

Results are only comparable side by side if every backend records the same
things with the same meaning, and :mod:`mltcp.lab.scenario.metrics` computes every number
from this format alone.  A trace is what happened in one run of one scenario
under one scheme on one backend:

* per job, one :class:`IterationRecord` per training iteration, with the
  compute/communication boundaries the overlap and convergence metrics need;
* per link, periodic :class:`LinkSample` s (throughput, queue, cumulative ECN
  marks and drops) for utilisation and congestion signals;
* where the numbers came from (:func:`provenance`) and the scheme's parameters;
* optionally, per connection, periodic :class:`FlowSample` s of its congestion
  window, where the backend sees them (ns-3).

Times are seconds since the run's t0 (the backend picks t0, normally the start
of the first iteration).  The JSON form carries ``"schema": "mltcp.trace/1"``;
loading any other schema fails rather than silently misreading a newer or older
trace.  Construction validates every field, so a trace that loads is one the
metrics can trust; errors name the field by its JSON path
(``jobs[0].iterations[3].comm_start``).

Backend names are free text; the conventional ones are ``fluid``, ``ns3``,
``netns`` and ``host``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, overload

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError
from mltcp.lab.common import atomic

T = TypeVar("T")
S = TypeVar("S")

SCHEMA = "mltcp.trace/1"

# --------------------------------------------------------------------------- validation helpers


@contextmanager
def _within(prefix: str) -> Iterator[None]:
    """Prefix the field of a SpecError raised inside, so nested errors name their JSON path."""
    try:
        yield
    except SpecError as err:
        where = f"{prefix}.{err.field}" if err.field else prefix
        raise SpecError(where, err.problem, err.fix) from None


def _number(name: str, value: Any) -> float:
    return validate.finite(value, name, "give a finite number of seconds/bits")


def _count(name: str, value: Any) -> int:
    return validate.at_least(value, name, 0, "give a count >= 0")


_INT64_MAX = 2**63 - 1


def _counter(name: str, value: Any) -> int:
    """A sample's count: also below 2**63, since the metrics read samples as 64-bit
    columns (a larger count loaded once, then broke the report with an OverflowError)."""
    count = _count(name, value)
    if count > _INT64_MAX:
        raise SpecError(name, f"must be < 2**63 (got {count})",
                        "give a count >= 0 that fits in 64 bits")
    return count


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(name, f"{value!r} is not a non-empty string", "give a name")
    return value


def _json_dict(name: str, value: Any) -> dict:
    if not isinstance(value, Mapping):
        raise SpecError(name, f"{type(value).__name__} is not a mapping", "give a JSON object")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise SpecError(name, f"not JSON-serialisable ({err})",
                        "keep only str keys and str/number/bool/None/list/dict values") from None
    return dict(value)


def _fields(name: str, data: Any, keys: tuple[str, ...],
            optional: tuple[str, ...] = ()) -> dict:
    """The keys of a JSON object: every one of ``keys`` present, ``optional`` ones
    allowed, none unknown (a typo must not pass silently)."""
    if not isinstance(data, Mapping):
        raise SpecError(name, f"{type(data).__name__} is not a JSON object",
                        f"give an object with keys {', '.join(keys)}")
    missing = [k for k in keys if k not in data]
    if missing:
        where = f"{name}.{missing[0]}" if name else missing[0]
        raise SpecError(where, "missing", f"add {missing[0]!r} (keys: {', '.join(keys)})")
    unknown = sorted(set(data) - set(keys) - set(optional))
    if unknown:
        where = f"{name}.{unknown[0]}" if name else unknown[0]
        raise SpecError(where, "unknown key", "remove it or put it in provenance/params "
                        f"(keys: {', '.join(keys + optional)})")
    return dict(data)


def _each(name: str, value: Any, parse: Callable[[Any], T]) -> tuple[T, ...]:
    """Parse every element of the JSON array ``name``; an error names ``name[i]``."""
    out = []
    for i, item in enumerate(_list(name, value)):
        with _within(f"{name}[{i}]"):
            out.append(parse(item))
    return tuple(out)


def _list(name: str, value: Any) -> list:
    if not isinstance(value, (list, tuple)):
        raise SpecError(name, f"{type(value).__name__} is not a list", "give a JSON array")
    return list(value)


def _records(name: str, value: Any, cls: type[T], key: str, what: str) -> tuple[T, ...]:
    """The ``cls`` instances of the array ``name``, each with a unique ``key``."""
    items = tuple(_list(name, value))
    seen: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, cls):
            raise SpecError(f"{name}[{i}]", f"{type(item).__name__} is not a {cls.__name__}",
                            f"build it with {cls.__name__}(...)")
        if getattr(item, key) in seen:
            raise SpecError(f"{name}[{i}].{key}", f"{getattr(item, key)!r} is used twice",
                            f"give every {what} a unique {key}")
        seen.add(getattr(item, key))
    return items


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class IterationRecord:
    """One training iteration of one job: compute then communication, seconds since t0.

    ``[start, comm_start)`` is compute, ``[comm_start, comm_end]`` communication
    (what overlap is measured on), ``(comm_end, end)`` any tail before the next
    iteration.  ``bytes`` is what the job sent in this iteration.

    ``phases``, optional: for iterations with several communication phases (model
    parallelism: compute, communicate, compute, communicate ...), each phase's
    ``(start, end)``, in order, disjoint, within ``[comm_start, comm_end]``; the
    compute gaps between them are not communication (overlap and throughput use
    the phases).  None means one phase, ``[comm_start, comm_end]``.

    Optional, where the backend can see them (netns and real hosts: TCP_INFO of the
    job's sending sockets): ``retransmits``, the segments the job retransmitted in
    this iteration, and ``rtos``, how many retransmission timeouts fired among them
    (one timeout costs at least the 200 ms minimum RTO on Linux, i.e. often a whole
    iteration).  They explain slow iterations; no metric depends on them.
    """

    index: int
    start: float
    comm_start: float
    comm_end: float
    end: float
    bytes: int
    retransmits: int | None = None
    rtos: int | None = None
    phases: tuple[tuple[float, float], ...] | None = None

    def __post_init__(self) -> None:
        _count("index", self.index)
        _count("bytes", self.bytes)
        for name in ("retransmits", "rtos"):
            if getattr(self, name) is not None:
                _count(name, getattr(self, name))
        for name in ("start", "comm_start", "comm_end", "end"):
            object.__setattr__(self, name, _number(name, getattr(self, name)))
        order = "times must satisfy start <= comm_start <= comm_end <= end (seconds since t0)"
        if self.comm_start < self.start:
            raise SpecError("comm_start", f"{self.comm_start} is before start {self.start}", order)
        if self.comm_end < self.comm_start:
            raise SpecError("comm_end", f"{self.comm_end} is before comm_start "
                            f"{self.comm_start}", order)
        if self.end < self.comm_end:
            raise SpecError("end", f"{self.end} is before comm_end {self.comm_end}", order)
        if self.phases is not None:
            object.__setattr__(self, "phases", self._checked_phases())

    def _checked_phases(self) -> tuple[tuple[float, float], ...]:
        fix = ("list each communication phase as [start, end], in time order, without "
               "overlaps, within [comm_start, comm_end]")
        out = []
        prev = self.comm_start
        for i, pair in enumerate(_list("phases", self.phases)):
            pair = _list(f"phases[{i}]", pair)
            if len(pair) != 2:
                raise SpecError(f"phases[{i}]", f"{pair!r} is not [start, end]", fix)
            a, b = (_number(f"phases[{i}]", v) for v in pair)
            if a < prev or b < a or b > self.comm_end:
                raise SpecError(f"phases[{i}]", f"[{a}, {b}] is out of order or outside "
                                f"[{self.comm_start}, {self.comm_end}]", fix)
            out.append((a, b))
            prev = b
        if not out:
            raise SpecError("phases", "empty", "omit phases for a single phase")
        return tuple(out)

    def comm_phases(self) -> tuple[tuple[float, float], ...]:
        """The communication intervals of this iteration (one unless ``phases`` is set)."""
        return self.phases if self.phases is not None else ((self.comm_start, self.comm_end),)

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def comm_duration(self) -> float:
        """Time spent communicating: the phases' lengths, without compute gaps."""
        return sum(b - a for a, b in self.comm_phases())

    def to_dict(self) -> dict:
        out = {"index": self.index, "start": self.start, "comm_start": self.comm_start,
               "comm_end": self.comm_end, "end": self.end, "bytes": self.bytes}
        for name in ("retransmits", "rtos"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.phases is not None:
            out["phases"] = [list(p) for p in self.phases]
        return out

    @classmethod
    def from_dict(cls, data: Any) -> IterationRecord:
        d = _fields("", data, ("index", "start", "comm_start", "comm_end", "end", "bytes"),
                    optional=("retransmits", "rtos", "phases"))
        if d.get("phases") is not None:
            d["phases"] = tuple(tuple(p) if isinstance(p, list | tuple) else p
                                for p in _list("phases", d["phases"]))
        return cls(**d)


@dataclass(frozen=True)
class JobTrace:
    """One job's iterations, and the links its traffic crosses.

    ``links`` decides who can interfere: two jobs overlap only if they share a
    link id, so a job must name at least one (an empty list would make it look
    perfectly interleaved).  Iterations are in order: indices strictly
    increasing (gaps allowed, e.g. a lost record) and starts non-decreasing.
    """

    name: str
    links: tuple[str, ...]
    iterations: tuple[IterationRecord, ...]

    def __post_init__(self) -> None:
        _text("name", self.name)
        links = tuple(_list("links", self.links))
        if not links:
            raise SpecError("links", "empty",
                            "list the ids of the links the job's traffic crosses, "
                            "e.g. ['bottleneck']")
        for i, link in enumerate(links):
            _text(f"links[{i}]", link)
        if len(set(links)) != len(links):
            raise SpecError("links", f"{list(links)} repeats an id", "list each link once")
        object.__setattr__(self, "links", links)
        iterations = tuple(_list("iterations", self.iterations))
        for i, rec in enumerate(iterations):
            if not isinstance(rec, IterationRecord):
                raise SpecError(f"iterations[{i}]", f"{type(rec).__name__} is not an "
                                "IterationRecord", "build it with IterationRecord(...)")
        for i, (a, b) in enumerate(zip(iterations, iterations[1:], strict=False), start=1):
            if b.index <= a.index:
                raise SpecError(f"iterations[{i}].index", f"{b.index} does not follow {a.index}",
                                "list iterations in order with strictly increasing indices")
            if b.start < a.start:
                raise SpecError(f"iterations[{i}].start", f"{b.start} is before the previous "
                                f"iteration's start {a.start}", "list iterations in time order")
        object.__setattr__(self, "iterations", iterations)

    def comm_intervals(self) -> list[tuple[float, float]]:
        """Every communication interval, in order: ``(comm_start, comm_end)`` of each
        iteration, or its phases where it has several."""
        return [iv for r in self.iterations for iv in r.comm_phases()]

    def iteration_times(self) -> np.ndarray:
        """``end - start`` of every iteration, seconds, in order."""
        return np.array([r.end - r.start for r in self.iterations], dtype=float)

    def to_dict(self) -> dict:
        return {"name": self.name, "links": list(self.links),
                "iterations": [r.to_dict() for r in self.iterations]}

    @classmethod
    def from_dict(cls, data: Any) -> JobTrace:
        d = _fields("", data, ("name", "links", "iterations"))
        return cls(name=d["name"], links=tuple(_list("links", d["links"])),
                   iterations=_json_iterations(d["iterations"]))


_TIMES = ("start", "comm_start", "comm_end", "end")
_PLAIN_RECORD = ("index", "start", "comm_start", "comm_end", "end", "bytes")


def _json_iterations(value: Any) -> tuple[IterationRecord, ...]:
    """The records of a JSON array of iterations, checked a column at a time where
    every record is plain (its six required fields, plain numbers): a long run has
    tens of thousands.  Refuses exactly what ``IterationRecord.from_dict`` refuses,
    with its words, as :func:`_json_samples` does for samples; records with optional
    fields (loss counters, phases) are read one by one, as before."""
    if type(value) in (list, tuple):
        records = _plain_iterations(value)
        if records is not None:
            return records
    return _each("iterations", value, IterationRecord.from_dict)


def _plain_iterations(items: list | tuple) -> tuple[IterationRecord, ...] | None:
    """``items`` as records if each is a plain JSON object with exactly the required
    fields of a valid record; None if one is not and ``IterationRecord.from_dict``
    accepts it anyway (e.g. it has loss counters).  ``ok`` as in :func:`_plain_columns`."""
    n = len(items)
    fields = tuple((name, float if name in _TIMES else int) for name in _PLAIN_RECORD)
    values, ok = _leading_values(items, fields)
    for name, kind in fields:
        column = values[name][:ok]
        if kind is int and column and min(column) < 0:
            ok = next(i for i, v in enumerate(column) if v < 0)
    times = {}
    for name in _TIMES:
        column = values[name][:ok]
        try:
            times[name] = np.array(column, dtype=np.float64)
        except OverflowError:       # an int beyond a float
            ok = next(i for i, v in enumerate(column) if not _fits(v, float))
            times[name] = np.array(column[:ok], dtype=np.float64)
    m = min(len(t) for t in times.values())
    start, comm_start, comm_end, end = (times[name][:m] for name in _TIMES)
    bad = ~(np.isfinite(start) & np.isfinite(comm_start) & np.isfinite(comm_end)
            & np.isfinite(end))
    bad |= (comm_start < start) | (comm_end < comm_start) | (end < comm_end)
    if bad.any():
        ok = min(ok, int(np.argmax(bad)))
    if ok < n:
        with _within(f"iterations[{ok}]"):
            IterationRecord.from_dict(items[ok])
        return None
    out = []
    for index, t0, t1, t2, t3, size in zip(values["index"], start.tolist(),
                                           comm_start.tolist(), comm_end.tolist(),
                                           end.tolist(), values["bytes"], strict=True):
        rec = object.__new__(IterationRecord)
        rec.__dict__.update(index=index, start=t0, comm_start=t1, comm_end=t2, end=t3,
                            bytes=size, retransmits=None, rtos=None, phases=None)
        out.append(rec)
    return tuple(out)


@dataclass(frozen=True)
class LinkSample:
    """One periodic sample of a link at time ``t`` (seconds since t0).

    ``throughput_bps`` is the bits per second the link carried over the
    sampling period ending at ``t``; ``queue_bytes`` the backlog at ``t``.
    ``ecn_marks`` and ``drops`` are CUMULATIVE counters: their differences
    between two instants are the marks/drops in between, so a missed sample
    loses resolution but never events.  Their baseline does not matter (the
    metrics only take differences; a run's totals count from its first sample).
    """

    t: float
    throughput_bps: float
    queue_bytes: int
    ecn_marks: int
    drops: int

    # The fields in order, each a float (finite) or a count (an int >= 0), and the
    # floats that may not be negative: what Samples checks a column at a time, and
    # must refuse exactly where __post_init__ does.
    _COLUMNS: ClassVar[tuple[tuple[str, type], ...]] = (
        ("t", float), ("throughput_bps", float), ("queue_bytes", int), ("ecn_marks", int),
        ("drops", int))
    _NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset({"throughput_bps"})

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", _number("t", self.t))
        bps = _number("throughput_bps", self.throughput_bps)
        if bps < 0:
            raise SpecError("throughput_bps", f"{bps} is negative", "give a rate >= 0")
        object.__setattr__(self, "throughput_bps", bps)
        for name in ("queue_bytes", "ecn_marks", "drops"):
            _counter(name, getattr(self, name))

    def to_dict(self) -> dict:
        return {"t": self.t, "throughput_bps": self.throughput_bps,
                "queue_bytes": self.queue_bytes, "ecn_marks": self.ecn_marks,
                "drops": self.drops}

    @classmethod
    def from_dict(cls, data: Any) -> LinkSample:
        return cls(**_fields("", data, ("t", "throughput_bps", "queue_bytes", "ecn_marks",
                                        "drops")))


@dataclass(frozen=True)
class FlowSample:
    """One connection's congestion window (bytes) at time ``t`` (seconds since t0)."""

    t: float
    cwnd_bytes: int

    _COLUMNS: ClassVar[tuple[tuple[str, type], ...]] = (("t", float), ("cwnd_bytes", int))
    _NON_NEGATIVE: ClassVar[frozenset[str]] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", _number("t", self.t))
        _counter("cwnd_bytes", self.cwnd_bytes)

    def to_dict(self) -> dict:
        return {"t": self.t, "cwnd_bytes": self.cwnd_bytes}

    @classmethod
    def from_dict(cls, data: Any) -> FlowSample:
        return cls(**_fields("", data, ("t", "cwnd_bytes")))


# --------------------------------------------------------------------------- sample columns

_DTYPES = {float: np.float64, int: np.int64}
# The exact types of a plain JSON number: bool is an int to Python but never a number
# here, and anything else (a float subclass such as numpy's) goes the object path,
# which says exactly what it accepts.
_PLAIN = {float: frozenset({float, int}), int: frozenset({int})}


def _sample(cls: type[S], values: Iterator[Any] | tuple) -> S:
    """A sample from values already checked (taken from a Samples' columns): made
    without __post_init__, which is what made loading cost a check per field."""
    obj = object.__new__(cls)
    obj.__dict__.update(zip((name for name, _ in cls._COLUMNS), values, strict=True))  # type: ignore[attr-defined]
    return obj


class Samples(Sequence[S]):
    """The samples of one link or connection, held as one read-only array per field.

    The metrics read a link's samples as columns (a window's mean throughput, a
    counter at an instant), and a long run has hundreds of thousands of them:
    making and checking one object per sample was most of a report's time.  So
    the samples are checked and kept a column at a time, and an object is made
    only for a sample a caller asks for.  They read as the tuple they replace:
    ``len``, indexing (a slice gives a tuple), iteration, and equality with other
    ``Samples`` or with a tuple of equal samples.  Made only by this module,
    from checked samples (``_object_samples``, ``_json_samples``).
    """

    __slots__ = ("_cls", "_columns", "_records", "_n")

    def __init__(self, cls: type[S], columns: dict[str, np.ndarray],
                 records: tuple[S, ...] | None = None) -> None:
        for column in columns.values():
            column.setflags(write=False)
        self._cls = cls
        self._columns = columns
        self._records = records
        self._n = len(columns["t"])

    def column(self, name: str) -> np.ndarray:
        """One field of every sample (read-only): floats for times and rates, int64 for
        counts."""
        return self._columns[name]

    def _all(self) -> tuple[S, ...]:
        """Every sample as an object, made once (on the first iteration or comparison)."""
        if self._records is None:
            rows = zip(*(self._columns[name].tolist() for name, _ in self._cls._COLUMNS),  # type: ignore[attr-defined]
                       strict=True)
            self._records = tuple(_sample(self._cls, row) for row in rows)
        return self._records

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> S: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[S, ...]: ...

    def __getitem__(self, index: int | slice) -> S | tuple[S, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(self._n)[index])
        i = operator.index(index)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("sample index out of range")
        if self._records is not None:
            return self._records[i]
        return _sample(self._cls, (kind(self._columns[name][i])
                                   for name, kind in self._cls._COLUMNS))  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[S]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Samples):
            return (self._cls is other._cls and self._n == other._n
                    and all(np.array_equal(self._columns[name], other._columns[name])
                            for name in self._columns))
        if isinstance(other, tuple):
            return self._all() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())       # a tuple of equal samples hashes the same

    def __repr__(self) -> str:
        if self._n <= 6:
            return repr(self._all())
        t = self._columns["t"]
        return f"<{self._n} {self._cls.__name__}s, t = {t[0]} .. {t[-1]}>"

    def __reduce__(self) -> tuple:
        return (Samples, (self._cls, {k: np.array(v) for k, v in self._columns.items()}))


def _object_samples(cls: type[S], value: Any) -> Samples[S]:
    """The ``Samples`` of a list of ``cls`` objects (each checked when it was made) or
    of a ``Samples`` of them, for a trace built in code."""
    if isinstance(value, Samples):
        if value._cls is cls:
            return value
        value = tuple(value)           # another kind's: refused below, sample by sample
    items = tuple(_list("samples", value))
    if set(map(type, items)) - {cls}:
        for i, s in enumerate(items):
            if not isinstance(s, cls):
                raise SpecError(f"samples[{i}]", f"{type(s).__name__} is not a {cls.__name__}",
                                f"build it with {cls.__name__}(...)")
    columns = {name: np.fromiter(map(operator.attrgetter(name), items), _DTYPES[kind],
                                 count=len(items))
               for name, kind in cls._COLUMNS}  # type: ignore[attr-defined]
    return Samples(cls, columns, items)


def _array_samples(cls: type[S], columns: Mapping[str, Any]) -> Samples[S]:
    """The ``Samples`` of numpy columns (a backend's samples, never made as objects: a
    cluster-size run has millions), checked as the objects would be: a value they would
    refuse is refused by making that sample's object, which names the field."""
    names = [name for name, _ in cls._COLUMNS]  # type: ignore[attr-defined]
    if set(columns) != set(names):
        raise SpecError("samples", f"columns {', '.join(sorted(columns))}",
                        f"give the columns {', '.join(names)}")
    out = {name: np.array(columns[name], dtype=_DTYPES[kind])
           for name, kind in cls._COLUMNS}  # type: ignore[attr-defined]
    n = len(out["t"])
    bad = np.zeros(n, dtype=bool)
    for name, kind in cls._COLUMNS:  # type: ignore[attr-defined]
        column = out[name]
        if column.shape != (n,):
            raise SpecError(f"samples.{name}", f"shape {column.shape}",
                            f"give {n} values, one per sample")
        if kind is float:
            bad |= ~np.isfinite(column)
        if kind is int or name in cls._NON_NEGATIVE:  # type: ignore[attr-defined]
            bad |= column < 0
    if bad.any():
        i = int(np.argmax(bad))
        with _within(f"samples[{i}]"):
            cls(*(kind(out[name][i]) for name, kind in cls._COLUMNS))  # type: ignore[attr-defined]
    return Samples(cls, out)


def _json_samples(cls: type[S], value: Any) -> Samples[S]:
    """The ``Samples`` of a JSON array of sample objects, checked a column at a time.

    Refuses exactly what ``cls.from_dict`` refuses, with its words: where the columns
    show a sample they cannot vouch for, that sample is read by ``cls.from_dict``,
    which names the field; should it read it after all (an exotic number type), every
    sample is read one by one, as before."""
    if type(value) in (list, tuple):
        columns = _plain_columns(cls, value)
        if columns is not None:
            return Samples(cls, columns)
    return _object_samples(cls, _each("samples", value, cls.from_dict))  # type: ignore[attr-defined]


def _plain_columns(cls: type, items: list | tuple) -> dict[str, np.ndarray] | None:
    """The columns of ``items`` if every one is a plain JSON object with exactly the
    fields of ``cls``, each a plain number that ``cls`` accepts; None if one is not
    and ``cls.from_dict`` accepts it anyway.

    ``ok`` counts the leading samples vouched for: each check that finds a problem
    lowers it to the first sample with that problem, so the one ``cls.from_dict``
    then reads is the first that checking one by one would have refused."""
    n = len(items)
    leading, ok = _leading_values(items, cls._COLUMNS)
    columns = {}
    for name, kind in cls._COLUMNS:
        values = leading[name][:ok]
        try:
            column = np.array(values, dtype=_DTYPES[kind])
        except OverflowError:       # an int beyond a float, or beyond 64 bits
            ok = next(i for i, v in enumerate(values) if not _fits(v, kind))
            column = np.array(values[:ok], dtype=_DTYPES[kind])
        bad = ~np.isfinite(column) if kind is float else column < 0
        if name in cls._NON_NEGATIVE:
            bad |= column < 0
        if bad.any():
            ok = min(ok, int(np.argmax(bad)))
        columns[name] = column
    if ok == n:
        return columns
    with _within(f"samples[{ok}]"):
        cls.from_dict(items[ok])
    return None


def _leading_values(items: list | tuple, fields: tuple[tuple[str, type], ...]
                    ) -> tuple[dict[str, list], int]:
    """Per field, its values over the leading items that are plain JSON objects with
    exactly ``fields``, each value of its field's plain JSON type; and ``ok``, how many
    items lead so (each problem found lowers it to the first item with it)."""
    n = len(items)
    ok = n
    if set(map(type, items)) - {dict} or set(map(len, items)) - {len(fields)}:
        ok = next(i for i, d in enumerate(items) if type(d) is not dict or len(d) != len(fields))
    values: dict[str, list] = {}
    for name, kind in fields:
        head = items if ok == n else items[:ok]
        try:
            column = list(map(operator.itemgetter(name), head))
        except KeyError:
            ok = next(i for i, d in enumerate(head) if name not in d)
            column = list(map(operator.itemgetter(name), head[:ok]))
        if set(map(type, column)) - _PLAIN[kind]:
            ok = next(i for i, v in enumerate(column) if type(v) not in _PLAIN[kind])
            del column[ok:]
        values[name] = column
    return values, ok


def _fits(value: int | float, kind: type) -> bool:
    """Whether a plain JSON number converts to ``kind``'s column type."""
    if kind is int:
        return -(2**63) <= value <= _INT64_MAX
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _check_order(samples: Samples, counters: tuple[str, ...]) -> None:
    """Samples in time order, with cumulative ``counters`` that never fall: compared a
    column at a time; the first sample out of order is named as comparing the samples
    one pair at a time named it (its time before its counters, in field order)."""
    t = samples.column("t")
    bad = t[1:] < t[:-1]
    for name in counters:
        column = samples.column(name)
        bad |= column[1:] < column[:-1]
    if not bad.any():
        return
    i = int(np.argmax(bad)) + 1
    a, b = samples[i - 1], samples[i]
    if b.t < a.t:
        raise SpecError(f"samples[{i}].t", f"{b.t} is before the previous sample's "
                        f"{a.t}", "list samples in time order")
    for name in counters:
        if getattr(b, name) < getattr(a, name):
            raise SpecError(f"samples[{i}].{name}",
                            f"cumulative counter fell from {getattr(a, name)} to "
                            f"{getattr(b, name)}",
                            "record running totals since the run started "
                            "(add back the total before a counter reset)")


@dataclass(frozen=True)
class LinkTrace:
    """Samples of one link, in time order, with its capacity in bits per second.

    Cumulative counters may not decrease (a backend whose counters reset must
    add the previous total back), since a decrease would read as negative marks.
    ``samples`` may be given as any list of :class:`LinkSample`; it is kept as
    :class:`Samples` (columns, read like a tuple).
    """

    id: str
    capacity_bps: float
    samples: Sequence[LinkSample]

    def __post_init__(self) -> None:
        _text("id", self.id)
        cap = _number("capacity_bps", self.capacity_bps)
        if cap <= 0:
            raise SpecError("capacity_bps", f"{cap} is not positive",
                            "give the link rate in bits per second, e.g. 1e9")
        object.__setattr__(self, "capacity_bps", cap)
        samples = _object_samples(LinkSample, self.samples)
        _check_order(samples, ("ecn_marks", "drops"))
        object.__setattr__(self, "samples", samples)

    @classmethod
    def of_columns(cls, id: str, capacity_bps: float, **columns: Any) -> LinkTrace:
        """A link's samples given as one array per :class:`LinkSample` field (``t``,
        ``throughput_bps``, ``queue_bytes``, ``ecn_marks``, ``drops``), checked as the
        samples would be, without making an object per sample."""
        return cls(id, capacity_bps, _array_samples(LinkSample, columns))

    def times(self) -> np.ndarray:
        """The samples' times (read-only)."""
        return self.column("t")

    def column(self, name: str) -> np.ndarray:
        """One field of every sample as a read-only array (``t``, ``throughput_bps`` as
        floats; ``queue_bytes``, ``ecn_marks``, ``drops`` as integers), kept with the
        trace: the report reads them once per iteration window of every job, and
        rebuilding them each time made its cost iterations x samples."""
        return self.samples.column(name)  # type: ignore[attr-defined]

    def to_dict(self) -> dict:
        return {"id": self.id, "capacity_bps": self.capacity_bps,
                "samples": _sample_dicts(self.samples)}

    @classmethod
    def from_dict(cls, data: Any) -> LinkTrace:
        d = _fields("", data, ("id", "capacity_bps", "samples"))
        return cls(id=d["id"], capacity_bps=d["capacity_bps"],
                   samples=_json_samples(LinkSample, d["samples"]))


def _sample_dicts(samples: Sequence) -> list[dict]:
    """The JSON objects of ``samples``, from the columns (Python floats and ints, as
    the objects' ``to_dict`` would give) without making an object per sample."""
    names = [name for name, _ in samples._cls._COLUMNS]  # type: ignore[attr-defined]
    columns = [samples.column(name).tolist() for name in names]  # type: ignore[attr-defined]
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


@dataclass(frozen=True)
class FlowTrace:
    """Samples of one connection of a job, in time order: what its congestion control
    did, for comparing an MLTCP variant's window with its standard algorithm's.

    ``id`` names the connection (``"a/0.1"``: job a, worker 0, connection 1);
    ``src``/``dst`` are its hosts.  Optional in a trace: backends that see windows
    (ns-3) record them.  ``samples`` is kept as :class:`Samples`, like a link's.
    """

    id: str
    job: str
    src: str
    dst: str
    samples: Sequence[FlowSample]

    def __post_init__(self) -> None:
        for name in ("id", "job", "src", "dst"):
            _text(name, getattr(self, name))
        samples = _object_samples(FlowSample, self.samples)
        _check_order(samples, ())
        object.__setattr__(self, "samples", samples)

    def to_dict(self) -> dict:
        return {"id": self.id, "job": self.job, "src": self.src, "dst": self.dst,
                "samples": _sample_dicts(self.samples)}

    @classmethod
    def from_dict(cls, data: Any) -> FlowTrace:
        d = _fields("", data, ("id", "job", "src", "dst", "samples"))
        return cls(id=d["id"], job=d["job"], src=d["src"], dst=d["dst"],
                   samples=_json_samples(FlowSample, d["samples"]))


@dataclass(frozen=True)
class Trace:
    """One run: a scenario under a scheme on a backend with a seed.

    ``provenance`` says where the numbers came from (see :func:`provenance`);
    ``params`` holds the scheme's parameters (slope, intercept, ...), so two
    traces that differ only in parameters are told apart.  Job names and link
    ids are unique; a job's links need not all be sampled in ``links``.
    """

    scenario: str
    scheme: str
    backend: str
    seed: int
    jobs: tuple[JobTrace, ...]
    links: tuple[LinkTrace, ...] = ()
    provenance: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    flows: tuple[FlowTrace, ...] = ()

    def __post_init__(self) -> None:
        for name in ("scenario", "scheme", "backend"):
            _text(name, getattr(self, name))
        if not validate.is_integer(self.seed):
            raise SpecError("seed", f"{self.seed!r} is not an integer", "give the run's seed")
        jobs = _records("jobs", self.jobs, JobTrace, "name", "job")
        if not jobs:
            raise SpecError("jobs", "empty", "record at least one job's iterations")
        links = _records("links", self.links, LinkTrace, "id", "link")
        flows = _records("flows", self.flows, FlowTrace, "id", "flow")
        names = [j.name for j in jobs]
        for i, flow in enumerate(flows):
            if flow.job not in names:
                raise SpecError(f"flows[{i}].job", f"{flow.job!r} is not a job of this trace",
                                f"use one of {', '.join(names)}")
        object.__setattr__(self, "jobs", jobs)
        object.__setattr__(self, "links", links)
        object.__setattr__(self, "flows", flows)
        object.__setattr__(self, "provenance", _json_dict("provenance", self.provenance))
        object.__setattr__(self, "params", _json_dict("params", self.params))

    def job(self, name: str) -> JobTrace:
        for job in self.jobs:
            if job.name == name:
                return job
        raise SpecError("job", f"no job named {name!r} in this trace",
                        f"use one of {', '.join(j.name for j in self.jobs)}")

    def link(self, link_id: str) -> LinkTrace:
        for link in self.links:
            if link.id == link_id:
                return link
        raise SpecError("link", f"no link {link_id!r} sampled in this trace",
                        f"use one of {', '.join(ln.id for ln in self.links) or '(none)'}")

    def to_dict(self, parts: bool = True) -> dict:
        """The JSON document; ``parts=False``: without its jobs, links and flows."""
        out = {"schema": SCHEMA, "scenario": self.scenario, "scheme": self.scheme,
               "backend": self.backend, "seed": self.seed,
               "provenance": self.provenance, "params": self.params}
        if parts:
            out["jobs"] = [j.to_dict() for j in self.jobs]
            out["links"] = [ln.to_dict() for ln in self.links]
            if self.flows:
                out["flows"] = [f.to_dict() for f in self.flows]
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Trace:
        keys = ("schema", "scenario", "scheme", "backend", "seed", "jobs", "links",
                "provenance", "params")
        if not isinstance(data, Mapping):
            raise SpecError("trace", f"{type(data).__name__} is not a JSON object",
                            "give the object written by Trace.to_dict/Trace.save")
        if data.get("schema") != SCHEMA:
            raise SpecError("schema", f"{data.get('schema')!r} is not {SCHEMA!r}",
                            f"load it with the mltcp version that wrote it, or convert it to "
                            f"{SCHEMA}")
        d = _fields("", data, keys, optional=("flows",))
        return cls(scenario=d["scenario"], scheme=d["scheme"], backend=d["backend"],
                   seed=d["seed"], jobs=_each("jobs", d["jobs"], JobTrace.from_dict),
                   links=_each("links", d["links"], LinkTrace.from_dict),
                   provenance=d["provenance"], params=d["params"],
                   flows=_each("flows", d.get("flows", []), FlowTrace.from_dict))

    def save(self, path: str | Path) -> Path:
        """Write the trace as JSON (strict: no NaN/Infinity, which other tools cannot read),
        atomically: a run killed while saving leaves the previous file or none, never a
        prefix that the next report would have to refuse.

        Written a job, link and flow at a time (:meth:`json_chunks`): the JSON objects of
        a cluster-size run's millions of samples, made at once, were gigabytes."""
        with atomic.replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for chunk in self.json_chunks():
                fh.write(chunk)
        return Path(path)

    def json_chunks(self) -> Iterator[str]:
        """The text of ``json.dumps(self.to_dict())`` (the same document), in pieces of
        one job, link or flow each, strict JSON."""
        text = json.dumps(self.to_dict(parts=False), indent=1, allow_nan=False)
        yield text[:-2]                       # without its closing "\n}"
        parts: list[tuple[str, Sequence[Any]]] = [("jobs", self.jobs), ("links", self.links)]
        if self.flows:
            parts.append(("flows", self.flows))
        for name, items in parts:
            yield f',\n "{name}": ['
            for i, item in enumerate(items):
                yield ("," if i else "") + "\n  " + json.dumps(item.to_dict(), allow_nan=False)
            yield "\n ]"
        yield "\n}\n"


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :meth:`Trace.save`.

    Any problem is one SpecError naming the file, since a report reads a directory of
    them: an unreadable file or one that is not JSON (``traces/x.json: is not JSON
    (...)``), and a wrong schema or field with its JSON path after the file's name
    (``traces/x.json: jobs[0].iterations[3].comm_start: ...``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecError(str(path), f"cannot be read ({err.strerror or err})",
                        "check that the trace file exists and is readable") from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as err:     # JSONDecodeError, UnicodeDecodeError
        problem = str(err) if isinstance(err, ValueError) else "nested too deeply"
        raise SpecError(str(path), f"is not JSON ({problem})",
                        "give a file written by Trace.save, or rerun the run that "
                        "wrote it") from None
    try:
        return Trace.from_dict(data)
    except SpecError as err:
        # "trace" is Trace.from_dict's name for the whole document: here, the file.
        where = str(path) if err.field == "trace" else f"{path}: {err.field}"
        raise SpecError(where, err.problem, err.fix) from None
