"""mltcp.core.console: one write per line, the open status line, and the reason for both
(a signal between a line's text and its newline glued the command's last line to it)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from mltcp.core import console


class _Stream:
    """A stderr that records each write (and says whether it is a terminal)."""

    def __init__(self, tty: bool) -> None:
        self.tty, self.writes = tty, []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


def _stream(monkeypatch: pytest.MonkeyPatch, tty: bool) -> _Stream:
    """In the test's body: pytest's capture puts its own stderr back between a fixture's
    setup and the test's call."""
    s = _Stream(tty)
    monkeypatch.setattr(sys, "stderr", s)
    monkeypatch.setattr(console, "_status_open", [False])
    return s


def test_a_line_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(monkeypatch, tty=False)
    console.line("[episode 8, 100/1000000 steps, 1 s] reward 0.375")
    console.line("mltcp: interrupted (SIGTERM)")
    assert stream.writes == ["[episode 8, 100/1000000 steps, 1 s] reward 0.375\n",
                             "mltcp: interrupted (SIGTERM)\n"]


def test_on_a_terminal_the_next_line_ends_an_open_status_line_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(monkeypatch, tty=True)
    console.status("[#....] 1/5 tasks")
    console.status("[##...] 2/5 tasks")
    console.line("mltcp: interrupted (SIGINT)")
    console.line("next")
    assert stream.writes == ["\r[#....] 1/5 tasks\033[K", "\r[##...] 2/5 tasks\033[K",
                             "\nmltcp: interrupted (SIGINT)\n", "next\n"]


def test_a_last_status_closes_the_line_it_rewrote(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(monkeypatch, tty=True)
    console.status("[####.] 4/5 tasks")
    console.status("[#####] 5/5 tasks", last=True)
    console.line("wrote out/report.json")
    assert stream.writes == ["\r[####.] 4/5 tasks\033[K", "\r[#####] 5/5 tasks\033[K\n",
                             "wrote out/report.json\n"]


def test_elsewhere_a_status_is_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(monkeypatch, tty=False)
    console.status("[#....] 1/5 tasks")
    console.line("mltcp: interrupted (SIGINT)")
    assert stream.writes == ["[#....] 1/5 tasks\n", "mltcp: interrupted (SIGINT)\n"]


def test_a_closed_stderr_is_no_error(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = open(os.devnull, "w")      # noqa: SIM115 (closed on purpose)
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    console.line("nobody reads this")


_CHILD = """
from mltcp.core import console
try:
    i = 0
    while True:
        console.line(f"progress {i} " + "x" * 50)
        i += 1
except KeyboardInterrupt:
    console.line("mltcp: interrupted (SIGINT)")
"""


def test_ctrl_c_between_lines_never_glues_the_last_line_to_a_progress_line() -> None:
    """A child writes progress lines as fast as it can to a file and is interrupted at
    20 moments; each time its last line must be a line of its own.  print() in the same
    loop glued 13 of 20 (CPython runs the handler between its two writes)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for trial in range(20):
        with tempfile.TemporaryFile() as out:
            child = subprocess.Popen([sys.executable, "-c", _CHILD], stderr=out, env=env)
            try:
                while os.fstat(out.fileno()).st_size < 1000:   # it is writing lines
                    assert child.poll() is None, "the child ended by itself"
                    time.sleep(0.01)
                time.sleep(0.002 * trial)
                child.send_signal(signal.SIGINT)
                assert child.wait(timeout=30) == 0
            finally:
                child.kill()
            out.seek(0)
            lines = out.read().decode().splitlines()
        assert lines[-1] == "mltcp: interrupted (SIGINT)", (trial, lines[-2:])
        assert all(ln.startswith("progress ") and ln.endswith("x" * 50) for ln in lines[:-1])
