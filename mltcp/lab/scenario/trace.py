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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from mltcp.core import validate
from mltcp.core.errors import SpecError

T = TypeVar("T")

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
                   iterations=_each("iterations", d["iterations"], IterationRecord.from_dict))


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

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", _number("t", self.t))
        bps = _number("throughput_bps", self.throughput_bps)
        if bps < 0:
            raise SpecError("throughput_bps", f"{bps} is negative", "give a rate >= 0")
        object.__setattr__(self, "throughput_bps", bps)
        for name in ("queue_bytes", "ecn_marks", "drops"):
            _count(name, getattr(self, name))

    def to_dict(self) -> dict:
        return {"t": self.t, "throughput_bps": self.throughput_bps,
                "queue_bytes": self.queue_bytes, "ecn_marks": self.ecn_marks,
                "drops": self.drops}

    @classmethod
    def from_dict(cls, data: Any) -> LinkSample:
        return cls(**_fields("", data, ("t", "throughput_bps", "queue_bytes", "ecn_marks",
                                        "drops")))


@dataclass(frozen=True)
class LinkTrace:
    """Samples of one link, in time order, with its capacity in bits per second.

    Cumulative counters may not decrease (a backend whose counters reset must
    add the previous total back), since a decrease would read as negative marks.
    """

    id: str
    capacity_bps: float
    samples: tuple[LinkSample, ...]

    def __post_init__(self) -> None:
        _text("id", self.id)
        cap = _number("capacity_bps", self.capacity_bps)
        if cap <= 0:
            raise SpecError("capacity_bps", f"{cap} is not positive",
                            "give the link rate in bits per second, e.g. 1e9")
        object.__setattr__(self, "capacity_bps", cap)
        samples = tuple(_list("samples", self.samples))
        for i, s in enumerate(samples):
            if not isinstance(s, LinkSample):
                raise SpecError(f"samples[{i}]", f"{type(s).__name__} is not a LinkSample",
                                "build it with LinkSample(...)")
        for i, (a, b) in enumerate(zip(samples, samples[1:], strict=False), start=1):
            if b.t < a.t:
                raise SpecError(f"samples[{i}].t", f"{b.t} is before the previous sample's "
                                f"{a.t}", "list samples in time order")
            for name in ("ecn_marks", "drops"):
                if getattr(b, name) < getattr(a, name):
                    raise SpecError(f"samples[{i}].{name}",
                                    f"cumulative counter fell from {getattr(a, name)} to "
                                    f"{getattr(b, name)}",
                                    "record running totals since the run started "
                                    "(add back the total before a counter reset)")
        object.__setattr__(self, "samples", samples)

    def times(self) -> np.ndarray:
        """The samples' times (read-only)."""
        return self.column("t")

    def column(self, name: str) -> np.ndarray:
        """One field of every sample as a read-only array (``t``, ``throughput_bps`` as
        floats; ``queue_bytes``, ``ecn_marks``, ``drops`` as integers), made once per
        trace: the report reads them once per iteration window of every job, and
        rebuilding them each time made its cost iterations x samples."""
        return self._columns[name]

    @cached_property
    def _columns(self) -> dict[str, np.ndarray]:
        out = {}
        for name, dtype in (("t", float), ("throughput_bps", float), ("queue_bytes", np.int64),
                            ("ecn_marks", np.int64), ("drops", np.int64)):
            out[name] = np.array([getattr(s, name) for s in self.samples], dtype=dtype)
            out[name].setflags(write=False)
        return out

    def to_dict(self) -> dict:
        return {"id": self.id, "capacity_bps": self.capacity_bps,
                "samples": [s.to_dict() for s in self.samples]}

    @classmethod
    def from_dict(cls, data: Any) -> LinkTrace:
        d = _fields("", data, ("id", "capacity_bps", "samples"))
        return cls(id=d["id"], capacity_bps=d["capacity_bps"],
                   samples=_each("samples", d["samples"], LinkSample.from_dict))


@dataclass(frozen=True)
class FlowSample:
    """One connection's congestion window (bytes) at time ``t`` (seconds since t0)."""

    t: float
    cwnd_bytes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", _number("t", self.t))
        _count("cwnd_bytes", self.cwnd_bytes)

    def to_dict(self) -> dict:
        return {"t": self.t, "cwnd_bytes": self.cwnd_bytes}

    @classmethod
    def from_dict(cls, data: Any) -> FlowSample:
        return cls(**_fields("", data, ("t", "cwnd_bytes")))


@dataclass(frozen=True)
class FlowTrace:
    """Samples of one connection of a job, in time order: what its congestion control
    did, for comparing an MLTCP variant's window with its standard algorithm's.

    ``id`` names the connection (``"a/0.1"``: job a, worker 0, connection 1);
    ``src``/``dst`` are its hosts.  Optional in a trace: backends that see windows
    (ns-3) record them.
    """

    id: str
    job: str
    src: str
    dst: str
    samples: tuple[FlowSample, ...]

    def __post_init__(self) -> None:
        for name in ("id", "job", "src", "dst"):
            _text(name, getattr(self, name))
        samples = tuple(_list("samples", self.samples))
        for i, s in enumerate(samples):
            if not isinstance(s, FlowSample):
                raise SpecError(f"samples[{i}]", f"{type(s).__name__} is not a FlowSample",
                                "build it with FlowSample(...)")
            if i and s.t < samples[i - 1].t:
                raise SpecError(f"samples[{i}].t", f"{s.t} is before the previous sample's "
                                f"{samples[i - 1].t}", "list samples in time order")
        object.__setattr__(self, "samples", samples)

    def to_dict(self) -> dict:
        return {"id": self.id, "job": self.job, "src": self.src, "dst": self.dst,
                "samples": [s.to_dict() for s in self.samples]}

    @classmethod
    def from_dict(cls, data: Any) -> FlowTrace:
        d = _fields("", data, ("id", "job", "src", "dst", "samples"))
        return cls(id=d["id"], job=d["job"], src=d["src"], dst=d["dst"],
                   samples=_each("samples", d["samples"], FlowSample.from_dict))


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

    def to_dict(self) -> dict:
        out = {"schema": SCHEMA, "scenario": self.scenario, "scheme": self.scheme,
               "backend": self.backend, "seed": self.seed,
               "jobs": [j.to_dict() for j in self.jobs],
               "links": [ln.to_dict() for ln in self.links],
               "provenance": self.provenance, "params": self.params}
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
        """Write the trace as JSON (strict: no NaN/Infinity, which other tools cannot read)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        return path


def load_trace(path: str | Path) -> Trace:
    """Read a trace written by :meth:`Trace.save`; a wrong schema or field is a SpecError."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SpecError("trace", f"{path} is not JSON ({err})",
                        "give a file written by Trace.save") from None
    return Trace.from_dict(data)
