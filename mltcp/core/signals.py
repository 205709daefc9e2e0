"""One teardown path for every way a long command is stopped: Ctrl-C, SIGTERM, SIGHUP.

Commands that change the host while they run (``mltcp run`` on the netns testbed:
namespaces, jobs, ECN markers, a module; ``mltcp dcqcn run``: the NIC's knobs) undo
their changes in ``finally`` blocks and context managers.  Python runs those for Ctrl-C
(a KeyboardInterrupt unwinds the main thread), but by default SIGTERM (``kill``,
``systemctl stop``) and SIGHUP (a dropped SSH session) end the process on the spot and
leave everything behind.  :func:`unwinding` makes all three the same: the signal raises
:class:`Terminated` (a KeyboardInterrupt) in the main thread, so the very same teardown
runs, and the command exits 128 + the signal's number (130, 143, 129).

A second signal must not cut that teardown short, or it would leave half of it behind:
once the first one has raised, later ones are ignored (said on stderr; SIGKILL still
stops the process at once).  Code that must not be interrupted half way before any
signal came (recording what it created, a teardown after a normal end) runs under
:func:`deferred`: a signal arriving inside is held and raised when the block ends.

The raise lands in whatever Python code runs at that moment, which may be a library's
bare ``except:`` that swallows it (``copyreg._slotnames`` does, under every
``deepcopy`` of an ``OrderedDict``: stable-baselines3 makes one per environment step);
the work then goes on, and, the first signal having been taken, later ones are ignored.
Loops that run such code call :func:`check` at their own safe points, which raises the
signal again.

Standard library only: the host commands (``dcqcn run``) and the lab both use it.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from mltcp.core import console

TEARDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def exit_code(signo: int) -> int:
    """The shell's convention for "ended by signal N": 128 + N (130 for Ctrl-C)."""
    return 128 + int(signo)


def name(signo: int) -> str:
    return signal.Signals(signo).name


class Terminated(KeyboardInterrupt):
    """A teardown signal, raised in the main thread so that ``finally`` blocks run.

    A KeyboardInterrupt, so that everything that already cleans up on Ctrl-C cleans up
    on SIGTERM and SIGHUP too, and ``except Exception`` does not swallow it."""

    def __init__(self, signo: int) -> None:
        super().__init__(name(signo))
        self.signo = int(signo)

    @property
    def exit_code(self) -> int:
        return exit_code(self.signo)


@dataclass
class _State:
    received: int | None = None    # the signal that started the teardown
    pending: int | None = None     # one that arrived inside deferred(), not raised yet
    depth: int = 0                 # nesting of deferred()
    active: bool = False           # unwinding() is installed
    said_ignored: set[int] = field(default_factory=set)   # signals whose "ignored" was said


_state = _State()


def _say(message: str) -> None:
    console.line(f"mltcp: {message}")     # nothing if stderr went with the SSH session


def _handler(signo: int, frame: FrameType | None) -> None:
    if _state.received is not None:
        if signo not in _state.said_ignored:   # once each: a burst must not recurse here
            _state.said_ignored.add(signo)
            _say(f"{name(signo)} during teardown: ignored, still cleaning up "
                 "(SIGKILL would stop at once and leave the rest behind)")
        return
    if _state.depth > 0:
        if _state.pending is None:
            _state.pending = signo
            _say(f"{name(signo)}: finishing the current step first, then tearing down")
        return
    _state.received = signo
    raise Terminated(signo)


_handler.mltcp_unwinds = True  # type: ignore[attr-defined]


def unwinds(handler: Any) -> bool:
    """Whether ``handler`` is this module's: a signal then unwinds the main thread, so a
    library's own last-resort signal hook (:mod:`mltcp.lab.scenario.emulation.netns`) stays out."""
    return bool(getattr(handler, "mltcp_unwinds", False))


@contextlib.contextmanager
def unwinding(signals: tuple[signal.Signals, ...] = TEARDOWN_SIGNALS,
              exiting: bool = False) -> Iterator[None]:
    """While inside, each of ``signals`` raises :class:`Terminated` in the main thread
    (only the first; later ones are ignored).  Outside the main thread it does nothing:
    Python delivers signals to the main thread only.

    ``exiting``: the process ends when a teardown signal has unwound it (a command), so
    after such an unwinding later signals stay ignored instead of getting their previous
    handlers back: the default would kill the process on its way out, after the teardown,
    and it would not exit 128 + N.  Ignored by ``SIG_IGN``, silently, not by a Python
    handler: the interpreter's finalization puts every Python handler back to the default
    (a SIGTERM 50 ms after the first, when the teardown was quick, killed ``mltcp run``
    with -15 there) but leaves ``SIG_IGN`` alone.  And the objects alive then are moved
    out of the cyclic collector's reach (:func:`gc.freeze`): the finalization runs full
    collections over every module's objects, which with torch, numba and matplotlib
    loaded (``cluster rl-train``) took 1.2 of the 1.3 s between Ctrl-C and the exit (the
    handler itself runs within milliseconds); frozen, the exit takes 0.25 s.  What that
    skips is the finalizers of objects in reference cycles, which Python does not promise
    at exit anyway; the unwinding has closed the command's files and removed its
    temporaries in its ``with`` and ``finally`` blocks (``atexit`` and
    ``weakref.finalize`` still run), and the memory goes back with the process."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals}
    outer = _state.active
    if not outer:
        _state.received = _state.pending = None
        _state.depth = 0
        _state.active = True
        _state.said_ignored.clear()
    try:
        for s in signals:
            signal.signal(s, _handler)
        yield
    finally:
        ended_by_signal = exiting and _state.received is not None
        for s, handler in previous.items():
            if ended_by_signal:
                signal.signal(s, signal.SIG_IGN)
            else:
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if ended_by_signal:
            gc.freeze()
        if not outer:
            _state.active = False
            _state.received = _state.pending = None


def _release() -> None:
    """Leaving the outermost deferred block: raise a signal that arrived inside it."""
    signo, _state.pending = _state.pending, None
    if signo is not None and _state.received is None:
        _state.received = signo
        raise Terminated(signo)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A step that must not be cut in half (a resource made and recorded, a teardown):
    a teardown signal arriving inside is raised when the step ends.  Nests; a no-op
    unless :func:`unwinding` is installed, or outside the main thread."""
    if not _state.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    _state.depth += 1
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        _state.depth -= 1
        if _state.depth == 0:
            if failed:     # the body's error unwinds already; the signal's exit code is lost
                if _state.pending is not None and _state.received is None:
                    _state.received = _state.pending
                _state.pending = None
            else:
                _release()


def received() -> int | None:
    """The teardown signal received so far, if any."""
    return _state.received


def check() -> None:
    """Raise the teardown signal received again, where the code that it should have
    unwound still runs: some library swallowed its :class:`Terminated` in a bare
    ``except:`` (module docstring).  Without this a Ctrl-C landing there was lost, the
    command ran on, and every later Ctrl-C was ignored as if the teardown were under
    way.  A loop that runs third-party code calls it at its own safe points (``cluster
    rl-train``: every environment step and every optimiser step); a no-op without a
    signal, outside :func:`unwinding` or the main thread, and inside :func:`deferred`
    (a step not to be cut in half: the next check after it raises)."""
    if (_state.received is not None and _state.active and _state.depth == 0
            and threading.current_thread() is threading.main_thread()):
        raise Terminated(_state.received)
