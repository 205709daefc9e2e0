"""Where the host's control-plane state lives, and the one lock around changing it.

Every command that changes the datapath or the job registry (load, unload, job attach,
detach, signal, the agent's refresh, markers) read-modify-writes shared state: pins and
struct_ops registrations under /sys/fs/bpf/mltcp, the BPF maps, ``jobs.json``.  Two of
them at once (two CLI processes, a CLI and the agent) could unpin each other's maps,
hand out one job id twice or lose a ``job signal`` to the agent's refresh.  So they all
run under :func:`host_lock`: an exclusive ``flock`` on ``STATE_DIR/lock``.

The lock file is never unlinked: a process that opened the old inode would go on
"holding" a lock that a newcomer, opening a fresh file of the same name, never sees.
The lock is re-entrant within a process (a command that detaches every job and then
unloads takes it once per step and may nest), and threads of one process take turns.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from mltcp.core.errors import MltcpError

STATE_DIR = Path(os.environ.get("MLTCP_STATE_DIR", "/run/mltcp"))
LOCK_NAME = "lock"
DEFAULT_LOCK_TIMEOUT_S = float(os.environ.get("MLTCP_LOCK_TIMEOUT_S", "60"))
_POLL_S = 0.02
_SAY_WAITING_AFTER_S = 1.0

_guard = threading.RLock()
_held: dict[Path, list] = {}   # lock path -> [open file, depth]


def lock_path(state_dir: Path | None = None) -> Path:
    return (state_dir or STATE_DIR) / LOCK_NAME


def holder(path: Path) -> int | None:
    """The pid that last took the lock at ``path`` (it may have released it since)."""
    with contextlib.suppress(OSError, ValueError):
        return int(path.read_text().split()[0])
    return None


def _acquire(f: IO[str], path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    said = False
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            now = time.monotonic()
            if now >= deadline:
                raise MltcpError(
                    f"another mltcp command (pid {holder(path) or '?'}) has held {path} for "
                    f"over {timeout_s:.0f} s: wait for it to finish, or stop it if it hangs"
                ) from None
            if not said and now - started > _SAY_WAITING_AFTER_S:
                print(f"mltcp: waiting for {path} (held by pid {holder(path) or '?'})",
                      file=sys.stderr, flush=True)
                said = True
            time.sleep(_POLL_S)


@contextlib.contextmanager
def host_lock(state_dir: Path | None = None,
              timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the host's control-plane lock (``state_dir``'s, by default STATE_DIR's)."""
    path = lock_path(state_dir)
    with _guard:
        entry = _held.get(path)
        if entry is not None:          # nested in this process: already ours
            entry[1] += 1
            try:
                yield
            finally:
                entry[1] -= 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as f:
            _acquire(f, path, timeout_s)
            try:
                f.seek(0)
                f.truncate()
                f.write(f"{os.getpid()}\n")
                f.flush()
                _held[path] = [f, 1]
                yield
            finally:
                _held.pop(path, None)
                fcntl.flock(f, fcntl.LOCK_UN)
