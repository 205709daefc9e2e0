"""The NIC's RDMA transmit byte counter, read by polling, turned into byte deltas.

DCQCN runs in NIC firmware, so the tuner cannot see ACKs the way the TCP datapath does.
Instead it polls a cumulative transmit counter and feeds the growth between two polls to
:class:`mltcp.core.iteration.IterationTracker` (see :mod:`mltcp.host.dcqcn.tuner`). Sources:

* ``/sys/class/infiniband/<dev>/ports/<port>/counters/port_xmit_data`` -- the IBA
  PortXmitData counter, which counts **4-byte words**, not bytes (the IBA spec defines it
  as octets divided by 4). :func:`ib_port_counter` multiplies by 4. On an mlx5 RoCE port
  it counts the RDMA traffic of that PCI function (the netdev's TCP/IP traffic is not in
  it); old HCAs have a 32-bit version that saturates, mlx5 reports 64 bits.
* ``ethtool -S <if>`` statistics, e.g. mlx5's ``tx_vport_rdma_unicast_bytes`` (bytes),
  read through the SIOCETHTOOL ioctl on one socket (:mod:`mltcp.host.dcqcn.ethtool`), not
  by running ethtool: a process per 2 ms poll is too much.
* any file holding a byte count (``file:PATH``), for tests and for custom exporters.

A counter that goes *down* (driver reload, counter reset, a 32-bit wrap) yields a delta
of 0 and a new baseline rather than a huge bogus delta.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from mltcp.core.errors import CapabilityError, MltcpError, SpecError
from mltcp.host.dcqcn.backends import SYSFS_NET, check_iface, parse_value
from mltcp.host.dcqcn.ethtool import EthtoolError, EthtoolStats

IB_WORD_BYTES = 4  # port_xmit_data counts 32-bit words
DEFAULT_ETHTOOL_STAT = "tx_vport_rdma_unicast_bytes"


class ByteCounter(Protocol):
    """A cumulative count of bytes sent; only its growth matters."""

    description: str

    def read(self) -> int: ...


@dataclass
class FileCounter:
    """A file holding a cumulative count; ``scale`` converts its unit to bytes."""

    path: Path
    scale: int = 1
    description: str = ""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if not self.description:
            unit = "" if self.scale == 1 else f" x {self.scale} bytes"
            self.description = f"{self.path}{unit}"

    def read(self) -> int:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raise CapabilityError(f"byte counter {self.path} does not exist; fix: name "
                                  "another with --counter") from None
        return parse_value(raw, str(self.path)) * self.scale


def ib_port_counter(root: Path | str, device: str, port: int = 1) -> FileCounter:
    """``port_xmit_data`` of an RDMA device port, converted from 4-byte words to bytes."""
    path = (Path(root) / "sys/class/infiniband" / device / "ports" / str(port) / "counters"
            / "port_xmit_data")
    return FileCounter(path, IB_WORD_BYTES,
                       f"{path} (IBA PortXmitData: 4-byte words, x 4 = bytes)")


@dataclass
class EthtoolCounter:
    """One ``ethtool -S`` statistic, in bytes (mlx5: ``tx_vport_rdma_unicast_bytes``).

    The interface is opened at the first read (the stat names once), then every read is
    one ioctl on that socket."""

    iface: str
    stat: str = DEFAULT_ETHTOOL_STAT
    description: str = field(default="", init=False)
    _stats: EthtoolStats | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        check_iface(self.iface)
        self.description = f"ethtool -S {self.iface}: {self.stat} (SIOCETHTOOL)"

    def read(self) -> int:
        try:
            if self._stats is None:
                self._stats = EthtoolStats(self.iface)
            stats = self._stats.read()
        except EthtoolError as exc:
            if exc.errno == errno.ENODEV:
                raise CapabilityError(f"{exc.strerror}; fix: pass the RoCE netdev with "
                                      "--iface (see `ip link`)") from None
            if exc.errno == errno.EOPNOTSUPP:
                raise CapabilityError(f"{exc.strerror}; fix: use --counter ib:DEV:PORT or "
                                      "--counter file:PATH") from None
            raise MltcpError(f"reading the ethtool statistics of {self.iface} failed: "
                             f"{exc.strerror}") from None
        if self.stat not in stats:
            raise CapabilityError(f"{self.iface} has no ethtool statistic {self.stat!r}; "
                                  "fix: pick one from `ethtool -S` with --counter ethtool:NAME")
        return stats[self.stat]

    def close(self) -> None:
        if self._stats is not None:
            self._stats.close()
            self._stats = None


def rdma_devices(root: Path | str, iface: str) -> list[str]:
    """The RDMA devices behind a netdev (mlx5: ``device/infiniband/mlx5_N``)."""
    base = Path(root) / SYSFS_NET / check_iface(iface) / "device" / "infiniband"
    return sorted(p.name for p in base.iterdir()) if base.is_dir() else []


def counter_from_spec(spec: str, root: Path | str, iface: str) -> ByteCounter:
    """Build a counter from ``auto``, ``ib:DEV[:PORT]``, ``ethtool[:STAT]`` or ``file:PATH``.

    ``auto`` uses the RDMA device behind ``iface`` (port 1, the only port of an mlx5 PCI
    function) and falls back to ethtool when there is none.
    """
    kind, _, rest = spec.partition(":")
    fix = "use auto, ib:mlx5_0:1, ethtool:tx_vport_rdma_unicast_bytes or file:/path"
    if kind == "auto" and not rest:
        devices = rdma_devices(root, iface)
        if len(devices) == 1:
            return ib_port_counter(root, devices[0], 1)
        return EthtoolCounter(iface)
    if kind == "ib" and rest:
        device, _, port = rest.partition(":")
        if not port:
            return ib_port_counter(root, device, 1)
        if not port.isdigit():
            raise SpecError("counter", f"port {port!r} is not a number", fix)
        return ib_port_counter(root, device, int(port))
    if kind == "ethtool":
        return EthtoolCounter(iface, rest or DEFAULT_ETHTOOL_STAT)
    if kind == "file" and rest:
        return FileCounter(Path(rest))
    raise SpecError("counter", f"cannot use {spec!r}", fix)


@dataclass
class DeltaSampler:
    """Bytes sent since the previous poll (None for the first poll: only a baseline)."""

    counter: ByteCounter
    last: int | None = None
    resets: int = 0

    def sample(self) -> int | None:
        now = self.counter.read()
        prev, self.last = self.last, now
        if prev is None:
            return None
        if now < prev:  # reset, reload or wrap: rebase, never invent traffic
            self.resets += 1
            return 0
        return now - prev
