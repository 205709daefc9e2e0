"""The one teardown path (mltcp.core.signals), with real signals sent to this process:
SIGTERM and SIGHUP unwind the main thread as Ctrl-C does, a second signal cannot cut the
teardown short, and a step under deferred() finishes before the signal lands."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import sys
import time

import pytest

from mltcp.cli import EXIT_INTERRUPTED
from mltcp.core import signals
from mltcp.core.signals import Terminated


def _send(signo: int) -> None:
    """Signal this process; Python runs the handler before the next line."""
    os.kill(os.getpid(), signo)


@pytest.mark.parametrize("signo", signals.TEARDOWN_SIGNALS)
def test_each_signal_unwinds_with_its_exit_code(signo: int) -> None:
    before = {s: signal.getsignal(s) for s in signals.TEARDOWN_SIGNALS}
    torn_down = []
    with pytest.raises(KeyboardInterrupt) as info, signals.unwinding():
        try:
            _send(signo)
            pytest.fail("the signal did not interrupt the main thread")
        finally:
            torn_down.append(True)
    assert torn_down == [True]
    assert isinstance(info.value, Terminated) and info.value.signo == signo
    assert info.value.exit_code == 128 + signo
    assert {s: signal.getsignal(s) for s in signals.TEARDOWN_SIGNALS} == before   # restored
    assert signals.received() is None


def test_exit_codes_follow_the_shells_convention() -> None:
    assert EXIT_INTERRUPTED == 130
    assert (signals.exit_code(signal.SIGHUP), signals.exit_code(signal.SIGTERM)) == (129, 143)


def test_a_second_signal_during_teardown_is_ignored_and_said(
        capsys: pytest.CaptureFixture[str]) -> None:
    steps = []
    with pytest.raises(Terminated) as info, signals.unwinding():
        try:
            _send(signal.SIGHUP)
        finally:
            _send(signal.SIGTERM)       # impatient: must not abort the teardown
            steps.append("first half")
            _send(signal.SIGINT)
            steps.append("second half")
    assert info.value.signo == signal.SIGHUP
    assert steps == ["first half", "second half"]
    err = capsys.readouterr().err
    assert "SIGTERM during teardown: ignored" in err and "SIGINT during teardown" in err


def test_deferred_finishes_the_step_then_raises(capsys: pytest.CaptureFixture[str]) -> None:
    steps = []
    with signals.unwinding(), pytest.raises(Terminated) as info:
        with signals.deferred():
            _send(signal.SIGTERM)
            steps.append("recorded")
            with signals.deferred():        # nested: held until the outermost ends
                steps.append("inner")
            steps.append("outer end")
        steps.append("never")
    assert steps == ["recorded", "inner", "outer end"]
    assert info.value.signo == signal.SIGTERM
    assert "finishing the current step first" in capsys.readouterr().err


def test_the_netns_hook_stays_out_while_the_cli_unwinds() -> None:
    """The lab's last-resort SIGTERM hook (delete namespaces, then die) would skip the
    run's teardown of jobs, markers and module: under unwinding() it is not installed."""
    from mltcp.lab.scenario.emulation import netns

    class Dummy:
        def close(self) -> None:
            pass

    obj = Dummy()
    with signals.unwinding():
        netns.track(obj)
        try:
            assert signals.unwinds(signal.getsignal(signal.SIGTERM))
        finally:
            netns.untrack(obj)


def test_a_command_ended_by_a_signal_ignores_later_ones_on_its_way_out() -> None:
    """`mltcp run` exits 128 + N after its teardown; a second SIGTERM arriving after the
    teardown (while the interpreter exits) must not kill it with the default action.
    And the objects alive are frozen out of the collector's passes that make the
    interpreter's exit slow (1.2 s with torch loaded: ``cluster rl-train``)."""
    before = {s: signal.getsignal(s) for s in signals.TEARDOWN_SIGNALS}
    gc.unfreeze()
    try:
        with pytest.raises(Terminated), signals.unwinding(exiting=True):
            _send(signal.SIGTERM)
        for s in signals.TEARDOWN_SIGNALS:      # ignored on the way out (whatever the
            assert signal.getsignal(s) is signal.SIG_IGN   # process inherited: nohup's
        _send(signal.SIGTERM)                    # SIGHUP is SIG_IGN already); still alive
        _send(signal.SIGHUP)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()                            # this process goes on: the tests
        for s, handler in before.items():
            signal.signal(s, handler)


def test_a_signal_that_some_code_swallowed_is_raised_again_by_check() -> None:
    """A library's bare ``except:`` can swallow the Terminated raised in it; the loop
    around it calls check() at its safe points, which raises the signal again."""
    steps = []
    with pytest.raises(Terminated) as info, signals.unwinding():
        signals.check()                          # nothing received: a no-op
        for step in range(5):
            try:  # noqa: SIM105 -- the library's code, as it is
                if step == 1:
                    _send(signal.SIGTERM)
            except:  # noqa: E722
                pass
            steps.append(step)
            signals.check()
    assert steps == [0, 1] and info.value.signo == signal.SIGTERM
    signals.check()                              # outside unwinding(): a no-op


_EXITING_COMMAND = """
import signal, sys
from mltcp.core import signals
def main():
    try:
        with signals.unwinding(exiting=True):
            print("ready", flush=True)
            while True:
                signal.pause()
    except signals.Terminated as exc:
        return exc.exit_code
sys.exit(main())
"""


def test_signals_while_the_interpreter_exits_do_not_kill_it() -> None:
    """The interpreter's finalization resets Python signal handlers to the default; a
    SIGTERM landing there killed `mltcp run` (-15) after a quick teardown.  SIGTERM every
    millisecond from the first until the process is gone: it still exits 143 (each of 10
    runs; with a Python handler left in place most of them died with -15)."""
    for _ in range(10):
        proc = subprocess.Popen([sys.executable, "-c", _EXITING_COMMAND], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            time.sleep(0.001)
        proc.stdout.close()
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM
