"""The lab's one way onto Dask: a running Dask cluster at an address.

Both wings can fan independent runs out over a Dask cluster (a sweep's grid points, a
cluster experiment's runs), through :mod:`mltcp.lab.common.parallel`; on this host's own
cores they go to a process pool instead, without Dask.  The address of a running Dask
cluster (``tcp://host:8786``, what Dask calls its scheduler's address) is given as
``--dask ADDR`` on the command line, the same flag in both commands; the lab's own
schedulers are cluster policies, and nothing here is called one.
"""

from __future__ import annotations

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
                         f"running? (drop {FLAG} to run on this host's cores)") from None


def require_dask() -> None:
    """A one-line CapabilityError without Dask (the ``sweep`` extra)."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        raise CapabilityError(f"{FLAG} needs Dask, which is not installed: pip install "
                              f"'mltcp[sweep]' (or drop {FLAG}: --parallel N runs on this "
                              "host's cores without it)") from None


def check_address(address: str) -> None:
    """Refuse a malformed ``address`` (one line naming :data:`FLAG`) before anything
    runs, by Dask's own parser (:func:`require_dask` first: a command checks both before
    it makes its output directory)."""
    require_dask()
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, where = parse_address(address)
        _, port = get_backend(scheme).get_address_host_port(where)
        if not 0 < port < 65536:
            raise ValueError(f"port {port} is not 1..65535")
    except NotImplementedError:
        pass                # inproc:// (an in-process cluster's): no host and port
    except ValueError as exc:
        raise SpecError(FLAG, f"{address!r} is not a Dask address ({exc})",
                        "give e.g. tcp://host:8786") from None


@contextmanager
def dask_client(address: str) -> Iterator[Any]:
    """A client of the running Dask cluster at ``address``, closed on exit
    (:func:`check_address` first).  Runs on this host's cores need no Dask: they go to a
    local process pool (:mod:`mltcp.lab.common.parallel`)."""
    check_address(address)
    from distributed import Client

    client = connect(Client, address)
    try:
        yield client
    finally:
        client.close()
