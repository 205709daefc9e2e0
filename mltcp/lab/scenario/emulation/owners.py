"""Which live testbed run owns which namespaces and jobs, so that cleanup spares them.

``mltcp testbed clean`` removes what killed runs left behind; a run that is still going
must keep its namespaces and jobs.  Every run (a :class:`~mltcp.lab.scenario.emulation.fabric.
Fabric`, and the netns backend's run around it) therefore claims what it is about to
create in a record under ``STATE_DIR/testbed/``:

* ``<id>.lock``: an flock the run holds for its lifetime (:mod:`mltcp.host.ownership`;
  the kernel drops it however the run dies), naming its pid and start time;
* ``<id>.json``: the namespaces and jobs it claimed, each written *before* it is created,
  so a run killed half way is still attributed.

:func:`sort_out` splits the namespaces and jobs found on the host into those of live
runs (kept) and the rest (removable): names no record claims belong to runs that died
before records existed, or whose record went with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.host import state
from mltcp.host.ownership import Held, Holder, OwnerLock, holder_of

RUNS_DIRNAME = "testbed"


def runs_dir() -> Path:
    return state.STATE_DIR / RUNS_DIRNAME


@dataclass(frozen=True)
class RunRecord:
    """One run's claims as found on disk; ``holder`` is None when the run is gone."""

    id: str
    holder: Holder | None
    namespaces: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()

    @property
    def alive(self) -> bool:
        return self.holder is not None


class RunOwner:
    """This process's claim on what one run creates; :meth:`close` when it is all gone."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = directory or runs_dir()
        self.id = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.lock = OwnerLock.acquire(self.dir / f"{self.id}.lock")
        self.namespaces: list[str] = []
        self.jobs: list[str] = []
        self._save()

    @property
    def record_path(self) -> Path:
        return self.dir / f"{self.id}.json"

    def claim(self, namespaces: Iterable[str] = (), jobs: Iterable[str] = ()) -> None:
        """Record names about to be created (call before creating them)."""
        self.namespaces += [n for n in namespaces if n not in self.namespaces]
        self.jobs += [j for j in jobs if j not in self.jobs]
        self._save()

    def _save(self) -> None:
        tmp = self.dir / f".{self.id}.json.tmp"
        tmp.write_text(json.dumps({"pid": os.getpid(), "namespaces": self.namespaces,
                                   "jobs": self.jobs}))
        os.replace(tmp, self.record_path)   # readers see the old claims or the new ones

    def close(self) -> None:
        """Drop the record, then the lock (idempotent): call once the run's namespaces and
        jobs are gone."""
        if not self.lock.held:
            return
        self.record_path.unlink(missing_ok=True)
        self.lock.release(unlink=True)

    def __enter__(self) -> RunOwner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def records(directory: Path | None = None) -> list[RunRecord]:
    """Every run record under the directory, each marked alive or gone."""
    base = directory or runs_dir()
    out = []
    for lock in sorted(base.glob("*.lock")):
        run_id = lock.name.removesuffix(".lock")
        holder = holder_of(lock)
        claims: dict = {}
        with contextlib.suppress(OSError, ValueError):
            claims = json.loads((base / f"{run_id}.json").read_text())
        out.append(RunRecord(run_id, holder, tuple(claims.get("namespaces", ())),
                             tuple(claims.get("jobs", ()))))
    return out


def forget(record: RunRecord, directory: Path | None = None) -> bool:
    """Remove a dead run's record (after its leftovers went); False if it came alive."""
    base = directory or runs_dir()
    lock = base / f"{record.id}.lock"
    try:
        taken = OwnerLock.acquire(lock, wait_s=0)
    except (Held, OSError):     # held: alive after all
        return False
    (base / f"{record.id}.json").unlink(missing_ok=True)
    taken.release(unlink=True)
    return True


@dataclass
class Sorted:
    """Names found on the host, split by whether a live run claims them."""

    remove: list[str] = field(default_factory=list)
    kept: dict[str, list[str]] = field(default_factory=dict)     # run id -> names


def sort_out(found: Iterable[str], runs: Iterable[RunRecord], kind: str) -> Sorted:
    """Split ``found`` (namespace or job names) into those claimed by a live run (kept,
    by run) and the rest; ``kind`` is ``"namespaces"`` or ``"jobs"``."""
    owner_of = {name: run.id for run in runs if run.alive for name in getattr(run, kind)}
    out = Sorted()
    for name in found:
        if name in owner_of:
            out.kept.setdefault(owner_of[name], []).append(name)
        else:
            out.remove.append(name)
    return out
