"""The processes one testbed run starts, in a process group of their own.

Why a group: a run's teardown must stop everything the run started (job drivers, and
whatever they or :meth:`~mltcp.lab.scenario.emulation.fabric.Fabric.run` started), not only the
children it still has a handle on, and one ``killpg`` does that.  A group of its own
also keeps the terminal's Ctrl-C (and a dropped session's SIGHUP) away from the
children: the run alone receives it and stops them in order, after which it detaches
its jobs, markers and module (:mod:`mltcp.core.signals`).

Why this is safe: a process group's id is the pid of its first member, and Linux does
not hand that number to a new process while any member of the group exists; a member
that is our child exists until we reap it.  So the group is signalled only while one
of our children in it is unreaped (checked with ``WNOWAIT``, which does not reap).

When the *run* is SIGKILLed no teardown runs: children ask the kernel for SIGKILL when
their parent dies instead (``PR_SET_PDEATHSIG``: the traffic driver does it itself,
:func:`pdeathsig_argv` wraps other commands in ``setpriv --pdeathsig KILL``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

GRACE_S = 1.0
_POLL_S = 0.01


def pdeathsig_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` run so that it is SIGKILLed when the thread that started it dies."""
    return ["setpriv", "--pdeathsig", "KILL", "--", *argv]


def _exited(proc: subprocess.Popen[Any]) -> bool:
    """Whether ``proc`` has ended, without reaping it (its pid, and so its group's id,
    stay reserved until it is reaped)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


class ProcessGroup:
    """Start processes in one group (per run); :meth:`stop` ends the whole group."""

    def __init__(self) -> None:
        self.members: list[tuple[subprocess.Popen[Any], int]] = []   # (child, its group)
        self.pgid: int | None = None

    @property
    def procs(self) -> list[subprocess.Popen[Any]]:
        return [proc for proc, _ in self.members]

    def popen(self, argv: Sequence[str], **popen_kw: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen(argv)`` as a member of this group (the first one founds it)."""
        live = self.pgid if self.pgid in self._nameable() else None
        proc = subprocess.Popen(list(argv), process_group=live or 0, **popen_kw)
        if live is None:
            self.pgid = proc.pid
        self.members.append((proc, self.pgid or proc.pid))
        return proc

    def _nameable(self) -> set[int]:
        """Group ids with one of our children still unreaped in them: only those are
        certain to name our group (and joining a group that emptied fails, so a member
        started after that founds a new one)."""
        return {pgid for proc, pgid in self.members if proc.returncode is None}

    def running(self) -> bool:
        return any(not _exited(p) for p in self.procs)

    def signal(self, signo: int) -> None:
        """Send ``signo`` to every member of the group (while the group can be named)."""
        for pgid in self._nameable():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signo)

    def stop(self, grace_s: float = GRACE_S) -> None:
        """SIGTERM to the group, SIGKILL after ``grace_s``; every child reaped after."""
        if self.running():
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        self.signal(signal.SIGKILL)     # members that are not our children, too
        for proc in self.procs:
            proc.wait()
