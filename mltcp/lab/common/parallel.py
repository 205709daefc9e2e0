"""Independent runs fanned out: on a pool of this host's worker processes
(``--parallel N``), or on a running Dask cluster (``--dask ADDR``).

Both wings fan runs out the same way (a sweep's chunks of grid points, a cluster
experiment's runs): :func:`fan_out` gives a :class:`Fanout`, a ``concurrent.futures``
executor either way, so the caller submits, waits with ``concurrent.futures.wait`` or
``as_completed`` and reads results with one piece of code for both.  One run at a time
needs neither: the callers run it in their own process.

**The local pool** is the standard library's ``ProcessPoolExecutor``, its workers
forked by multiprocessing's *fork server* (:data:`START_METHOD`), not spawned and not
forked from this process:

* a worker is forked from a small single-threaded server, never from this process,
  which may run threads (a fork copies whatever locks they held) and the CLI's signal
  handlers;
* the server is started here with SIGINT ignored, and a process inherits an ignored
  signal through fork and exec (Python then leaves it ignored), so every worker
  ignores SIGINT from its first instruction.  A terminal's Ctrl-C reaches the whole
  process group: it stops this process alone (the usual one line, exit 130), which
  cancels what is queued and terminates the workers, none of which printed a
  KeyboardInterrupt traceback, even one still starting.  With spawn, each worker would
  start as a fresh interpreter from the thread that submits, and a Ctrl-C during its
  start (a second of imports) would print its traceback;
* the server imports the modules the tasks need once (``preload``: numpy, numba, the
  fluid engine), and a worker forked from it starts in milliseconds, not the second of
  imports each spawned worker pays.

Workers get one BLAS/OpenMP thread each (N workers on N cores: a matrix product in
each must not start N threads more) and each watches this process: gone, even by a
SIGKILL or the kernel's OOM killer, it exits (the fork server, which every worker keeps
open a pipe to, then exits too), so no worker goes on with hours of runs for no one.
On Dask (:mod:`mltcp.lab.common.distributed`), a large argument shared by many tasks is
sent once (:meth:`Fanout.share`).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mltcp.core.errors import MltcpError
from mltcp.lab.common import distributed

FLAG = "--parallel"
START_METHOD = "forkserver"
# One thread per worker for the numeric libraries (unless the user set them), as
# distributed's nanny gives its workers.
SINGLE_THREADED = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:                  # not Linux
        return os.cpu_count() or 1


class Fanout:
    """Where a fan-out's tasks run: ``executor`` (``submit`` returns a
    ``concurrent.futures.Future``), ``slots`` tasks at once, ``local`` when they run on
    this host's worker processes (which share this process's stderr: their progress
    lines are seen)."""

    def __init__(self, executor: cf.Executor, slots: int, local: bool,
                 share: Callable[[Any], Any] | None = None) -> None:
        self.executor, self.slots, self.local = executor, slots, local
        self._share = share

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> cf.Future:
        return self.executor.submit(fn, *args, **kwargs)

    def share(self, value: Any) -> Any:
        """``value`` as an argument of many tasks: sent once to a Dask cluster (a future
        of it there), itself for the local pool (pickled with each task)."""
        return self._share(value) if self._share is not None else value


@contextmanager
def fan_out(workers: int, dask_address: str | None,
            preload: Sequence[str] = ()) -> Iterator[Fanout]:
    """A :class:`Fanout` onto the Dask cluster at ``dask_address``, else onto a pool of
    ``workers`` local processes whose fork server imports ``preload`` (module names).
    Left normally, it waits for what was submitted; left by an exception (Ctrl-C, a
    teardown signal, a failed task), what is queued is cancelled, and the local workers
    are terminated at once (on Dask, the tasks are cancelled on the cluster)."""
    if dask_address:
        with distributed.dask_client(dask_address) as client:
            executor = client.get_executor(pure=False)
            slots = max(sum(client.nthreads().values()), 1)
            try:
                yield Fanout(executor, slots, False,
                             lambda value: client.scatter(value, broadcast=False))
            except BaseException:
                executor.shutdown(wait=False)    # cancels its tasks on the cluster
                raise
        return
    pool = local_pool(workers, preload)
    try:
        yield Fanout(pool, workers, True)
    except BrokenProcessPool as exc:
        stop(pool)
        script = _calling_script()
        if script is not None:
            raise MltcpError(
                f"a worker process died ({exc}): each worker imports {script} (Python's "
                "multiprocessing), which must start its work under `if __name__ == "
                "\"__main__\":`; else was it killed, or out of memory? run with fewer at "
                "once") from None
        raise MltcpError(f"a worker process died ({exc}): was it killed, or out of memory? "
                         f"run with fewer at once ({FLAG})") from None
    except BaseException:
        stop(pool)
        raise
    pool.shutdown(wait=True)


def _calling_script() -> str | None:
    """The script this process runs, where it is one of the caller's own (a pool's
    workers import it, and one that starts its work unguarded breaks the pool); None
    under the ``mltcp`` command or ``python -m``."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None:
        return None                                 # python -m, or an interpreter
    return None if Path(path).name == "mltcp" else path


def local_pool(workers: int, preload: Sequence[str] = ()) -> cf.ProcessPoolExecutor:
    """A pool of ``workers`` processes forked by the fork server (started now, with
    SIGINT ignored, importing ``preload``; :func:`start_fork_server`)."""
    context = multiprocessing.get_context(START_METHOD)
    start_fork_server(context, preload)
    return cf.ProcessPoolExecutor(workers, mp_context=context, initializer=_worker_started,
                                  initargs=(os.getpid(),))


def start_fork_server(context: Any, preload: Sequence[str] = ()) -> None:
    """multiprocessing's fork server, started from here with SIGINT ignored (for the
    milliseconds of its fork and exec: a Ctrl-C then is lost, one at any other time
    stops this process) and :data:`SINGLE_THREADED` in its environment, both of which
    every worker it forks inherits.  It imports ``preload`` before it serves.  One that
    runs already (an earlier pool's: it lives as long as this process) is kept as it
    is; the workers' initializer ignores SIGINT there too."""
    from multiprocessing import forkserver

    context.set_forkserver_preload(list(preload))
    saved = {k: os.environ.get(k) for k in SINGLE_THREADED}
    os.environ.update({k: v for k, v in SINGLE_THREADED.items() if saved[k] is None})
    try:
        if threading.current_thread() is not threading.main_thread():
            forkserver.ensure_running()         # no signal handler can be set from here
            return
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT,
                          previous if previous is not None else signal.SIG_DFL)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)


def _worker_started(owner: int) -> None:
    """In each worker, first: SIGINT ignored (it is already, where the fork server was
    ours), and a thread that ends the worker when ``owner``, the process that made the
    pool, is gone (not its parent: the fork server is)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(owner,), name="mltcp-owner-watch",
                     daemon=True).start()


def _exit_with(owner: int) -> None:
    """Wait for process ``owner`` to end (a pidfd becomes readable; without pidfds, a
    look once a second), then end this process."""
    try:
        fd = os.pidfd_open(owner)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):           # no pidfd_open (not Linux >= 5.3)
        while True:
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                os._exit(1)
            except OSError:
                pass
            time.sleep(1)
    select.select([fd], [], [])
    os._exit(1)


def stop(pool: cf.ProcessPoolExecutor) -> None:
    """Stop ``pool`` now: cancel what is queued, terminate the workers (a run in one
    takes as long as it takes: minutes to days), and wait for them and for the pool's
    thread (an interpreter exits only after it)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.terminate()
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            process.join(5)
    if manager is not None and manager is not threading.current_thread():
        manager.join(5)
