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
                exit_s: float = 10.0, *, delay_s: float = 0.0,
                signo: signal.Signals = signal.SIGINT, prelude: str = "",
                env: dict[str, str] | None = None) -> Interrupted:
    """Run ``mltcp argv`` in ``cwd``; once a stderr line contains ``running`` (within
    ``wait_s``), wait ``delay_s`` more, send ``signo`` (SIGINT: Ctrl-C) and wait at most
    ``exit_s`` for the exit (then SIGKILL: the test fails on the latency, not by
    hanging).  ``prelude``: Python run in the child before the command (a test's marker
    line, e.g. when a phase starts; the command itself is ``python -m mltcp.cli``'s);
    ``env``: the child's environment."""
    command = ["-m", "mltcp.cli"] if not prelude else [
        "-c", prelude + "\nimport runpy\nrunpy.run_module('mltcp.cli', run_name='__main__')"]
    # The child must not inherit SIGINT ignored (as every command of a suite started in
    # the background by a shell without job control does).
    proc = subprocess.Popen([sys.executable, *command, *argv], cwd=cwd, env=env,
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
        time.sleep(delay_s)
        sent = time.monotonic()
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
    while (line := lines.get(timeout=5)) is not None:
        seen.append(line)
    return Interrupted(proc.returncode, latency, "".join(seen))
