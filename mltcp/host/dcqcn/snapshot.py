"""The on-disk snapshot that makes every knob change undoable, even after a crash.

Before its first write the tuner saves every knob of the port, byte for byte, to
``<state-dir>/<iface>.json`` (write to a temporary file, fsync, rename, fsync the
directory: a crash leaves the old file or the new one, never half of one). The same file
also records, *before* each write, the values the tuner is about to leave behind
(``ours``) and the knobs it stopped touching because someone else edited them
(``backed_off``). That is what lets :func:`restore` tell the tuner's changes from an
administrator's:

* the knob still holds its snapshot bytes: nothing to do;
* it holds a value the tuner wrote (the last one or the one being written when the
  process died, or a half-written file of a knob it was writing): the snapshot bytes
  are written back;
* anything else was someone else's edit: it is left alone and reported, unless
  ``force`` asks to put the snapshot back anyway.

A live tuner holds an flock on ``<state-dir>/<iface>.lock`` for its lifetime
(:func:`live_tuner`): the CLI's restore refuses to pull the knobs from under it.

Only knobs whose contents differ are written: rewriting an unchanged knob is not free
(upstream, writing ``np_cnp_prio`` also resets ``np_cnp_prio_mode``). The file is removed
only after a restore in which nothing failed, so a failed restore can be retried.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mltcp.core.dcqcn.knobs import KNOB_BY_NAME
from mltcp.core.errors import MltcpError, SpecError
from mltcp.host.dcqcn.backends import Backend, parse_value, rebuild
from mltcp.host.ownership import Holder, holder_of

FORMAT = "mltcp-dcqcn-snapshot/1"
OURS_KEPT = 2  # the last value written, and the one being written


@dataclass
class Snapshot:
    """Every knob of one port as found before the tuner touched it, plus the tuner's marks."""

    backend: str
    root: str
    iface: str | None
    pci: str | None
    raw: dict[str, bytes]
    created: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    ours: dict[str, list[int]] = field(default_factory=dict)
    backed_off: list[str] = field(default_factory=list)

    @classmethod
    def take(cls, backend: Backend) -> Snapshot:
        return cls(backend.kind, str(backend.root), backend.iface, backend.pci,
                   {k.name: backend.read_raw(k) for k in backend.knobs()})

    def value(self, name: str) -> int:
        return parse_value(self.raw[name], f"snapshot of {name}")

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "backend": self.backend, "root": self.root,
            "iface": self.iface, "pci": self.pci, "created_unix": self.created,
            "pid": self.pid,
            "knobs": {n: {"raw_b64": base64.b64encode(r).decode(), "value": _value_or_none(r)}
                      for n, r in self.raw.items()},
            "ours": self.ours, "backed_off": self.backed_off,
        }

    @classmethod
    def from_json(cls, data: Mapping, where: str) -> Snapshot:
        if data.get("format") != FORMAT:
            raise MltcpError(f"{where}: not a {FORMAT} file (format {data.get('format')!r})")
        try:
            return cls(data["backend"], data["root"], data["iface"], data["pci"],
                       {n: base64.b64decode(e["raw_b64"], validate=True)
                        for n, e in data["knobs"].items()},
                       data["created_unix"], data["pid"],
                       {n: [int(v) for v in vs] for n, vs in data["ours"].items()},
                       list(data["backed_off"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise MltcpError(f"{where}: damaged snapshot ({exc!r})") from None


def _value_or_none(raw: bytes) -> int | None:
    try:
        return parse_value(raw, "")
    except MltcpError:
        return None


def default_state_dir() -> Path:
    """``/var/lib`` so that a snapshot outlives a crash and a reboot (``MLTCP_DCQCN_STATE_DIR``
    overrides it)."""
    return Path(os.environ.get("MLTCP_DCQCN_STATE_DIR", "/var/lib/mltcp/dcqcn"))


def _show(raw: bytes) -> str:
    return repr(raw.decode(errors="replace").strip())


def snapshot_path(state_dir: Path | str, key: str) -> Path:
    if not key or "/" in key or key in (".", ".."):
        raise SpecError("iface", f"{key!r} cannot name a snapshot file", "pass --iface")
    return Path(state_dir) / f"{key}.json"


def lock_path(state_dir: Path | str, key: str) -> Path:
    """The port's tuner lock, next to its snapshot: a live ``dcqcn run`` holds an flock on
    it (:mod:`mltcp.host.ownership`), so ``restore`` and a second ``run`` can tell."""
    return snapshot_path(state_dir, key).with_suffix(".lock")


def live_tuner(state_dir: Path | str, key: str) -> Holder | None:
    """The live ``dcqcn run`` tuning port ``key`` (by its lock), or None."""
    return holder_of(lock_path(state_dir, key))


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class StateFile:
    """A snapshot bound to its file: every mark is on disk before the write it covers."""

    def __init__(self, path: Path, snapshot: Snapshot) -> None:
        self.path = path
        self.snapshot = snapshot

    @classmethod
    def create(cls, path: Path, backend: Backend) -> StateFile:
        """Snapshot ``backend`` to a new file; refuse if one is left from an earlier run."""
        if path.exists():
            old = load(path)
            raise SpecError(
                "snapshot", f"{path} is left from an earlier run (pid {old.pid}, "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(old.created))}) and "
                "holds the knobs as they were before it",
                f"run `mltcp dcqcn restore --iface {old.iface or backend.key}` first")
        state = cls(path, Snapshot.take(backend))
        state.save()
        return state

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.snapshot.to_json(), indent=1).encode())

    def mark_ours(self, values: Mapping[str, int]) -> None:
        """Record the values about to be written (call before writing them)."""
        for name, value in values.items():
            kept = self.snapshot.ours.setdefault(name, [])
            kept.append(value)
            del kept[:-OURS_KEPT]
        self.save()

    def mark_backed_off(self, name: str) -> None:
        if name not in self.snapshot.backed_off:
            self.snapshot.backed_off.append(name)
            self.save()

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def load(path: Path) -> Snapshot:
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise SpecError("snapshot", f"{path} does not exist: nothing to restore",
                        "check --iface and --state-dir") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise MltcpError(f"{path}: damaged snapshot ({exc})") from None
    return Snapshot.from_json(data, str(path))


@dataclass
class RestoreReport:
    restored: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def lines(self) -> list[str]:
        out = [f"restored {', '.join(self.restored) or 'nothing'}; "
               f"{len(self.unchanged)} knobs were unchanged"]
        out += [f"left alone: {n}: {why}" for n, why in self.skipped.items()]
        out += [f"FAILED: {n}: {why}" for n, why in self.failed.items()]
        return out


def restore(backend: Backend, snap: Snapshot, force: bool = False,
            only: Iterable[str] | None = None) -> RestoreReport:
    """Put the snapshot's bytes back wherever the tuner's changes are still in place."""
    report = RestoreReport()
    wanted = set(only) if only is not None else None
    for name, raw in snap.raw.items():
        if wanted is not None and name not in wanted:
            continue
        k = KNOB_BY_NAME.get(name)
        try:
            if k is None or not backend.has(k):
                raise MltcpError("no such knob on this port any more")
            current = backend.read_raw(k)
            if current == raw:
                report.unchanged.append(name)
                continue
            now = _value_or_none(current)
            # Empty or garbled contents of a knob the tuner was writing: its write was cut
            # short (SIGKILL between truncate and write), so it is the tuner's too.
            ours = name in snap.ours and (now is None or now in snap.ours[name])
            if not force and (name in snap.backed_off or not ours):
                report.skipped[name] = (f"set by someone else to {_show(current)} (was "
                                        f"{_show(raw)}); restore --force puts it back")
                continue
            backend.write_raw(name, raw)
            if backend.read_raw(k) != raw and backend.read(k) != _value_or_none(raw):
                raise MltcpError(f"wrote {raw!r} but read back {backend.read_raw(k)!r}")
            report.restored.append(name)
        except (MltcpError, OSError) as exc:
            report.failed[name] = str(exc)
    return report


def restore_file(path: Path, force: bool = False, root: Path | str | None = None
                 ) -> RestoreReport:
    """Restore from a snapshot file (after a crash too); remove it only if nothing failed."""
    snap = load(path)
    backend = rebuild(snap.backend, root if root is not None else snap.root, snap.iface,
                      snap.pci)
    report = restore(backend, snap, force=force)
    if report.ok:
        path.unlink(missing_ok=True)
    return report
