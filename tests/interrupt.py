"""Ctrl-C, for real, on an ``mltcp`` command in a child process: started, waited for until
a line on its stderr says it is running, sent SIGINT, and timed until it exits.

The engines return to Python every ~0.1 s of wall time (``fluid_engine.SLICE_S``), so a
long run unwinds within a second; the tests allow more, for a busy machine."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Interrupted:
    returncode: int
    latency_s: float          # SIGINT sent -> the process gone
    stderr: str
    left: list[int] = field(default_factory=list)   # group=True: its processes still alive


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (zombies, gone but not yet reaped,
    are not counted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()       # after "pid (comm) "
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _left_in_group(pgid: int, wait_s: float = 3.0) -> list[int]:
    """What is still alive of the command's group once it exited: waited for a little
    (its fork server, say, sees the command gone and exits just after it)."""
    deadline = time.monotonic() + wait_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _lines(stream, out: queue.Queue) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        out.put(line)
    out.put(None)


def ctrl_c_when(argv: list[str], cwd: Path, running: str, wait_s: float = 15.0,
                exit_s: float = 10.0, *, delay_s: float = 0.0,
                signo: signal.Signals = signal.SIGINT, prelude: str = "",
                env: dict[str, str] | None = None, group: bool = False) -> Interrupted:
    """Run ``mltcp argv`` in ``cwd``; once a stderr line contains ``running`` (within
    ``wait_s``), wait ``delay_s`` more, send ``signo`` (SIGINT: Ctrl-C) and wait at most
    ``exit_s`` for the exit (then SIGKILL: the test fails on the latency, not by
    hanging).  ``prelude``: Python run in the child before the command (a test's marker
    line, e.g. when a phase starts; the command itself is ``python -m mltcp.cli``'s);
    ``env``: the child's environment; ``group``: the child leads a process group of its
    own and the signal goes to the whole group, as a terminal's Ctrl-C reaches every
    process the command started (its exit is still the child's), and ``left`` says
    which of them outlived it (none, when the command is right)."""
    command = ["-m", "mltcp.cli"] if not prelude else [
        "-c", prelude + "\nimport runpy\nrunpy.run_module('mltcp.cli', run_name='__main__')"]
    # The child must not inherit SIGINT ignored (as every command of a suite started in
    # the background by a shell without job control does).
    proc = subprocess.Popen([sys.executable, *command, *argv], cwd=cwd, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            process_group=0 if group else None)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + wait_s
        while not any(running in line for line in seen):
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, f"exited before running: {''.join(seen)}"
            seen.append(line)
        time.sleep(delay_s)
        sent = time.monotonic()
        if group:
            os.killpg(proc.pid, signo)
        else:
            proc.send_signal(signo)
        try:
            proc.wait(exit_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        latency = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = _left_in_group(proc.pid) if group else []
        if group:           # what the command left in its group (none, when it is right)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    while (line := lines.get(timeout=5)) is not None:
        seen.append(line)
    return Interrupted(proc.returncode, latency, "".join(seen), left)


def ctrl_c_group_when_ready(argv: list[str], ready: str, env: dict[str, str],
                            delay_s: float = 0.0, exit_s: float = 60.0) -> tuple[int, str]:
    """Run ``argv`` (any command, e.g. a workload under its launcher) as the leader of a
    process group of its own; once a line of its stdout starts with ``ready``, wait
    ``delay_s``, send SIGINT to the whole group (a terminal's Ctrl-C reaches the launcher
    and every rank) and wait at most ``exit_s`` for it to exit (then SIGKILL to the
    group).  Returns the exit status and stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, process_group=0)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:
            if line.startswith(ready):
                break
        else:
            raise AssertionError(f"never printed {ready!r}: {proc.stderr.read()}")
        time.sleep(delay_s)
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=exit_s)
        return code, proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
