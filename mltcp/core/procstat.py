"""One reader of ``/proc/PID/stat``: a process's state and start time, for the datapath's
lock owners, the testbed's namespace teardown and the tests.

Why by hand, not psutil: the host datapath's only dependency is prometheus_client, and
these are two fields of one line.  The one trap is the command name (field 2): it is in
parentheses and may itself hold spaces and ``)``, so the fields are split after its
*last* parenthesis, here and nowhere else.
"""

from __future__ import annotations

from pathlib import Path

# Indices into :func:`fields` (proc(5)'s field numbers minus 3: the list starts at field 3).
STATE = 0              # field 3: R, S, D, Z, ...
UTIME, STIME = 11, 12  # fields 14, 15: CPU time in user and kernel mode, clock ticks
START_TICKS = 19       # field 22: start time, clock ticks after boot
POLICY = 38            # field 41: scheduling policy (os.SCHED_*)


def fields(pid: int | str) -> list[str] | None:
    """Fields 3 onwards of ``/proc/PID/stat`` (index 0 is the state), or None when the
    process is gone (or the file is unreadable or cut short)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    _, paren, rest = text.rpartition(")")
    return rest.split() if paren else None


def state(pid: int | str) -> str | None:
    """The process's state letter (``Z``: a zombie), or None when it is gone."""
    found = fields(pid)
    return found[STATE] if found else None


def alive(pid: int | str) -> bool:
    """Whether the process exists and is not a zombie."""
    return state(pid) not in (None, "Z")


def start_ticks(pid: int | str) -> int | None:
    """When the process started, in clock ticks since boot (None: gone)."""
    found = fields(pid)
    try:
        return int(found[START_TICKS]) if found else None
    except (IndexError, ValueError):
        return None
