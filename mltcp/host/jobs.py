"""Jobs: the control plane's view of training jobs under MLTCP on this host.

A job is a name, an MLTCP module, F's parameters, a per-iteration byte
budget (given, derived from a job description, or learned) and how its
sockets are found (a cgroup and/or address-prefix/port-range rules,
:mod:`mltcp.host.rules`).  The Python
:class:`JobSpec` is the single source of truth; :func:`render_cfg` turns it
into the kernel's ``struct mltcp_job_cfg``.  Control-plane-only metadata (the
name, the cgroup path, the rules) is kept in a JSON registry under
STATE_DIR; the datapath never reads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from mltcp.core import validate
from mltcp.core.aggressiveness import FP_ONE, MAX_BUDGET_BYTES, Aggressiveness
from mltcp.core.budget import BudgetLearner, JobDescription
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host import datapath, maps, rules
from mltcp.host.state import STATE_DIR, host_lock

DEFAULT_GAP_MS = 5.0
DEFAULT_STALE_S = 30.0


@dataclass(frozen=True)
class JobSpec:
    """Everything that defines a job on this host (validated on construction)."""

    name: str
    cc: str = "cubic"
    budget: int = 0                 # bytes per iteration sent by this host; 0 with learn=True
    learn: bool = False
    slope: float = 1.0
    intercept: float = 1.0
    cap: float | None = None
    gap_ms: float = DEFAULT_GAP_MS
    stale_s: float = DEFAULT_STALE_S
    cgroup: str | None = None
    whole_host: bool = False         # the root cgroup is meant: every socket of the host
    signal: bool = False             # the training loop signals iteration ends (mltcp.hook):
                                     # boundaries from the signal, never from idle gaps
    rules: tuple[rules.Rule, ...] = ()  # alternatives (OR); each one ANDs its conditions
    description: dict | None = None  # JobDescription fields, when the budget came from one

    def __post_init__(self) -> None:
        validate.job_name(self.name, "name")
        if self.cc not in datapath.MODULES:
            raise SpecError("cc", f"unknown congestion control {self.cc!r}",
                            f"choose from {', '.join(datapath.MODULES)}")
        self.aggressiveness  # validates slope/intercept/cap  # noqa: B018
        if self.learn:
            if self.budget:
                raise SpecError("budget", "given together with --learn",
                                "either give the budget or learn it, not both")
        else:
            validate.integer(self.budget, "budget", 1, MAX_BUDGET_BYTES, "150000000 (150MB)")
        validate.number(self.gap_ms, "gap_ms", 0.05, 60_000,
                        fix="use 0.05 .. 60000 ms: longer than ACK gaps within communication, "
                            "shorter than the compute phase")
        if validate.finite(self.stale_s, "stale_s", "use 1 .. 86400 s, or 0") != 0:
            validate.number(self.stale_s, "stale_s", 1, 86_400,
                            fix="use 1 .. 86400 s, or 0 to never fall back")
        if not self.cgroup and not self.rules:
            raise SpecError("cgroup", "the job has no way to find its sockets",
                            "give --cgroup PATH and/or --dst ADDR[/LEN][:PORT[-PORT]] / "
                            "--port / --local-port")
        for rule in self.rules:
            if not isinstance(rule, rules.Rule):
                raise SpecError("rule", f"{rule!r} is not a rule",
                                "build rules with mltcp.host.rules (parse_dst, port_rule)")
        rules.compile_rules((r, 1) for r in self.rules)   # the kernel can hold them

    def describe_rules(self) -> list[str]:
        """Each rule as the datapath reads it (``rule 1: dst 10.0.0.0/24 and port
        29500-29600``), then what a likely mistake in one of them is."""
        lines = [f"rule {i}: {r.describe()}" for i, r in enumerate(self.rules, 1)]
        if len(self.rules) > 1:
            lines.append("a connection that matches any one of these rules joins the job")
        lines += [f"note: {w}" for w in (r.warning() for r in self.rules) if w]
        return lines

    @property
    def aggressiveness(self) -> Aggressiveness:
        return Aggressiveness(slope=self.slope, intercept=self.intercept, cap=self.cap)

    @classmethod
    def from_description(cls, desc: JobDescription, **kw: object) -> JobSpec:
        d = {"gradient_bytes": desc.gradient_bytes, "workers": desc.workers,
             "collective": str(desc.collective), "role": desc.role, "servers": desc.servers}
        return cls(budget=desc.bytes_per_iteration(), description=d, **kw)  # type: ignore[arg-type]

    def to_json(self) -> dict:
        d = asdict(self)
        d["rules"] = [asdict(r) for r in self.rules]
        return d

    @classmethod
    def from_json(cls, d: dict) -> JobSpec:
        d = dict(d)
        d["rules"] = tuple(rules.Rule(**r) for r in d.get("rules", ()))
        return cls(**d)


def cgroup_path(text: str, whole_host: bool = False) -> Path:
    """A cgroup v2 directory, given absolute or relative to the cgroup v2 mount.

    The root cgroup holds every process of the host (sshd, storage, monitoring): a job
    classified by it would put all of their sockets under MLTCP, so it is refused unless
    ``whole_host`` says that is meant."""
    root = datapath.cgroup2_root()
    p = Path(text)
    if not p.is_absolute() or not p.is_relative_to(root):
        p = root / str(text).lstrip("/")
    p = Path(os.path.normpath(p))          # "training/.." is the root too
    if not p.is_relative_to(root):
        raise SpecError("cgroup", f"{text!r} leads out of the cgroup v2 mount {root}",
                        "name a cgroup below it, e.g. training/resnet")
    if not (p / "cgroup.procs").exists():
        raise SpecError("cgroup", f"{p} is not a cgroup v2 directory",
                        f"create it (mkdir under {root}) or name an existing one")
    if p == root and not whole_host:
        raise SpecError("cgroup", f"{p} is the root cgroup: every socket of this host "
                        "(sshd, storage, ...) would join the job",
                        "name the job's own cgroup, or add --whole-host (whole_host = true "
                        "in a job file) if the whole host is the job")
    return p


def render_cfg(spec: JobSpec, budget: int | None = None, signal_seq: int = 0,
               now_ns: int | None = None, signalled: bool = False) -> maps.JobCfg:
    """The kernel's job config for this spec (the one place parameters are rendered).

    ``signalled``: the job has signalled an iteration's end before (the config being
    renewed had ``JOB_SIGNALS``): a job that signals keeps taking its boundaries from the
    signal, declared (``spec.signal``) or not."""
    fixed = spec.aggressiveness.to_fixed()
    flags = maps.JOB_ENABLED | (maps.JOB_SIGNALS if spec.signal or signalled else 0)
    return maps.JobCfg(
        budget=spec.budget if budget is None else budget,
        gap_ns=int(spec.gap_ms * 1e6),
        refreshed_ns=time.monotonic_ns() if now_ns is None else now_ns,
        stale_ns=int(spec.stale_s * 1e9),
        slope_fp=fixed.slope_fp,
        intercept_fp=fixed.intercept_fp,
        cap_fp=fixed.cap_fp,
        signal_seq=signal_seq,
        flags=flags,
        cc=maps.CC_IDS[spec.cc],
        abi=maps.ABI_VERSION,
    )


# -- registry ---------------------------------------------------------------------

@dataclass
class JobRecord:
    id: int
    spec: JobSpec
    learned_budget: int = 0
    links: list[str] = field(default_factory=list)
    origin: str | None = None        # the job file that declared it; None: attached by hand


class RegistryError(MltcpError):
    """jobs.json cannot be read (truncated, edited by hand): the jobs' kernel configs are
    intact, but their names, rules and links are not known any more."""


class Registry:
    """jobs.json under STATE_DIR, read-modify-written under the host lock."""

    def __init__(self, state_dir: Path | None = None) -> None:
        self.dir = state_dir or STATE_DIR
        self.path = self.dir / "jobs.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[dict[str, JobRecord]]:
        with host_lock(self.dir):
            jobs = self._read()
            before = json.dumps(self._dump(jobs), sort_keys=True)
            yield jobs
            after = self._dump(jobs)
            if json.dumps(after, sort_keys=True) != before:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(after, indent=2, sort_keys=True))
                tmp.replace(self.path)

    def read(self) -> dict[str, JobRecord]:
        return self._read()

    def _read(self) -> dict[str, JobRecord]:
        if not self.path.exists():
            return {}
        try:
            raw = json.loads(self.path.read_text())
            if raw.get("datapath") != maps.pinned_map_id("mltcp_job_cfg"):
                # The maps these jobs were written to are gone (unload --all, reboot,
                # manual cleanup): none of these jobs can be live any more.
                return {}
            return {name: JobRecord(id=int(r["id"]), spec=JobSpec.from_json(r["spec"]),
                                    learned_budget=int(r.get("learned_budget", 0)),
                                    links=list(r.get("links", [])),
                                    origin=r.get("origin"))
                    for name, r in raw["jobs"].items()}
        except (ValueError, TypeError, KeyError, AttributeError, MltcpError) as exc:
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RegistryError(
                f"job registry {self.path} is unreadable ({detail}): the jobs keep their "
                "kernel configs while the agent runs; run `mltcp unload --all` and attach "
                "them again") from None

    @staticmethod
    def _dump(jobs: dict[str, JobRecord]) -> dict:
        return {"datapath": maps.pinned_map_id("mltcp_job_cfg"),
                "jobs": {name: {"id": r.id, "spec": r.spec.to_json(),
                                "learned_budget": r.learned_budget, "links": r.links,
                                "origin": r.origin}
                         for name, r in jobs.items()}}

    def clear(self) -> None:
        """Forget every job (the lock file stays: see :mod:`mltcp.host.state`)."""
        with host_lock(self.dir), contextlib.suppress(FileNotFoundError):
            self.path.unlink()


# -- operations ----------------------------------------------------------------------

def _free_id(jobs: dict[str, JobRecord]) -> int:
    used = {r.id for r in jobs.values()}
    for i in range(1, maps.MAX_JOBS):
        if i not in used:
            return i
    raise MltcpError(f"all {maps.MAX_JOBS - 1} job slots are in use: detach a job first")


def attach(spec: JobSpec, registry: Registry | None = None,
           origin: str | None = None) -> JobRecord:
    """Put a job under MLTCP: config, rules, cgroup classifier; all or nothing.
    ``origin``: the job file that declares it (see :mod:`mltcp.host.jobfile`)."""
    registry = registry or Registry()
    cgroup = cgroup_path(spec.cgroup, spec.whole_host) if spec.cgroup else None
    datapath.require_bpf()
    datapath.require_loaded(spec.cc)
    with registry.locked() as jobs:
        if spec.name in jobs:
            raise MltcpError(f"job {spec.name!r} is already attached: "
                             f"`mltcp job detach {spec.name}` first")
        job_id = _free_id(jobs)
        record = JobRecord(id=job_id, spec=spec, origin=origin)
        table = rules_table(jobs, (spec, job_id)) if spec.rules else None
        key = ctypes.c_uint32(job_id)
        try:
            with maps.PinnedMap("mltcp_job_state") as st:
                st.put(key, maps.JobState(f_fp=FP_ONE))
            with maps.PinnedMap("mltcp_job_cfg") as cfg:
                cfg.put(key, render_cfg(spec))
            if table is not None:
                rules.write(table)
                record.links.append(str(datapath.attach_root_rules()))
            if cgroup is not None:
                record.links.append(str(datapath.attach_cgroup(job_id, cgroup)))
        except BaseException:
            _remove_from_kernel(job_id, record.links, jobs)
            raise
        jobs[spec.name] = record
        return record


def rules_table(jobs: dict[str, JobRecord], extra: tuple[JobSpec, int] | None = None,
                without: int | None = None) -> rules.Table:
    """The kernel's rule table for the attached jobs (less job ``without``, plus
    ``extra``'s rules): the one place rules of all jobs are combined, so clashes and the
    kernel's limits are refused before anything is written."""
    owned = [(r, rec.id) for rec in sorted(jobs.values(), key=lambda rec: rec.id)
             if rec.id != without for r in rec.spec.rules]
    names = {rec.id: name for name, rec in jobs.items()}
    if extra is not None:
        owned += [(r, extra[1]) for r in extra[0].rules]
        names[extra[1]] = extra[0].name
    return rules.compile_rules(owned, names=names)


def _remove_from_kernel(job_id: int, links: list[str], others: dict[str, JobRecord]) -> None:
    key = ctypes.c_uint32(job_id)
    for link in links:
        p = Path(link)
        if p.name == "rules-root":
            still_used = any(r.spec.rules for r in others.values() if r.id != job_id)
            if still_used:
                continue
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    if maps.pin_path("mltcp_prefix_rules").exists():
        rules.write(rules_table(others, without=job_id))
    for name, value in (("mltcp_job_cfg", maps.JobCfg()), ("mltcp_job_state", maps.JobState())):
        if maps.pin_path(name).exists():
            with maps.PinnedMap(name) as m:
                m.put(key, value)
    datapath.remove_unused_pins(keep_maps=bool([r for r in others.values() if r.id != job_id]))


def detach(name: str, registry: Registry | None = None) -> JobRecord:
    return detach_many([name], registry)[0]


def detach_many(names: Sequence[str], registry: Registry | None = None) -> list[JobRecord]:
    """Detach the named jobs under one lock, or none of them: every name is checked
    first, so a typo leaves the others attached and names itself.  One process for
    several jobs: a teardown (the hosts backend's) pays one Python start, not one each."""
    registry = registry or Registry()
    datapath.require_bpf()
    wanted = list(dict.fromkeys(names))
    with registry.locked() as jobs:
        missing = [name for name in wanted if name not in jobs]
        if missing:
            raise SpecError("name", f"no job named {', '.join(map(repr, missing))}",
                            "see `mltcp job list`")
        records = []
        for name in wanted:
            record = jobs[name]
            _remove_from_kernel(record.id, record.links, jobs)
            del jobs[name]
            records.append(record)
    return records


def detach_all(registry: Registry | None = None) -> list[str]:
    registry = registry or Registry()
    names = list(registry.read())
    for name in names:
        detach(name, registry)
    registry.clear()
    return names


def signal(name: str, registry: Registry | None = None) -> int:
    """Explicit end-of-iteration signal: the job's next restart of sending (after its
    iteration's bytes are acknowledged) starts a new iteration.  From the first signal on
    the job's boundaries come from its signals (``JOB_SIGNALS``; the budget wrap stays as
    a safety net): a pause inside its communication no longer splits an iteration.
    Under the host lock, so the agent's refresh (which rewrites the config with the
    sequence number it read) cannot lose it."""
    registry = registry or Registry()
    with registry.locked() as jobs:
        record = jobs.get(name)
        if record is None:   # before the maps: an unknown name is bad input anywhere
            raise SpecError("name", f"no job named {name!r}", "see `mltcp job list`")
        with maps.PinnedMap("mltcp_job_cfg") as cfg_map:
            key = ctypes.c_uint32(record.id)
            cfg = cfg_map.get(key, maps.JobCfg)
            if cfg is None or not cfg.flags & maps.JOB_ENABLED:
                raise MltcpError(f"job {name!r} has no live config: re-attach it")
            cfg.signal_seq = (cfg.signal_seq + 1) & 0xFFFFFFFF
            cfg.flags |= maps.JOB_SIGNALS
            cfg_map.put(key, cfg)
            return int(cfg.signal_seq)


def learn_budget(state: maps.JobState, learner: BudgetLearner | None = None) -> int | None:
    """Budget from the datapath's boundary history once it is stable, else None."""
    learner = learner or BudgetLearner()
    learner.reset()
    for sample in state.history():
        learner.add(sample)
    return learner.learned()


def keep_kernel_configs_fresh(now_ns: int | None = None) -> int:
    """Renew every enabled job config in the kernel as it is (no registry needed): what
    the agent does while jobs.json is unreadable, so live jobs do not go stale because
    of a damaged file.  Returns how many configs it renewed."""
    if not maps.pin_path("mltcp_job_cfg").exists():
        return 0
    renewed = 0
    with host_lock(), maps.PinnedMap("mltcp_job_cfg") as cfg_map:
        for job_id in range(1, maps.MAX_JOBS):
            key = ctypes.c_uint32(job_id)
            cfg = cfg_map.get(key, maps.JobCfg)
            if cfg is not None and cfg.flags & maps.JOB_ENABLED:
                cfg.refreshed_ns = time.monotonic_ns() if now_ns is None else now_ns
                cfg_map.put(key, cfg)
                renewed += 1
    return renewed


def refresh(registry: Registry | None = None, now_ns: int | None = None) -> dict[str, int]:
    """Keep every job's config fresh and apply learned budgets; returns learned budgets."""
    registry = registry or Registry()
    learned: dict[str, int] = {}
    if not maps.pin_path("mltcp_job_cfg").exists():
        return learned
    with registry.locked() as jobs, maps.PinnedMap("mltcp_job_cfg") as cfg_map, \
            maps.PinnedMap("mltcp_job_state") as st_map:
        for name, record in jobs.items():
            key = ctypes.c_uint32(record.id)
            cfg = cfg_map.get(key, maps.JobCfg)
            if cfg is None or not cfg.flags & maps.JOB_ENABLED:
                continue
            budget = int(cfg.budget)
            if record.spec.learn:
                state = st_map.get(key, maps.JobState)
                value = learn_budget(state) if state is not None else None
                if value and value != budget:
                    budget = value
                    record.learned_budget = value
                    learned[name] = value
            cfg_map.put(key, render_cfg(record.spec, budget=budget, signal_seq=cfg.signal_seq,
                                        now_ns=now_ns,
                                        signalled=bool(cfg.flags & maps.JOB_SIGNALS)))
    return learned
