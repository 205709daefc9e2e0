"""The lab's one way onto Dask: a local cluster of worker processes, or a running
cluster at an address.

Both wings fan independent runs out over Dask (a sweep's grid points, a cluster
experiment's runs).  The address of a running Dask cluster (``tcp://host:8786``, what
Dask calls its scheduler's address) is given as ``--dask ADDR`` on the command line;
the lab's own schedulers are cluster policies, and nothing here is called one.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mltcp.core.errors import CapabilityError, MltcpError, SpecError

FLAG = "--dask"


def connect(client_class: Any, address: str) -> Any:
    """A Dask client of the cluster at ``address``; a malformed address is bad input,
    an unreachable one a failure, each one line."""
    try:
        return client_class(address, timeout=30)
    except ValueError as exc:
        raise SpecError(FLAG, f"{address!r} is not a Dask address ({exc})",
                        "give e.g. tcp://host:8786") from None
    except (OSError, TimeoutError) as exc:
        raise MltcpError(f"cannot reach the Dask cluster at {address} ({exc}); is it "
                         f"running? (drop {FLAG} for a local cluster)") from None


def require_dask(needed_for: str, instead: str = "") -> None:
    """A one-line CapabilityError without Dask: ``needed_for`` (e.g. "sweeps") run on
    Dask, and what to do ``instead`` if anything."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise CapabilityError(f"{needed_for} run on Dask, which is not installed: "
                              "pip install 'mltcp[sweep]'"
                              + (f" ({instead})" if instead else "")) from None


@contextmanager
def _workers_ignore_sigint() -> Iterator[None]:
    """SIGINT ignored while a local cluster starts its worker processes: a process
    inherits an ignored signal through fork and exec, and Python then leaves it ignored
    (it installs its KeyboardInterrupt handler, and asyncio its own, only over the
    default).  A terminal's Ctrl-C, sent to the whole process group, then stops this
    process alone, which cancels the runs and closes the cluster, instead of each
    worker printing KeyboardInterrupt tracebacks from its event loop.  (Blocking the
    signal instead is not inherited: distributed starts the workers from a thread it
    made before.)  The price: a Ctrl-C during the cluster's start, a second or two, is
    lost; the next one works."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def dask_client(address: str | None, workers: int, needed_for: str,
                instead: str = "") -> Iterator[Any]:
    """A client of the Dask cluster at ``address``, else of a new local cluster of
    ``workers`` single-threaded worker processes; both closed on exit
    (:func:`require_dask` first)."""
    require_dask(needed_for, instead)
    from distributed import Client, LocalCluster

    cluster = client = None
    try:
        if address:
            client = connect(Client, address)
        else:
            with _workers_ignore_sigint():
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                       processes=True, dashboard_address=None)
            client = Client(cluster)
        yield client
    except BaseException:
        if cluster is not None and client is not None:
            _quiet_shutdown(client)
        raise
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


def _quiet_shutdown(client: Any) -> None:
    """Before a local cluster is torn down mid-work (Ctrl-C, a failed run): its workers,
    still heartbeating, would log tracebacks about the scheduler going away; the run's
    own one line says what happened, so their logs are turned down first."""
    def quiet() -> None:
        logging.getLogger("distributed").setLevel(logging.CRITICAL)

    with contextlib.suppress(Exception):
        client.run(quiet)
