"""Jobs declared in a file, and the host made to match it (`mltcp apply`, the agent).

``/run/mltcp/jobs.json`` is what is attached *now*; it goes with a reboot, as the
kernel's maps do.  A host that must come back with its jobs declares them in a TOML
file (``/etc/mltcp/jobs.toml`` by convention)::

    modules = ["cubic"]                 # optional: the jobs' modules are loaded anyway

    [[job]]
    name = "resnet"
    cgroup = "training/resnet"
    gradient_bytes = "100MB"
    workers = 8

    [[job]]
    name = "bert"
    dst = ["10.0.0.0/24:29500-29600", "[fd00::/64]:29500"]
    budget = "1.5GB"
    slope = 1.0

A job's keys are ``mltcp job attach``'s flags (``gradient_bytes`` for
``--gradient-bytes``; ``dst``, ``port`` and ``local_port`` are lists, a port is a number
or a range ``"29500-29600"``; rules' syntax and precedence: :mod:`mltcp.host.rules`).
:func:`apply` loads the modules, attaches what is missing, re-attaches what changed and detaches
the jobs an earlier apply of the same file attached that it no longer declares; jobs
attached by hand are left alone.  The whole file is validated, and every cgroup and
module checked, before anything changes.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mltcp.core import validate
from mltcp.core.aggressiveness import preset
from mltcp.core.budget import JobDescription
from mltcp.core.errors import SpecError
from mltcp.host import datapath, jobs, rules
from mltcp.host.state import host_lock

JOB_KEYS = ("name", "cc", "budget", "gradient_bytes", "workers", "collective", "role",
            "servers", "learn", "preset", "slope", "intercept", "cap", "gap_ms", "stale_s",
            "cgroup", "whole_host", "signal", "dst", "port", "local_port")
FILE_KEYS = ("modules", "job")
DEFAULT_FILE = Path("/etc/mltcp/jobs.toml")


def spec_from_fields(f: Mapping[str, Any], at: str = "") -> jobs.JobSpec:
    """A job spec from user-facing fields (``mltcp job attach``'s flags, a file's
    ``[[job]]``); ``at`` prefixes the field names of errors (``job[2].``)."""
    def get(key: str, default: Any = None) -> Any:
        value = f.get(key)
        return default if value is None else value

    for key in ("learn", "whole_host", "signal"):
        if f.get(key) is not None and not isinstance(f[key], bool):
            raise SpecError(f"{at}{key}", f"must be true or false (got {f[key]!r})",
                            f"write {key} = true")
    given = [k for k in ("budget", "gradient_bytes") if f.get(k) is not None]
    if get("learn", False):
        given.append("learn")
    if len(given) != 1:
        raise SpecError(f"{at}budget", "give exactly one way to get the per-iteration budget",
                        "give a budget (BYTES), gradient bytes with workers (G and N), "
                        "or learn")
    if not isinstance(get("preset", "default"), str):
        raise SpecError(f"{at}preset", f"must be a preset's name (got {f['preset']!r})",
                        'e.g. preset = "default"')
    try:
        base = preset(get("preset", "default"))
    except SpecError as exc:
        raise SpecError(f"{at}{exc.field}", exc.problem, exc.fix) from None
    if f.get("cgroup") is not None and not isinstance(f["cgroup"], str):
        raise SpecError(f"{at}cgroup", f"must be a cgroup path (got {f['cgroup']!r})",
                        'e.g. cgroup = "training/resnet"')
    found = [rules.parse_dst(d, f"{at}dst") for d in get("dst", ())]
    found += [rules.port_rule(p, f"{at}port") for p in get("port", ())]
    found += [rules.port_rule(p, f"{at}local_port", local=True) for p in get("local_port", ())]
    kw: dict[str, Any] = dict(
        name=get("name", ""), cc=str(get("cc", "cubic")).removeprefix("mltcp_"),
        slope=get("slope", base.slope), intercept=get("intercept", base.intercept),
        cap=get("cap", base.cap), gap_ms=get("gap_ms", jobs.DEFAULT_GAP_MS),
        stale_s=get("stale_s", jobs.DEFAULT_STALE_S), cgroup=f.get("cgroup"),
        whole_host=bool(get("whole_host", False)), signal=bool(get("signal", False)),
        rules=tuple(found))
    try:
        if f.get("budget") is not None:
            budget = f["budget"]
            return jobs.JobSpec(budget=budget if validate.is_integer(budget) else
                                validate.parse_bytes(str(budget), "budget"), **kw)
        if get("learn", False):
            return jobs.JobSpec(learn=True, **kw)
        if f.get("workers") is None:
            raise SpecError("workers", "missing",
                            "give the number of workers with the gradient bytes")
        desc = JobDescription(
            gradient_bytes=validate.parse_bytes(str(f["gradient_bytes"]), "gradient_bytes"),
            workers=f["workers"], collective=get("collective", "ring_allreduce"),
            role=get("role", "worker"), servers=get("servers", 1))
        return jobs.JobSpec.from_description(desc, **kw)
    except SpecError as exc:
        if not at or exc.field.startswith(at):
            raise
        raise SpecError(f"{at}{exc.field}", exc.problem, exc.fix) from None


@dataclass(frozen=True)
class DeclaredJobs:
    """A job file, validated: the modules to load and the jobs to attach."""

    path: Path
    modules: tuple[str, ...]
    jobs: tuple[jobs.JobSpec, ...]


def _as_list(value: object, where: str) -> list[Any]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return [value]
    if not isinstance(value, list):
        raise SpecError(where, f"must be a list (got {type(value).__name__})",
                        f"e.g. {where.rsplit('.', 1)[-1]} = [29500]")
    return value


def parse(data: Mapping[str, Any], path: Path) -> DeclaredJobs:
    validate.known_keys(data, "", FILE_KEYS)
    tables = data.get("job", [])
    if not isinstance(tables, list):
        raise SpecError("job", "must be an array of tables", "write each job as [[job]]")
    specs: list[jobs.JobSpec] = []
    for i, table in enumerate(tables):
        at = f"job[{i}]."
        if not isinstance(table, dict):
            raise SpecError(f"job[{i}]", f"must be a table (got {table!r})",
                            "write each job as [[job]] followed by its keys")
        validate.known_keys(table, f"job[{i}]", JOB_KEYS)
        fields = dict(table)
        for key in ("dst", "port", "local_port"):
            if key in fields:
                fields[key] = _as_list(fields[key], f"{at}{key}")
        spec = spec_from_fields(fields, at)
        if any(s.name == spec.name for s in specs):
            raise SpecError(f"{at}name", f"{spec.name!r} is declared twice",
                            "give every job its own name")
        specs.append(spec)
    listed = _as_list(data.get("modules", []), "modules")
    for name in listed:
        if not isinstance(name, str):
            raise SpecError("modules", f"must be module names (got {name!r})",
                            'e.g. modules = ["cubic", "reno"]')
    modules = datapath.parse_modules(listed) if listed else []
    modules += [s.cc for s in specs if s.cc not in modules]
    return DeclaredJobs(path=path, modules=tuple(modules), jobs=tuple(specs))


def load_file(path: str | Path) -> DeclaredJobs:
    """Read and validate a job file; one-line errors name the file and the field."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SpecError("file", f"cannot read {path}: {exc.strerror}",
                        "give the path of a job file (e.g. /etc/mltcp/jobs.toml)") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError("file", f"{path} is not valid TOML ({exc})",
                        "fix the syntax at that line") from None
    except UnicodeDecodeError as exc:
        raise SpecError("file", f"{path} is not UTF-8 text (byte {exc.start})",
                        "a job file is TOML, UTF-8 encoded") from None
    try:
        return parse(data, path)
    except SpecError as exc:
        raise SpecError(f"{path}: {exc.field}", exc.problem, exc.fix) from None


@dataclass
class ApplyResult:
    """What :func:`apply` changed (names of modules and jobs)."""

    loaded: list[str] = field(default_factory=list)
    attached: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    detached: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[str]]:
        """The same, for ``mltcp apply --json`` (modules by their congestion-control name)."""
        return {"loaded": [datapath.cc_name(m) for m in self.loaded], "attached": self.attached,
                "replaced": self.replaced, "detached": self.detached,
                "unchanged": self.unchanged}

    def describe(self) -> str:
        parts = [f"{what} {', '.join(names)}" for what, names in (
            ("loaded", [datapath.cc_name(m) for m in self.loaded]), ("attached", self.attached),
            ("re-attached", self.replaced), ("detached", self.detached),
            ("unchanged", self.unchanged)) if names]
        return "; ".join(parts) or "nothing to do"


def _check_before_changing(declared: DeclaredJobs, current: Mapping[str, jobs.JobRecord],
                           changing: Sequence[str]) -> None:
    """What can fail in attach, checked for every job before the first change."""
    for spec in declared.jobs:
        if spec.cgroup:
            jobs.cgroup_path(spec.cgroup, spec.whole_host)
    mine = set(changing)
    # The rule table the host will have once applied: clashes and kernel limits now.
    # Jobs still to attach get ids above the attached ones (only the messages see them).
    kept = {n: rec.id for n, rec in current.items() if n not in mine}
    owned = [(r, kept[n]) for n, rec in current.items() if n in kept for r in rec.spec.rules]
    names = {i: n for n, i in kept.items()}
    incoming = [s for s in declared.jobs if s.name in mine]
    for i, spec in enumerate(incoming, start=max(kept.values(), default=0) + 1):
        owned += [(r, i) for r in spec.rules]
        names[i] = spec.name
    rules.compile_rules(owned, f"{declared.path}: rules", names)


def apply(declared: DeclaredJobs, registry: jobs.Registry | None = None,
          dry_run: bool = False) -> ApplyResult:
    """Make this host match ``declared`` (see the module docstring)."""
    registry = registry or jobs.Registry()
    origin = str(declared.path.resolve())
    result = ApplyResult()
    with host_lock():
        current = registry.read()
        wanted = {s.name: s for s in declared.jobs}
        for name, spec in wanted.items():
            rec = current.get(name)
            if rec is None:
                result.attached.append(name)
            elif rec.spec == spec:
                result.unchanged.append(name)
            else:
                result.replaced.append(name)
        result.detached = sorted(n for n, rec in current.items()
                                 if rec.origin == origin and n not in wanted)
        _check_before_changing(declared, current,
                               [*result.attached, *result.replaced, *result.detached])
        if dry_run:
            result.loaded = [m for m in declared.modules if m not in datapath.loaded_modules()]
            return result
        result.loaded = datapath.load(declared.modules).loaded
        for name in [*result.detached, *result.replaced]:
            jobs.detach(name, registry)
        for name in [*result.replaced, *result.attached]:
            jobs.attach(wanted[name], registry, origin=origin)
    return result
