"""Ctrl-C, for real, on an ``mltcp`` command in a child process: started, waited for until
a line on its stderr says it is running, sent SIGINT, and timed until it exits.

The engines return to Python every ~0.1 s of wall time (``fluid_engine.SLICE_S``), so a
long run unwinds within a second; the tests allow more, for a busy machine."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Interrupted:
    returncode: int
    latency_s: float          # SIGINT sent -> the process gone
    stderr: str


def _lines(stream, out: queue.Queue) -> None:  # type: ignore[no-untyped-def]
    for line in stream:
        out.put(line)
    out.put(None)


def ctrl_c_when(argv: list[str], cwd: Path, running: str, wait_s: float = 15.0,
                exit_s: float = 10.0) -> Interrupted:
    """Run ``mltcp argv`` in ``cwd``; once a stderr line contains ``running`` (within
    ``wait_s``), send SIGINT and wait at most ``exit_s`` for the exit (then SIGKILL: the
    test fails on the latency, not by hanging)."""
    # The child must not inherit SIGINT ignored (as every command of a suite started in
    # the background by a shell without job control does).
    proc = subprocess.Popen([sys.executable, "-m", "mltcp.cli", *argv], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + wait_s
        while not any(running in line for line in seen):
            line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert line is not None, f"exited before running: {''.join(seen)}"
            seen.append(line)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
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
    while (line := lines.get(timeout=5)) is not None:
        seen.append(line)
    return Interrupted(proc.returncode, latency, "".join(seen))
