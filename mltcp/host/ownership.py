"""Who owns a resource right now: an flock held for the owner's whole lifetime.

A process that changes something for as long as it lives (the DCQCN tuner on a port, a
testbed run's namespaces and jobs) takes an exclusive ``flock`` on a lock file and keeps
it until it ends; the file names it (pid, start time, command).  The kernel drops the
lock when the process dies, however it dies (SIGKILL, OOM), so "is the owner alive" is
one non-blocking ``flock`` away, and a pid that was recycled meanwhile cannot fool it.
Cleanup commands use that to leave live owners' resources alone, and a second owner is
refused with the first one's pid.

Lock files of long-lived, per-name resources (a NIC port) are never unlinked, for the
reason :mod:`mltcp.host.state` gives; per-run ones are unlinked by their owner while it
still holds the lock (:meth:`OwnerLock.release` with ``unlink=True``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mltcp.core import procstat
from mltcp.core.errors import MltcpError

_ACQUIRE_WAIT_S = 0.5     # a probe by a cleanup command holds the lock for microseconds
_READ_TRIES = 20
_POLL_S = 0.01


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    return procstat.start_ticks(pid)


@dataclass(frozen=True)
class Holder:
    """The process that holds (or last held) a lock file."""

    pid: int
    start_ticks: int | None
    since_unix: float
    command: str

    @classmethod
    def me(cls) -> Holder:
        argv = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))
        return cls(os.getpid(), process_start_ticks(os.getpid()), time.time(), argv[:200])

    def describe(self) -> str:
        if self.pid <= 0:
            return "an unknown process"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since_unix))
        return f"pid {self.pid}, since {since}"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Holder | None:
        try:
            d = json.loads(text)
            return cls(int(d["pid"]), d.get("start_ticks"), float(d["since_unix"]),
                       str(d.get("command", "")))
        except (ValueError, KeyError, TypeError):
            return None


class Held(MltcpError):
    """The lock is held by a live process (named in ``holder``)."""

    def __init__(self, path: Path, holder: Holder | None) -> None:
        who = holder.describe() if holder else "an unknown process"
        super().__init__(f"{path} is held by {who}")
        self.path = path
        self.holder = holder


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _read_holder(path: Path) -> Holder | None:
    """The holder a held lock file names; it writes itself in right after locking, so an
    empty file is re-read for a moment."""
    for _ in range(_READ_TRIES):
        with contextlib.suppress(OSError):
            found = Holder.from_json(path.read_text())
            if found is not None:
                return found
        time.sleep(_POLL_S)
    return None


class OwnerLock:
    """An exclusive flock on ``path``, held until :meth:`release` (or the process ends)."""

    def __init__(self, path: Path, fd: int, holder: Holder) -> None:
        self.path, self._fd, self.holder = path, fd, holder

    @classmethod
    def acquire(cls, path: Path | str, wait_s: float = _ACQUIRE_WAIT_S) -> OwnerLock:
        """Take the lock or raise :class:`Held` naming the live holder.  ``wait_s``
        rides out a cleanup command's probe, which holds it for an instant."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + wait_s
        try:
            while not _try_lock(fd):
                if time.monotonic() >= deadline:
                    raise Held(path, _read_holder(path))
                time.sleep(_POLL_S)
            me = Holder.me()
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.to_json().encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, me)

    def release(self, unlink: bool = False) -> None:
        """Give the lock up (idempotent); ``unlink``: remove the file first, while it is
        still ours, so that nobody takes a lock on a file about to vanish unseen."""
        if self._fd < 0:
            return
        if unlink:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = -1

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def __enter__(self) -> OwnerLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder_of(path: Path | str) -> Holder | None:
    """The live holder of the lock at ``path``, or None when nobody holds it (no file, or
    one left by a process that is gone).  Probing takes the lock for an instant."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if _try_lock(fd):
            return None
        found = _read_holder(path)
        return found if found is not None else Holder(0, None, time.time(), "unknown")
    finally:
        os.close(fd)   # also drops the lock if the probe took it
