"""The scenario spec that every backend reads: one TOML file, one validated object.

The fluid model, ns-3, the netns testbed and real hosts must run *the same*
experiment, so none of them parses a scenario on its own: all take a
:class:`Scenario` from :func:`load_scenario` or :func:`parse_scenario`. Validation
happens here, once, and every error names the offending field as a dotted path
(``jobs[1].compute_ms``) with a concrete fix, because a typo found after an hour of
ns-3 is an hour lost.

Units follow the file: Mbit/s for links, ms for times, bytes (or "10MB") for sizes.
A job's ``bytes_per_iteration`` is its gradient size G; what a worker actually sends
per iteration depends on the collective (ring: 2(N-1)/N * G), see
:meth:`ScenarioJob.comm_bytes_per_worker`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, TypeVar

from mltcp.core import validate
from mltcp.core import workload as workload_rules
from mltcp.core.aggressiveness import PRESETS, Aggressiveness
from mltcp.core.budget import Collective, JobDescription
from mltcp.core.dcqcn.policy import Mode
from mltcp.core.errors import SpecError
from mltcp.lab.common.tomlfile import example_names, read_toml

CC_NAMES = ("reno", "cubic", "dctcp")
TOPOLOGY_KINDS = ("dumbbell", "leaf_spine")
# "dedicated" names the baseline every backend runs itself: each job alone on the link.
RESERVED_SCHEME_NAMES = ("dedicated",)
MAX_LINK_MBIT = 40_000
MAX_HOSTS = 1024
MAX_QUEUE_PACKETS = 100_000

MAX_COMPUTE_MS = 600_000
MAX_ITERATIONS = 10_000
MAX_START_OFFSET_MS = 3_600_000
MAX_SEED = validate.MAX_SEED  # what every backend's RNG accepts

_SCENARIO_NAME = re.compile(r"[a-z0-9-]{1,40}")
_JOB_NAME = re.compile(r"[a-z0-9_-]{1,20}")
_SCHEME_NAME = re.compile(r"[a-z0-9_-]{1,30}")

_TOP_KEYS = ("name", "description", "seeds", "topology", "jobs", "schemes", "record_links")
# Which links a run's trace samples (every backend): see Scenario.record_links.
RECORD_LINKS = ("fabric", "crossed", "all", "none")
DEFAULT_RECORD_LINKS = "fabric"
_COMMON_TOPOLOGY_KEYS = ("kind", "host_link_mbit", "queue_packets", "ecn_threshold_bytes",
                         "gso_max_segs", "rto_min_ms", "mtu_bytes")
MIN_MTU, MAX_MTU = 1280, 9000
ETHERNET_HEADER_BYTES = 14
TCP_IP_HEADER_BYTES = 52   # IPv4 20 + TCP 20 + timestamps 12: MSS = MTU - 52 (1448 at 1500)
MAX_GSO_SEGS = 65535
_DUMBBELL_KEYS = ("bottleneck_mbit", "hosts")
_LEAF_SPINE_KEYS = ("leaves", "spines", "hosts_per_leaf", "oversubscription")
_TOPOLOGY_KEYS = _COMMON_TOPOLOGY_KEYS + _DUMBBELL_KEYS + _LEAF_SPINE_KEYS
_JOB_KEYS = (
    "name", "compute_ms", "bytes_per_iteration", "workers", "placement", "connections",
    "start_offset_ms", "iterations", "collective", "phases", "compute_jitter_ms", "workload",
)
# The transformer's size overrides (of its preset), as the workload's flags name them.
WORKLOAD_SIZE_KEYS = ("d_model", "layers", "heads", "seq", "vocab")
WORKLOAD_IMAGE_KEYS = ("image_size",)    # the CNNs' input size
_WORKLOAD_KEYS = ("model", "batch", "preset", "backend", "gpu_time_ms", "signal",
                  *WORKLOAD_SIZE_KEYS, *WORKLOAD_IMAGE_KEYS)
# The workload's "auto" is not offered: a scenario says which library its hosts use.
WORKLOAD_BACKENDS = ("gloo", "nccl")
_PHASE_KEYS = ("compute_ms", "share")
MAX_PHASES = 16
_F_KEYS = ("slope", "intercept", "cap", "dcqcn_mode")
_SCHEME_KEYS = ("name", "cc", "mltcp", *_F_KEYS, "schedule")
# Centralized schedules a scheme can apply before its jobs start ("none": start as specified).
SCHEDULES = ("none", "cassini")
# How the dcqcn backend puts a scheme's F on DCQCN: the tuner's policy modes.
DCQCN_MODES = tuple(mode.value for mode in Mode)

_MISSING: Any = object()


# -- reading TOML values with a path ------------------------------------------

class _Table:
    """One TOML table being read: knows its dotted path and rejects unknown keys.

    Unknown keys are errors, not warnings: a misspelt ``queue_packet`` silently
    falling back to a default would run a different experiment than the one written.
    """

    def __init__(self, data: object, path: str, allowed: tuple[str, ...], example: str) -> None:
        if not isinstance(data, Mapping):
            raise SpecError(
                path or "scenario", f"must be a table (got {type(data).__name__})", example
            )
        validate.known_keys(data, path, allowed)
        self.data: Mapping[str, Any] = data
        self.path = path

    def at(self, key: str) -> str:
        return _join(self.path, key)

    def get(self, key: str, example: str, default: Any = _MISSING) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise SpecError(self.at(key), "is missing", f"add {example}")
        return default


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key








@contextmanager
def _under(path: str, rename: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise a lower layer's SpecError with its field as a path in the scenario.

    Aggressiveness and JobDescription name their own fields ("slope") and phrase
    fixes as CLI flags ("--slope 1.0"); in a scenario the same value is
    ``schemes[2].slope`` and is written without dashes.
    """
    try:
        yield
    except SpecError as err:
        name = (rename or {}).get(err.field, err.field)
        fix = re.sub(r"--([a-z_]+) (?=[0-9.])", r"\1 = ", err.fix).replace("--", "")
        raise SpecError(_join(path, name), err.problem, fix) from None


# -- the model ----------------------------------------------------------------

@dataclass(frozen=True)
class Topology:
    """The network every backend builds; hosts are always named h1..hN.

    For a dumbbell, h1..h(N//2) sit on the left and the rest on the right of one
    bottleneck link. For a leaf-spine, leaf k (0-based) holds hosts
    h(k*P+1)..h((k+1)*P) with P = hosts_per_leaf, and ``hosts`` and
    ``bottleneck_mbit`` are derived in ``__post_init__``: each leaf's uplink
    capacity, P * host_link_mbit / oversubscription, is split evenly over the spines,
    so ``bottleneck_mbit`` is the capacity of one leaf-spine link.
    """

    kind: Literal["dumbbell", "leaf_spine"]
    host_link_mbit: float
    queue_packets: int
    bottleneck_mbit: float = 0.0
    hosts: int = 0
    leaves: int = 0
    spines: int = 0
    hosts_per_leaf: int = 0
    oversubscription: float = 1.0
    ecn_threshold_bytes: int | None = None
    # Emulation only: largest burst (in segments) a host hands to its device at
    # once; None keeps the device default (GSO bursts up to 64 KB).  1 makes the
    # queues drop and mark single packets, as on a NIC with TSO off.
    gso_max_segs: int | None = None
    # Emulation only: minimum retransmission timeout on the hosts' routes; None keeps
    # Linux's 200 ms.  Data centres lower it, and with compute phases of ~100 ms a
    # 200 ms timeout shifts a job by a whole iteration.
    rto_min_ms: float | None = None
    # Every link's MTU: 1500, or jumbo frames (9000), which AI clusters often run and
    # which cut the emulation's per-packet work six-fold.
    mtu_bytes: int = 1500

    @property
    def frame_bytes(self) -> int:
        """A full-size Ethernet frame: what one of ``queue_packets`` holds."""
        return self.mtu_bytes + ETHERNET_HEADER_BYTES

    @property
    def mss_bytes(self) -> int:
        """TCP payload per full-size segment (with timestamps, as Linux and ns-3 send)."""
        return self.mtu_bytes - TCP_IP_HEADER_BYTES

    @property
    def payload_efficiency(self) -> float:
        """Payload bits per bit on the wire: a link's goodput over its rate."""
        return self.mss_bytes / self.frame_bytes

    @property
    def queue_bytes(self) -> int:
        """Every shaped link's queue limit: ``queue_packets`` full-size frames."""
        return self.queue_packets * self.frame_bytes

    def __post_init__(self) -> None:
        if self.kind == "leaf_spine":
            object.__setattr__(self, "hosts", self.leaves * self.hosts_per_leaf)
            object.__setattr__(self, "bottleneck_mbit", _leaf_spine_link_mbit(
                self.hosts_per_leaf, self.host_link_mbit, self.oversubscription, self.spines
            ))

    def host_names(self) -> list[str]:
        return [f"h{i}" for i in range(1, self.hosts + 1)]

    def segments(self) -> tuple[tuple[str, ...], ...]:
        """Groups of hosts separated by a bottleneck: (left, right), or one per leaf.

        Traffic between two hosts of different segments crosses a shared link.
        """
        names = self.host_names()
        if self.kind == "dumbbell":
            half = self.hosts // 2
            return tuple(names[:half]), tuple(names[half:])
        per = self.hosts_per_leaf
        return tuple(tuple(names[k * per:(k + 1) * per]) for k in range(self.leaves))

    def segment_index(self, host: str) -> int:
        """Index of ``host``'s segment in :meth:`segments`."""
        if host not in self.host_names():
            raise SpecError(
                "host", f"unknown host {host!r}", f"use one of h1..h{self.hosts}"
            )
        number = int(host[1:])
        if self.kind == "dumbbell":
            return 0 if number <= self.hosts // 2 else 1
        return (number - 1) // self.hosts_per_leaf

    def side(self, host: str) -> Literal["left", "right"]:
        """The dumbbell side of ``host``."""
        if self.kind != "dumbbell":
            raise SpecError(
                "topology.kind", f"side() needs a dumbbell (this is {self.kind})",
                "use leaf() or segment_index() for a leaf_spine topology",
            )
        return "left" if self.segment_index(host) == 0 else "right"

    def leaf(self, host: str) -> int:
        """The 0-based leaf that ``host`` hangs off in a leaf-spine topology."""
        if self.kind != "leaf_spine":
            raise SpecError(
                "topology.kind", f"leaf() needs a leaf_spine topology (this is {self.kind})",
                "use side() or segment_index() for a dumbbell",
            )
        return self.segment_index(host)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "dumbbell":
            out |= {"bottleneck_mbit": self.bottleneck_mbit, "host_link_mbit": self.host_link_mbit,
                    "queue_packets": self.queue_packets, "hosts": self.hosts}
        else:
            out |= {"host_link_mbit": self.host_link_mbit, "queue_packets": self.queue_packets,
                    "leaves": self.leaves, "spines": self.spines,
                    "hosts_per_leaf": self.hosts_per_leaf,
                    "oversubscription": self.oversubscription}
        if self.ecn_threshold_bytes is not None:
            out["ecn_threshold_bytes"] = self.ecn_threshold_bytes
        if self.gso_max_segs is not None:
            out["gso_max_segs"] = self.gso_max_segs
        if self.rto_min_ms is not None:
            out["rto_min_ms"] = self.rto_min_ms
        if self.mtu_bytes != 1500:
            out["mtu_bytes"] = self.mtu_bytes
        return out


def _leaf_spine_link_mbit(
    hosts_per_leaf: int, host_link_mbit: float, oversubscription: float, spines: int
) -> float:
    return hosts_per_leaf * host_link_mbit / oversubscription / spines



@dataclass(frozen=True)
class JobPhase:
    """One step of a model-parallel iteration: compute, then send ``share`` of the
    iteration's bytes (shares of a job's phases sum to 1)."""

    compute_ms: float
    share: float


@dataclass(frozen=True)
class Workload:
    """The real training a job runs where the backend runs real training (``hosts``):
    the bundled DDP workload's model and batch, the collective library (``gloo`` on CPU
    hosts, ``nccl`` on GPU hosts, over sockets so that TCP carries it), a compute pad
    per iteration for CPU hosts standing in for GPUs (``gpu_time_ms``), and whether the
    training-loop hook signals each iteration's end to the datapath (``signal``).
    The other backends run the job's ``compute_ms``/``bytes_per_iteration`` as always."""

    model: str
    batch: int = 8
    backend: str = "gloo"
    gpu_time_ms: float = 0.0
    signal: bool = False
    preset: str | None = None      # the transformer's size (tiny, small, base)
    size: tuple[tuple[str, int], ...] = ()   # WORKLOAD_SIZE_KEYS / WORKLOAD_IMAGE_KEYS given

    def to_dict(self) -> dict[str, Any]:
        out = {"model": self.model, "batch": self.batch, "backend": self.backend,
               "gpu_time_ms": self.gpu_time_ms, "signal": self.signal}
        return (out | ({"preset": self.preset} if self.preset is not None else {})
                | dict(self.size))

    def model_args(self) -> list[str]:
        """The workload's model flags (``--describe`` takes these alone)."""
        args = ["--model", self.model, "--batch", str(self.batch)]
        if self.preset is not None:
            args += ["--preset", self.preset]
        for key, value in self.size:
            args += [f"--{key.replace('_', '-')}", str(value)]
        return args

    def argv(self, iterations: int, seed: int = 0) -> list[str]:
        """The command line of ``python -m mltcp.workloads.ddp`` for this table: what the
        hosts backend runs on every host, and what the scenario checks by the workload's
        own rules (:mod:`mltcp.core.workload`) when it is read."""
        args = [*self.model_args(), "--iterations", str(iterations), "--backend", self.backend,
                "--seed", str(seed)]
        if self.gpu_time_ms:
            args += ["--gpu-time-ms", repr(self.gpu_time_ms)]
        return args


@dataclass(frozen=True)
class ScenarioJob:
    """One synthetic training job: compute, then exchange its gradient, ``iterations`` times.

    ``bytes_per_worker`` is the spec's ``bytes_per_iteration``: the gradient size G
    each worker holds. ``placement`` is None when the hosts are chosen by
    :func:`placement`.  ``phases`` (model parallelism) splits an iteration into
    several compute + communication steps; ``compute_ms`` is then their total.
    """

    name: str
    compute_ms: float
    bytes_per_worker: int
    workers: int
    iterations: int
    placement: tuple[str, ...] | None = None
    connections: int = 1
    start_offset_ms: float = 0.0
    collective: Collective = Collective.RING_ALLREDUCE
    phases: tuple[JobPhase, ...] | None = None
    # Standard deviation of a per-iteration Gaussian added to the (first) compute phase:
    # real training steps vary (data loading, stragglers), and that noise is what a
    # schedule must withstand.  See compute_jitter_ms().
    compute_jitter_ms: float = 0.0
    workload: Workload | None = None

    def phase_list(self) -> tuple[JobPhase, ...]:
        """The iteration's steps: ``phases``, or one step of compute_ms and all bytes."""
        return self.phases if self.phases is not None else (JobPhase(self.compute_ms, 1.0),)

    def description(self) -> JobDescription:
        return JobDescription(
            gradient_bytes=self.bytes_per_worker, workers=self.workers, collective=self.collective
        )

    def comm_bytes_per_worker(self) -> int:
        """Payload bytes one worker sends per iteration (ring, N=2: G; N=4: 1.5 G)."""
        return self.description().bytes_per_iteration()

    def comm_ms(self, goodput_bps: float) -> float:
        """Time for one worker's communication alone on a link with this goodput."""
        fix = "pass the goodput in bit/s, e.g. 957e6 for a 1 Gbit/s link"
        if validate.finite(goodput_bps, "goodput_bps", fix) <= 0:
            raise SpecError("goodput_bps", f"must be a positive number (got {goodput_bps!r})",
                            fix)
        return self.comm_bytes_per_worker() * 8 / goodput_bps * 1000

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.phases is None:
            out["compute_ms"] = self.compute_ms
        out |= {"bytes_per_iteration": self.bytes_per_worker, "workers": self.workers}
        if self.placement is not None:
            out["placement"] = list(self.placement)
        out |= {
            "connections": self.connections, "start_offset_ms": self.start_offset_ms,
            "iterations": self.iterations, "collective": self.collective.value,
        }
        if self.phases is not None:
            out["phases"] = [{"compute_ms": p.compute_ms, "share": p.share}
                             for p in self.phases]
        if self.compute_jitter_ms:
            out["compute_jitter_ms"] = self.compute_jitter_ms
        if self.workload is not None:
            out["workload"] = self.workload.to_dict()
        return out


@dataclass(frozen=True)
class Scheme:
    """A congestion-control setting to compare: standard ``cc`` or its MLTCP version.

    With ``mltcp`` false, slope/intercept/cap are 0/1/None, i.e. F == 1.
    ``schedule = "cassini"`` runs the standard algorithm after shifting the jobs'
    starts by Cassini's time-shifts (the centralized baseline, :mod:`mltcp.lab.scenario.schedule`).
    ``dcqcn_mode``: how F reaches a RoCE NIC's DCQCN on the ``dcqcn`` backend (the
    tuner's policy mode, :class:`mltcp.core.dcqcn.policy.Mode`); None takes the tuner's
    default.  The TCP backends ignore it, as the DCQCN backend ignores ``cc``.
    """

    name: str
    cc: str
    mltcp: bool
    slope: float = 1.0
    intercept: float = 1.0
    cap: float | None = None
    schedule: str = "none"
    dcqcn_mode: str | None = None

    @property
    def aggressiveness(self) -> Aggressiveness:
        if not self.mltcp:
            return PRESETS["standard"]
        return Aggressiveness(self.slope, self.intercept, self.cap)

    @property
    def module_name(self) -> str:
        """The kernel congestion-control name: "mltcp_cubic", or plain "cubic"."""
        return f"mltcp_{self.cc}" if self.mltcp else self.cc

    def as_run(self) -> dict[str, Any]:
        """What ran, spelt out for a trace: the effective F (1 + 0 r for a standard
        scheme) and the kernel congestion-control module."""
        f = self.aggressiveness
        return {"f": {"slope": f.slope, "intercept": f.intercept, "cap": f.cap},
                "congestion_control": self.module_name}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "cc": self.cc, "mltcp": self.mltcp}
        if self.mltcp:
            out |= {"slope": self.slope, "intercept": self.intercept}
            if self.cap is not None:
                out["cap"] = self.cap
        if self.schedule != "none":
            out["schedule"] = self.schedule
        if self.dcqcn_mode is not None:
            out["dcqcn_mode"] = self.dcqcn_mode
        return out


# The dedicated-link baseline: each job alone, under standard cubic.
DEDICATED = Scheme(name="dedicated", cc="cubic", mltcp=False)


def scheme_of(params: Mapping[str, Any], where: str = "params") -> Scheme:
    """The :class:`Scheme` a trace ran, rebuilt from its ``params`` by the scenario
    file's own rules (so a trace cannot name a scheme a scenario could not), and
    checked against the F and module the trace says ran (where it says so: traces
    written before they did carry only the scheme's fields)."""
    if not isinstance(params, Mapping):
        raise SpecError(where, f"{type(params).__name__} is not a mapping",
                        "give the params of a trace written by mltcp")
    fields = {k: params[k] for k in _SCHEME_KEYS if k in params}
    if fields.get("name") == DEDICATED.name:
        scheme = dataclasses.replace(DEDICATED, cc=fields.get("cc", DEDICATED.cc))
    else:
        with _under(where):
            scheme = _parse_scheme(fields, 0)
    ran = scheme.as_run()
    for key in ("f", "congestion_control"):
        if key in params and params[key] != ran[key]:
            raise SpecError(f"{where}.{key}", f"{params[key]!r} is not what scheme "
                            f"{scheme.name!r} runs ({ran[key]!r})",
                            "the trace was edited or written by a broken backend: rerun it")
    return scheme


_Named = TypeVar("_Named")


def named(items: Sequence[_Named], name: str, field: str, what: str,
          attr: str = "name") -> _Named:
    """The entry whose ``attr`` is ``name``; an unknown name is an error that lists the
    known ones (jobs and schemes here; a plan's jobs, a graph's links)."""
    for item in items:
        if getattr(item, attr) == name:
            return item
    names = ", ".join(getattr(x, attr) for x in items)
    raise SpecError(field, f"unknown {what} {name!r}", f"use one of: {names}")


@dataclass(frozen=True)
class Scenario:
    """A whole experiment: the network, the jobs, the schemes to compare, the seeds."""

    name: str
    description: str
    seeds: tuple[int, ...]
    topology: Topology
    jobs: tuple[ScenarioJob, ...]
    schemes: tuple[Scheme, ...]
    # Which links every run's trace samples: "fabric" (the switch-to-switch links a job's
    # ring may cross: the dumbbell's bottleneck, a leaf-spine's uplinks; their number does
    # not grow with the jobs), "crossed" (every shaped link a ring may cross, host links
    # too), "all" (every shaped link, both ways), "none", or link ids (an undirected id
    # names both directions).  The rates are the same whatever is recorded: this only
    # sizes the trace (a cluster-size scenario's host links are most of its samples).
    record_links: str | tuple[str, ...] = DEFAULT_RECORD_LINKS

    def job(self, name: str) -> ScenarioJob:
        return named(self.jobs, name, "jobs", "job")

    def scheme(self, name: str) -> Scheme:
        return named(self.schemes, name, "schemes", "scheme")

    def with_schemes(self, names: Iterable[str]) -> Scenario:
        """A copy that runs only the named schemes (kept in the scenario's order)."""
        wanted = [names] if isinstance(names, str) else list(names)
        if not wanted:
            all_names = ", ".join(s.name for s in self.schemes)
            raise SpecError("schemes", "no scheme selected", f"name at least one of: {all_names}")
        for name in wanted:
            self.scheme(name)
        return dataclasses.replace(
            self, schemes=tuple(s for s in self.schemes if s.name in wanted)
        )

    def comm_share(self, job: ScenarioJob | str, goodput_bps: float) -> float:
        """t_comm / (t_comm + compute) for ``job`` alone on a link with this goodput.

        Two identical jobs can interleave their communication only if this is below
        1/2 (in general: the shares of all jobs sharing a link must sum below 1).
        """
        job = self.job(job) if isinstance(job, str) else job
        t_comm = job.comm_ms(goodput_bps)
        return t_comm / (t_comm + job.compute_ms)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; ``parse_scenario(s.to_dict()) == s``.  ``record_links`` only
        where it is not the default, so that a scenario's digest (its run set's identity)
        is what it was before the field existed."""
        out = {
            "name": self.name, "description": self.description, "seeds": list(self.seeds),
            "topology": self.topology.to_dict(),
            "jobs": [job.to_dict() for job in self.jobs],
            "schemes": [scheme.to_dict() for scheme in self.schemes],
        }
        if self.record_links != DEFAULT_RECORD_LINKS:
            out["record_links"] = (self.record_links if isinstance(self.record_links, str)
                                   else list(self.record_links))
        return out


def _too_many_workers(index: int, workers: int, hosts: int) -> tuple[str, str, str]:
    return (
        f"jobs[{index}].workers",
        f"{workers} workers but the topology has {hosts} hosts, and a job uses a host once",
        f"use at most {hosts} workers or add hosts to the topology",
    )


# -- parsing ------------------------------------------------------------------

def parse_scenario(data: Mapping[str, Any], source: str = "") -> Scenario:
    """Validate a scenario given as the dict that tomllib (or ``to_dict``) produces.

    ``source`` (a file name) is appended to error messages so a user running many
    scenarios knows which file to fix.
    """
    try:
        return _parse(data)
    except SpecError as err:
        if not source:
            raise
        raise SpecError(err.field, f"{err.problem} (in {source})", err.fix) from None


def _parse(data: Mapping[str, Any]) -> Scenario:
    top = _Table(data, "", _TOP_KEYS, "give the scenario as a table of name, topology, ...")
    name = validate.name(top.get("name", 'name = "my-scenario"'), "name", _SCENARIO_NAME,
                         "1-40 of a-z, 0-9 and '-'", '"compatible-pair"')
    description = validate.text(top.get("description", "", ""), "description", '"what this shows"')
    seeds = _parse_seeds(top.get("seeds", "", [0]))
    topology = _parse_topology(top.get("topology", 'a [topology] table with kind = "dumbbell"'))
    jobs = tuple(
        _parse_job(raw, i, topology)
        for i, raw in enumerate(_array(top.get("jobs", "a [[jobs]] table"), "jobs", "[[jobs]]"))
    )
    _unique([job.name for job in jobs], "jobs")
    schemes = tuple(
        _parse_scheme(raw, i)
        for i, raw in enumerate(
            _array(top.get("schemes", "a [[schemes]] table"), "schemes", "[[schemes]]")
        )
    )
    _unique([scheme.name for scheme in schemes], "schemes")
    for scheme in schemes:
        if scheme.cc == "dctcp" and topology.ecn_threshold_bytes is None:
            raise SpecError(
                "topology.ecn_threshold_bytes",
                f"is missing, but scheme {scheme.name!r} uses cc = \"dctcp\", "
                "which needs ECN marking at the bottleneck",
                "add e.g. ecn_threshold_bytes = 30000 to [topology]",
            )
    record = _parse_record_links(top.get("record_links", "", DEFAULT_RECORD_LINKS), topology)
    return Scenario(name, description, seeds, topology, jobs, schemes, record)


def _parse_record_links(value: object, topology: Topology) -> str | tuple[str, ...]:
    """One of RECORD_LINKS, or a list of the topology's shaped link ids (undirected, or
    one direction as traces name it), each once."""
    choices = ", ".join(f'"{c}"' for c in RECORD_LINKS)
    if isinstance(value, str):
        if value not in RECORD_LINKS:
            raise SpecError("record_links", f"unknown choice {value!r}",
                            f"use one of {choices}, or a list of link ids")
        return value
    if not isinstance(value, list):
        raise SpecError("record_links", f"must be a string or a list (got "
                        f"{type(value).__name__})", f"use one of {choices}, or a list of "
                        'link ids, e.g. ["bottleneck"]')
    from mltcp.lab.scenario.graph import graph_for, shaped_link_ids  # graph reads spec
    known = shaped_link_ids(graph_for(topology))
    for i, lid in enumerate(value):
        if not isinstance(lid, str) or lid not in known:
            near = [k for k in known if isinstance(lid, str) and lid and lid in k][:3] \
                or list(known)[:3]
            raise SpecError(f"record_links[{i}]", f"{lid!r} is not a shaped link of the "
                            "topology", f"use a link id such as {', '.join(near)} (an id "
                            "without ':' names both directions)")
        if lid in value[:i]:
            raise SpecError(f"record_links[{i}]", f"{lid!r} is listed twice",
                            "list each link once")
    return tuple(value)


def _array(value: object, field: str, table: str) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(field, f"must be an array of tables (got {type(value).__name__})",
                        f"write each entry as a {table} table")
    if not value:
        raise SpecError(field, "is empty", f"add at least one {table} table")
    return value


def _unique(names: list[str], array: str) -> None:
    for index, name in enumerate(names):
        if name in names[:index]:
            raise SpecError(f"{array}[{index}].name", f"duplicate name {name!r}",
                            "give every entry its own name")


def _parse_seeds(value: object) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise SpecError("seeds", f"must be a non-empty list of integers (got {value!r})",
                        "use e.g. seeds = [0, 1, 2]")
    return validate.seed_list(value)


def _parse_topology(raw: object) -> Topology:
    t = _Table(raw, "topology", _TOPOLOGY_KEYS, 'write it as a [topology] table')
    kind = t.get("kind", 'kind = "dumbbell"')
    if kind not in TOPOLOGY_KINDS:
        raise SpecError(t.at("kind"), f"unknown topology kind {kind!r}",
                        'use kind = "dumbbell" or kind = "leaf_spine"')
    queue = validate.integer(t.get("queue_packets", "queue_packets = 100"), t.at("queue_packets"),
                             10, MAX_QUEUE_PACKETS, "queue_packets = 100")
    topology = (_parse_dumbbell if kind == "dumbbell" else _parse_leaf_spine)(t, queue)
    gso = t.get("gso_max_segs", "", None)
    if gso is not None:
        gso = validate.integer(
            gso, t.at("gso_max_segs"), 1, MAX_GSO_SEGS,
            "gso_max_segs = 1 (single packets), or omit it for the device default")
        topology = dataclasses.replace(topology, gso_max_segs=gso)
    rto = t.get("rto_min_ms", "", None)
    if rto is not None:
        rto = validate.number(rto, t.at("rto_min_ms"), 1, 200,
                              "rto_min_ms = 5, or omit it for Linux's 200 ms")
        topology = dataclasses.replace(topology, rto_min_ms=rto)
    mtu = t.get("mtu_bytes", "", None)
    if mtu is not None:
        mtu = validate.integer(mtu, t.at("mtu_bytes"), MIN_MTU, MAX_MTU,
                               "mtu_bytes = 9000 (jumbo frames), or omit it for 1500")
        topology = dataclasses.replace(topology, mtu_bytes=mtu)
    ecn = t.get("ecn_threshold_bytes", "", None)
    if ecn is None:
        return topology
    field = t.at("ecn_threshold_bytes")
    ecn = validate.size(ecn, field, "ecn_threshold_bytes = 30000")
    frame, limit = topology.frame_bytes, topology.queue_bytes
    if not 1500 <= ecn < limit:
        raise SpecError(
            field, f"must be >= 1500 and below the queue ({queue} x {frame} = {limit} "
            f"bytes) (got {ecn})",
            f"use a threshold between 1500 and {limit - 1}, e.g. {min(30000, limit // 3)}",
        )
    return dataclasses.replace(topology, ecn_threshold_bytes=ecn)


def _parse_dumbbell(t: _Table, queue: int) -> Topology:
    for key in _LEAF_SPINE_KEYS:
        if key in t.data:
            raise SpecError(t.at(key), 'only applies to kind = "leaf_spine"',
                            'remove it, or set kind = "leaf_spine"')
    bottleneck = validate.number(t.get("bottleneck_mbit", "bottleneck_mbit = 1000"),
                                 t.at("bottleneck_mbit"), 1, MAX_LINK_MBIT,
                                 "bottleneck_mbit = 1000")
    default_host = min(10 * bottleneck, MAX_LINK_MBIT)
    host_link = validate.number(t.get("host_link_mbit", "", default_host), t.at("host_link_mbit"),
                                1, MAX_LINK_MBIT, f"host_link_mbit = {default_host:g}")
    if host_link < bottleneck:
        raise SpecError(
            t.at("host_link_mbit"),
            f"{host_link:g} Mbit/s is below bottleneck_mbit ({bottleneck:g}), so the "
            "bottleneck would not be the bottleneck",
            f"use host_link_mbit >= {bottleneck:g}, e.g. {default_host:g}, or omit it",
        )
    hosts = validate.integer(t.get("hosts", "hosts = 4"), t.at("hosts"), 2, MAX_HOSTS, "hosts = 4")
    return Topology("dumbbell", host_link, queue, bottleneck_mbit=bottleneck, hosts=hosts)


def _parse_leaf_spine(t: _Table, queue: int) -> Topology:
    for key in _DUMBBELL_KEYS:
        if key in t.data:
            raise SpecError(
                t.at(key), 'is derived for kind = "leaf_spine" (hosts = leaves * '
                "hosts_per_leaf; bottleneck_mbit = hosts_per_leaf * host_link_mbit / "
                "oversubscription / spines)",
                "remove it and set leaves, hosts_per_leaf, host_link_mbit, oversubscription "
                "and spines instead",
            )
    host_link = validate.number(t.get("host_link_mbit", "host_link_mbit = 1000"),
                                t.at("host_link_mbit"), 1, MAX_LINK_MBIT, "host_link_mbit = 1000")
    leaves = validate.integer(t.get("leaves", "leaves = 2"), t.at("leaves"), 2, 256, "leaves = 2")
    spines = validate.integer(t.get("spines", "spines = 1"), t.at("spines"), 1, 256, "spines = 1")
    per_leaf = validate.integer(t.get("hosts_per_leaf", "hosts_per_leaf = 2"),
                                t.at("hosts_per_leaf"), 1, 256, "hosts_per_leaf = 2")
    if leaves * per_leaf > MAX_HOSTS:
        raise SpecError(t.at("hosts_per_leaf"),
                        f"gives {leaves * per_leaf} hosts, over {MAX_HOSTS}",
                        f"use at most {MAX_HOSTS // leaves} hosts per leaf or fewer leaves")
    oversub = validate.number(t.get("oversubscription", "oversubscription = 2.0"),
                              t.at("oversubscription"), 1.0, 64.0, "oversubscription = 2.0")
    link = _leaf_spine_link_mbit(per_leaf, host_link, oversub, spines)
    if not 1 <= link <= MAX_LINK_MBIT:
        raise SpecError(
            t.at("oversubscription"),
            f"gives leaf-spine links of {link:g} Mbit/s (hosts_per_leaf * host_link_mbit / "
            f"oversubscription / spines), outside 1..{MAX_LINK_MBIT}",
            "change oversubscription, spines or host_link_mbit so each leaf-spine link "
            f"carries 1..{MAX_LINK_MBIT} Mbit/s",
        )
    return Topology("leaf_spine", host_link, queue, leaves=leaves, spines=spines,
                    hosts_per_leaf=per_leaf, oversubscription=oversub)


def _parse_job(raw: object, index: int, topology: Topology) -> ScenarioJob:
    path = f"jobs[{index}]"
    t = _Table(raw, path, _JOB_KEYS, "write each job as a [[jobs]] table")
    name = validate.name(t.get("name", 'name = "a"'), t.at("name"), _JOB_NAME,
                         "1-20 of a-z, 0-9, '_' and '-'", '"a"')
    phases = None
    if "phases" in t.data:
        if "compute_ms" in t.data:
            raise SpecError(t.at("compute_ms"), "given together with phases",
                            "give either compute_ms (one phase) or phases, whose compute_ms "
                            "add up to the iteration's compute")
        phases = _parse_phases(t.data["phases"], t.at("phases"))
        compute = sum(p.compute_ms for p in phases)
    else:
        compute = validate.number(t.get("compute_ms", "compute_ms = 200"), t.at("compute_ms"),
                                  0, MAX_COMPUTE_MS, "compute_ms = 200", lo_open=True)
    size = validate.size(t.get("bytes_per_iteration", 'bytes_per_iteration = "20MB"'),
                         t.at("bytes_per_iteration"), 'bytes_per_iteration = "20MB"')
    workers = validate.integer(t.get("workers", "workers = 2"), t.at("workers"), 2, MAX_HOSTS,
                               "workers = 2")
    if workers > topology.hosts:
        raise SpecError(*_too_many_workers(index, workers, topology.hosts))
    connections = validate.integer(t.get("connections", "", 1), t.at("connections"), 1, 16,
                                   "connections = 1")
    offset = validate.number(t.get("start_offset_ms", "", 0.0), t.at("start_offset_ms"),
                             0, MAX_START_OFFSET_MS, "start_offset_ms = 0")
    jitter = validate.number(t.get("compute_jitter_ms", "", 0.0), t.at("compute_jitter_ms"),
                             0, MAX_COMPUTE_MS, "compute_jitter_ms = 10")
    iterations = validate.integer(t.get("iterations", "iterations = 20"), t.at("iterations"),
                                  1, MAX_ITERATIONS, "iterations = 20")
    with _under(path, {"gradient_bytes": "bytes_per_iteration"}):
        collective = Collective.parse(t.get("collective", "", Collective.RING_ALLREDUCE.value))
        JobDescription(gradient_bytes=size, workers=workers, collective=collective)
    hosts = None
    if "placement" in t.data:
        hosts = _parse_placement(t.data["placement"], t.at("placement"), workers, topology)
    workload = None
    if "workload" in t.data:
        workload = _parse_workload(t.data["workload"], t.at("workload"), path, iterations)
    return ScenarioJob(name, compute, size, workers, iterations, hosts, connections, offset,
                       collective, phases, jitter, workload)


def _parse_workload(raw: object, field: str, job: str, iterations: int) -> Workload:
    """A job's ``workload`` table.  Here only its shape and types, and the scenario's own
    choice of library; its values are checked by the workload's own rules on the very
    command line the hosts backend builds from it (:meth:`Workload.argv`), so that what
    is accepted here is never refused on the hosts, and every backend refuses the same
    files (``--backend fluid`` too, which does not run the workload)."""
    example = 'workload = {model = "resnet18", batch = 8}'
    t = _Table(raw, field, _WORKLOAD_KEYS, example)
    model = validate.text(t.get("model", 'model = "resnet18"'), t.at("model"), '"resnet18"')
    batch = _whole(t.get("batch", "", 8), t.at("batch"), "batch = 8")
    backend = validate.choice(t.get("backend", "", "gloo"), t.at("backend"), WORKLOAD_BACKENDS)
    pad = validate.finite(t.get("gpu_time_ms", "", 0.0), t.at("gpu_time_ms"),
                          "use e.g. gpu_time_ms = 100")
    signal = validate.flag(t.get("signal", "", False), t.at("signal"), "signal = true")
    preset = None
    if "preset" in t.data:
        preset = validate.text(t.data["preset"], t.at("preset"), 'preset = "small"')
    size = tuple((key, _whole(t.data[key], t.at(key), f"{key} = 256"))
                 for key in (*WORKLOAD_SIZE_KEYS, *WORKLOAD_IMAGE_KEYS) if key in t.data)
    workload = Workload(model, batch, backend, float(pad), signal, preset, size)
    try:
        workload_rules.parse(workload.argv(iterations), environ={})
    except SpecError as err:
        raise _as_table_error(err, field, job) from None
    return workload


def _whole(value: object, field: str, example: str) -> int:
    """An integer (its range is the workload's to check)."""
    if not validate.is_integer(value):
        raise SpecError(field, f"must be an integer (got {value!r})", f"use e.g. {example}")
    return value  # type: ignore[return-value]


def _as_table_error(err: SpecError, field: str, job: str) -> SpecError:
    """The workload's refusal of a flag as the scenario's: ``--heads`` is
    ``jobs[0].workload.heads`` (``--iterations`` the job's own ``iterations``), and
    ``--d-model 256`` in the text is ``d_model = 256``."""
    def key(flag: str) -> str:
        return flag.removeprefix("--").replace("-", "_")

    def text(words: str) -> str:
        words = re.sub(r"--([a-z][a-z-]*) (?=[0-9])", lambda m: f"{key(m.group(1))} = ", words)
        return re.sub(r"--([a-z][a-z-]*)", lambda m: key(m.group(1)), words)

    name = key(err.field)
    where = (_join(job, name) if name == "iterations" else
             _join(field, name) if name in _WORKLOAD_KEYS else field)
    return SpecError(where, text(err.problem), text(err.fix))


def _parse_phases(raw: object, field: str) -> tuple[JobPhase, ...]:
    example = "phases = [{compute_ms = 40, share = 0.5}, {compute_ms = 60, share = 0.5}]"
    items = _array(raw, field, "{compute_ms = ..., share = ...}")
    if not 2 <= len(items) <= MAX_PHASES:
        raise SpecError(field, f"has {len(items)} phases",
                        f"give 2 to {MAX_PHASES} phases (or compute_ms for one), e.g. {example}")
    phases = []
    for i, item in enumerate(items):
        t = _Table(item, f"{field}[{i}]", _PHASE_KEYS, example)
        compute = validate.number(t.get("compute_ms", "compute_ms = 40"), t.at("compute_ms"), 0,
                                  MAX_COMPUTE_MS, "compute_ms = 40")
        share = validate.number(t.get("share", "share = 0.5"), t.at("share"), 0, 1, "share = 0.5",
                                lo_open=True)
        phases.append(JobPhase(compute, share))
    total = sum(p.share for p in phases)
    if abs(total - 1) > 1e-6:
        raise SpecError(field, f"shares add up to {total:g}",
                        "make the phases' shares of the iteration's bytes add up to 1")
    if sum(p.compute_ms for p in phases) <= 0:
        raise SpecError(field, "no phase computes", "give at least one phase compute_ms > 0")
    return tuple(phases)


def _parse_placement(
    raw: object, field: str, workers: int, topology: Topology
) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(host, str) for host in raw):
        raise SpecError(field, f"must be a list of host names (got {raw!r})",
                        f'use e.g. placement = ["h1", "h{topology.hosts}"], or omit it')
    if len(raw) != workers:
        raise SpecError(field, f"lists {len(raw)} host(s) for {workers} workers",
                        f"give exactly {workers} hosts, one per worker, or omit it")
    names = topology.host_names()
    for k, host in enumerate(raw):
        if host not in names:
            raise SpecError(f"{field}[{k}]", f"unknown host {host!r}",
                            f"use hosts h1..h{topology.hosts}")
        if host in raw[:k]:
            raise SpecError(f"{field}[{k}]", f"host {host!r} is used twice by this job",
                            "give every worker of a job its own host")
    if len({topology.segment_index(host) for host in raw}) < 2:
        raise SpecError(field, *_not_crossing(topology, raw))
    return tuple(raw)


def _not_crossing(topology: Topology, hosts: list[str]) -> tuple[str, str]:
    groups = [f"{seg[0]}..{seg[-1]}" if len(seg) > 1 else seg[0] for seg in topology.segments()]
    if topology.kind == "dumbbell":
        return (
            f"all workers are on the {topology.side(hosts[0])} side, so the job would not "
            "share the bottleneck",
            f"put at least one worker on each side (left {groups[0]}, right {groups[1]}), "
            "or omit placement",
        )
    return (
        "all workers hang off the same leaf, so the job's traffic would not cross the "
        "spine and would not share the bottleneck",
        f"put workers under at least two leaves ({', '.join(groups)}), or omit placement",
    )


def _parse_scheme(raw: object, index: int) -> Scheme:
    path = f"schemes[{index}]"
    t = _Table(raw, path, _SCHEME_KEYS, "write each scheme as a [[schemes]] table")
    name = validate.name(t.get("name", 'name = "mltcp-cubic"'), t.at("name"), _SCHEME_NAME,
                         "1-30 of a-z, 0-9, '_' and '-'", '"mltcp-cubic"')
    if name in RESERVED_SCHEME_NAMES:
        raise SpecError(t.at("name"),
                        f"{name!r} is reserved for the baseline with each job alone on the link",
                        'choose another name, e.g. "cubic"')
    cc = t.get("cc", 'cc = "cubic"')
    if cc not in CC_NAMES:
        raise SpecError(t.at("cc"), f"unknown congestion control {cc!r}",
                        f"use one of: {', '.join(CC_NAMES)}")
    example = "mltcp = true (MLTCP) or mltcp = false (the standard algorithm)"
    mltcp = validate.flag(t.get("mltcp", example), t.at("mltcp"), example)
    schedule = t.get("schedule", "", "none")
    if schedule not in SCHEDULES:
        raise SpecError(t.at("schedule"), f"unknown schedule {schedule!r}",
                        f"use one of: {', '.join(SCHEDULES)}")
    if schedule != "none" and mltcp:
        raise SpecError(t.at("schedule"), f"{schedule} is a centralized alternative to MLTCP",
                        "compare them as two schemes: one with mltcp = true, one with "
                        f'mltcp = false and schedule = "{schedule}"')
    if not mltcp:
        for key in _F_KEYS:
            if key in t.data:
                raise SpecError(t.at(key), "only applies with mltcp = true (the standard "
                                "algorithm has F = 1)", f"remove {key}, or set mltcp = true")
        return Scheme(name, cc, False, 0.0, 1.0, None, schedule)
    default = Aggressiveness()
    with _under(path):
        f = Aggressiveness(t.get("slope", "", default.slope),
                           t.get("intercept", "", default.intercept), t.get("cap", "", None))
    cap = None if f.cap is None else float(f.cap)
    mode = t.get("dcqcn_mode", "", None)
    if mode is not None and mode not in DCQCN_MODES:
        raise SpecError(t.at("dcqcn_mode"), f"unknown DCQCN policy mode {mode!r}",
                        "use timer (divide rpg_time_reset and rpg_byte_reset by F) or "
                        "rates (scale rpg_ai_rate/rpg_hai_rate by F)")
    return Scheme(name, cc, True, float(f.slope), float(f.intercept), cap, dcqcn_mode=mode)


# -- loading ------------------------------------------------------------------

def _examples_dir() -> Traversable:
    return resources.files("mltcp.lab.scenario").joinpath("examples")


def list_examples() -> list[str]:
    """Names of the scenarios shipped with the package, loadable by name."""
    return example_names(_examples_dir())


def load_scenario(path_or_name: str | Path) -> Scenario:
    """Load a scenario from a TOML file, or a packaged example by bare name."""
    source: Traversable
    if isinstance(path_or_name, str) and _SCENARIO_NAME.fullmatch(path_or_name):
        source = _examples_dir().joinpath(f"{path_or_name}.toml")
        if not source.is_file():
            source = Path(path_or_name)
            if not source.is_file():
                raise SpecError(
                    "scenario", f"no example named {path_or_name!r} and no such file",
                    f"give a path to a .toml file or one of: {', '.join(list_examples())}",
                )
    else:
        source = Path(path_or_name)
    return parse_scenario(read_toml(source, "scenario", list_examples()), str(source))
