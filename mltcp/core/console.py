"""Lines on stderr that a signal cannot split, and the one status line a terminal rewrites.

``print(text, file=sys.stderr)`` writes the text and then its newline, two writes, and
CPython runs a pending signal's handler between them (its buffered writer checks for
signals after every raw write; stderr is written through).  A Ctrl-C or SIGTERM there
left the progress line open, and the command's last line was glued to it:
``... util 0.751mltcp: interrupted (SIGTERM)`` (a CI run of rl-train's interrupt test;
13 of 20 such interrupts of a print() loop split a line, 0 of 20 of this module's).

Here a line and its newline go out in one write.  A status line rewritten in place on a
terminal (``\\r`` ... erase to the end) is left open, and remembered: the next line ends
it first, so ``mltcp: interrupted (SIGINT)`` after a Ctrl-C during a live progress line
starts a line of its own.  Every write gives up silently when stderr is gone (a closed
SSH session or pipe): the command goes on, or ends, without it.
"""

from __future__ import annotations

import contextlib
import sys

_ERASE_TO_END = "\033[K"
_status_open = [False]      # a status line is on the terminal without its newline


def _write(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):     # ValueError: stderr closed
        sys.stderr.write(text)
        sys.stderr.flush()


def line(text: str) -> None:
    """``text`` as one line of its own, in one write."""
    head = "\n" if _status_open[0] else ""
    _status_open[0] = False
    _write(f"{head}{text}\n")


def status(text: str, *, last: bool = False) -> None:
    """On a terminal, ``text`` in place of the status line before it, the line left
    open for the next (``last``: this one closes it); elsewhere a line each time (the
    caller decides how often)."""
    if not sys.stderr.isatty():
        line(text)
        return
    _status_open[0] = not last
    _write(f"\r{text}{_ERASE_TO_END}" + ("\n" if last else ""))
