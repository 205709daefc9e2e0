"""``python -m mltcp.workloads.torchrun``: torchrun, whose Ctrl-C is one line, not a
traceback.  Its flags are torchrun's, unchanged::

    python -m mltcp.workloads.torchrun --standalone --nproc-per-node 2 \\
        -m mltcp.workloads.ddp --model resnet18 --iterations 100

A terminal's Ctrl-C reaches torchrun and every rank (one process group).  Each rank of
the workload ends with its own line and 130 (:func:`mltcp.workloads.ddp.main`), but
torchrun's own handler raises ``SignalException`` for SIGINT, SIGTERM, SIGHUP and
SIGQUIT, stops the ranks with that signal, logs it, and lets the exception leave its
``main``: a Python traceback, and exit 1 rather than 128 + N.  Nothing a rank does can
change that, nor can torchrun's options: ``--signals-to-handle`` without SIGINT (the
launcher overwrites ``TORCHELASTIC_SIGNALS_TO_HANDLE`` from it) leaves Python's
KeyboardInterrupt, a traceback too, exit -2, and the ranks killed by SIGTERM in their
own teardown (no line of theirs).  So this module runs torchrun's very
``main`` (``torch.distributed.run.main``, what the ``torchrun`` script calls: the same
rendezvous, ranks, restarts and shutdown) and ends that exception, or a KeyboardInterrupt
before the ranks start (the rendezvous), in one line and 128 + N, the ranks having been
stopped by torchrun as before.  Its log lines of that shutdown ("Received 2 death signal,
shutting down workers", "Sending process N closing signal SIGINT") are dropped: the one
line says it.  A rank that fails is torchrun's report as before (its ChildFailedError).

The hosts backend keeps ``python -m torch.distributed.run``: there Ctrl-C never reaches
a torchrun (the run ends every worker process with its cgroup's ``cgroup.kill``), and its
output goes to the run's worker logs.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Iterator, Sequence

PROG = "python -m mltcp.workloads.torchrun"

# torchrun's loggers that report a shutdown on a signal, and the messages they use
# (templates, before formatting); other records pass.
AGENT_LOGGER = "torch.distributed.elastic.agent.server.api"
PROCESSES_LOGGER = "torch.distributed.elastic.multiprocessing.api"
SIGNAL_RECEIVED = "Received %s death signal, shutting down workers"
RANK_SIGNALLED = "Sending process %s closing signal %s"


class _SignalShutdownFilter(logging.Filter):
    """Drops torchrun's log of a shutdown on a signal: the signal received and each rank
    sent it.  Ranks stopped for another reason (one failed) are still logged."""

    def __init__(self) -> None:
        super().__init__()
        self.signalled = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == SIGNAL_RECEIVED:
            self.signalled = True
            return False
        return not (self.signalled and record.msg == RANK_SIGNALLED)


@contextlib.contextmanager
def _quiet_signal_shutdown() -> Iterator[None]:
    """:class:`_SignalShutdownFilter` on torchrun's two loggers while it runs."""
    quiet = _SignalShutdownFilter()
    loggers = [logging.getLogger(name) for name in (AGENT_LOGGER, PROCESSES_LOGGER)]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _interrupted(signo: int) -> int:
    """The one line of a run stopped by ``signo`` and its exit status, 128 + N (130 for
    Ctrl-C), as the ranks and the ``mltcp`` commands answer."""
    with contextlib.suppress(OSError):          # stderr may be gone with the terminal
        sys.stderr.write(f"{PROG}: interrupted ({signal.Signals(signo).name})\n")
        sys.stderr.flush()
    return 128 + int(signo)


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun with ``argv`` (default: this command's arguments); its exit status, or
    128 + N after the one line when a signal stopped it."""
    try:
        return _run(argv)
    except KeyboardInterrupt:       # before torchrun's handler: importing torch, rendezvous
        return _interrupted(signal.SIGINT)


def _run(argv: Sequence[str] | None) -> int:
    """torchrun's ``main`` under :func:`_quiet_signal_shutdown`; its SignalException (the
    ranks already stopped by torchrun) becomes the one line."""
    try:
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.run import main as torchrun
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        sys.stderr.write(f"{PROG}: error: needs {exc.name}: pip install 'mltcp[torch]'\n")
        return 3
    try:
        with _quiet_signal_shutdown():
            torchrun(None if argv is None else list(argv))
    except SignalException as stop:
        return _interrupted(stop.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
