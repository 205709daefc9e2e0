"""Run sets: what an output directory holds, written down, and never mixed.

A report counts every trace in its directory, so a directory that holds the runs of
two scenarios, or of one scenario on two backends, gives a report whose rows mean
nothing (and whose title names only one of them).  So every command that writes
results (``run``, ``compare``, ``sweep``, ``demo``, ``cluster run``) first *claims*
its output directory for one run set, recorded in ``runset.json``:

* the kind of result (``scenario``, ``sweep``, ``cluster``), the scenario's or
  config's name and the digest of its full definition (every parameter that decides
  the runs, as the validated spec renders it), and the backend: together, the run
  set's identity;
* the schemes with their effective parameters (the F each ran with) and the seeds
  run so far;
* each invocation that wrote into it: its argv, the mltcp version, the time.

A directory that holds another run set (or results without a manifest) is refused
with one line before anything runs; ``--force`` removes that run set's results first.
Adding runs to the same run set (more seeds, another scheme of the same scenario,
the dedicated baseline) is allowed and extends the manifest.  Files that are not
results (a user's notes) are never touched.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mltcp
from mltcp.core.errors import SpecError
from mltcp.lab.common import inputfile
from mltcp.lab.common.atomic import write_json

MANIFEST = "runset.json"
SCHEMA = "mltcp.runset/1"
KINDS = ("scenario", "sweep", "cluster")
# The command line of this invocation, as the CLI parsed it (mltcp.cli.main sets it);
# empty when the lab is used as a library, and then sys.argv is recorded.
COMMAND_LINE: list[str] = []
# What the lab's commands write into an output directory: what --force removes.
OUTPUTS = ("traces", "report.json", "summary.md", "iterations.parquet", "iterations.csv",
           "sweep.parquet", "sweep.csv", "sweep.json", "jobs.parquet", "jobs.csv",
           "cells.parquet", "cells.csv", "*.png", "*.pdf", MANIFEST)


def command_line() -> list[str]:
    """This invocation's command line: as the CLI parsed it, else (the lab used as a
    library) the interpreter's argv."""
    return list(COMMAND_LINE or sys.argv)


def digest(definition: Any) -> str:
    """A short, stable fingerprint of a JSON-serialisable definition (keys sorted)."""
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class RunSet:
    """One run set: its identity (kind, name, digest, backend) and what it holds."""

    kind: str
    name: str
    digest: str
    backend: str
    schemes: dict[str, dict[str, Any]] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    invocations: tuple[dict[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpecError("runset.kind", f"{self.kind!r} is not a kind of run set",
                            f"use one of {', '.join(KINDS)}")

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return self.kind, self.name, self.digest, self.backend

    def describe(self) -> str:
        """``"scenario compatible-pair (digest 1a2b..., backend fluid)"``."""
        return f"{self.kind} {self.name} (digest {self.digest}, backend {self.backend})"

    def merged(self, other: RunSet) -> RunSet:
        """This run set extended by ``other``'s schemes, seeds and invocations."""
        return RunSet(self.kind, self.name, self.digest, self.backend,
                      {**self.schemes, **other.schemes},
                      tuple(sorted({*self.seeds, *other.seeds})),
                      self.invocations + other.invocations)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": self.kind, "name": self.name,
                "digest": self.digest, "backend": self.backend, "schemes": self.schemes,
                "seeds": list(self.seeds), "invocations": list(self.invocations)}

    @classmethod
    def from_dict(cls, data: Any, where: str = MANIFEST) -> RunSet:
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise SpecError(where, f"is not a {SCHEMA} manifest",
                            "remove it (or rerun with --force) to start a new run set")
        try:
            return cls(kind=data["kind"], name=data["name"], digest=data["digest"],
                       backend=data["backend"], schemes=dict(data["schemes"]),
                       seeds=tuple(int(s) for s in data["seeds"]),
                       invocations=tuple(data["invocations"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecError(where, f"is damaged ({type(exc).__name__}: {exc})",
                            "remove it (or rerun with --force) to start a new run set"
                            ) from None


def new(kind: str, name: str, definition: Any, backend: str,
        schemes: Mapping[str, Mapping[str, Any]] | None = None,
        seeds: Iterable[int] = (), argv: Sequence[str] | None = None) -> RunSet:
    """A run set for ``definition`` (what decides its runs) with this invocation."""
    invocation = {"argv": list(argv if argv is not None else command_line()),
                  "mltcp": mltcp.__version__,
                  "time_utc": datetime.datetime.now(datetime.UTC).isoformat(
                      timespec="seconds")}
    return RunSet(kind, name, digest(definition), backend,
                  {k: dict(v) for k, v in (schemes or {}).items()},
                  tuple(sorted(set(seeds))), (invocation,))


def read(out_dir: str | Path) -> RunSet | None:
    """The run set recorded in ``out_dir``, or None where there is no manifest."""
    path = Path(out_dir) / MANIFEST
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(str(path), f"cannot be read ({exc})",
                        "remove it (or rerun with --force) to start a new run set") from None
    return RunSet.from_dict(data, str(path))


def results_in(out_dir: str | Path) -> list[Path]:
    """The results in ``out_dir`` (what the lab writes; other files are not results)."""
    out = Path(out_dir)
    return sorted({p for pattern in OUTPUTS for p in out.glob(pattern)})


# The results that are directories (a scenario's traces); every other result is a file.
RESULT_DIRS = ("traces",)


def _check_in_the_way(out: Path, flag: str) -> None:
    """Refuse an entry of ``out`` that has a result's name but is not what the lab
    writes there: a directory (or a link, a FIFO) named ``report.json`` is the user's,
    not a result, and ``--force`` must not delete it (it used to rmtree it); found only
    when the result is written, it would fail after every run."""
    for path in results_in(out):
        mode = path.lstat().st_mode
        wanted = stat.S_ISDIR if path.name in RESULT_DIRS else stat.S_ISREG
        if not wanted(mode):
            found = "a symbolic link" if stat.S_ISLNK(mode) else \
                (inputfile.kind(mode) or "a file")
            raise SpecError(flag, f"{path} is {found}, where a result of this name is "
                            "written", "move it away (--force removes only the lab's own "
                            "results), or give another directory")


def claim(out_dir: str | Path, runset: RunSet, force: bool = False,
          flag: str = "--out") -> RunSet:
    """Make ``out_dir`` hold ``runset``, before anything runs.

    Another run set there (or results without a manifest) is a one-line SpecError
    naming ``flag``, unless ``force``: then its results are removed first.  The same
    run set is extended.  Returns the run set as now recorded."""
    out = Path(out_dir)
    _check_in_the_way(out, flag)
    try:
        current = read(out)
    except SpecError:
        if not force:
            raise
        current = None
    existing = results_in(out)
    if current is not None and current.identity == runset.identity:
        recorded = current.merged(runset)
    elif (current is None and not existing) or force:
        for path in existing:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        recorded = runset
    else:
        held = (current.describe() if current is not None
                else f"results without a {MANIFEST} ({existing[0].name}, ...)")
        raise SpecError(flag, f"{out} holds another run set: {held}, not "
                        f"{runset.describe()}",
                        "give another directory, or add --force to replace it")
    write_json(out / MANIFEST, recorded.to_dict())
    return recorded


