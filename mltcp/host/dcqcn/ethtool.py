"""A NIC's driver statistics (what ``ethtool -S`` prints), read without a process.

The DCQCN tuner polls one statistic every 2 ms; forking ``ethtool -S`` for each poll
cost a process start per poll.  This reads the same numbers the way ethtool does, with
the SIOCETHTOOL ioctl on one datagram socket opened once: ETHTOOL_GSSET_INFO (how many
statistics), ETHTOOL_GSTRINGS (their names, read at open and again only when the count
changes) and ETHTOOL_GSTATS (the values).

Standard library only (ctypes, fcntl), so the host gains no dependency.  pyroute2 has
the same ioctls (``pyroute2.ethtool.ioctl.IoctlEthtool``), but it sizes the value
buffer from the names it read once, while the kernel writes as many values as the
driver has *now* (``ethtool_get_stats`` ignores the caller's count): a statistic set
that grows under a running tuner (mlx5 adds per-channel counters when ``ethtool -L``
raises the channels) would be written past the buffer.  Here the count is asked before
every read and the buffer has room to spare; a changed count reloads the names.
Reading statistics needs no privilege.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import socket
import struct
import threading

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GSSET_INFO = 0x37
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
SPARE_STATS = 4096        # room for statistics the driver adds between two ioctls


class EthtoolError(OSError):
    """The interface has no driver statistics, or is gone."""


class _IfReq(ctypes.Structure):
    """struct ifreq with ifr_data: the name and a pointer to the ethtool command."""

    _fields_ = [("ifr_name", ctypes.c_char * IFNAMSIZ), ("ifr_data", ctypes.c_void_p),
                ("_pad", ctypes.c_char * 16)]


class _SsetInfo(ctypes.Structure):
    _fields_ = [("cmd", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("sset_mask", ctypes.c_uint64), ("data", ctypes.c_uint32)]


class EthtoolStats:
    """The driver statistics of one interface of this network namespace, by name."""

    def __init__(self, iface: str) -> None:
        if not iface or len(iface.encode()) >= IFNAMSIZ:
            raise EthtoolError(errno.EINVAL, f"{iface!r} is not an interface name")
        self.iface = iface
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._lock = threading.Lock()
        try:
            self.names = self._names(self._count())
        except BaseException:
            self._sock.close()
            raise

    def _ioctl(self, cmd: ctypes.Array[ctypes.c_char] | ctypes.Structure) -> None:
        req = _IfReq(self.iface.encode(), ctypes.addressof(cmd))
        try:
            fcntl.ioctl(self._sock, SIOCETHTOOL, req)
        except OSError as exc:
            what = {errno.ENODEV: "no such interface",
                    errno.EOPNOTSUPP: "its driver has no ethtool statistics"}.get(
                        exc.errno, exc.strerror)
            raise EthtoolError(exc.errno, f"{self.iface}: {what}") from None

    def _count(self) -> int:
        info = _SsetInfo(cmd=ETHTOOL_GSSET_INFO, sset_mask=1 << ETH_SS_STATS)
        self._ioctl(info)
        if not info.sset_mask & (1 << ETH_SS_STATS):
            raise EthtoolError(errno.EOPNOTSUPP,
                               f"{self.iface}: its driver has no ethtool statistics")
        return int(info.data)

    def _names(self, count: int) -> list[str]:
        buf = ctypes.create_string_buffer(12 + (count + SPARE_STATS) * ETH_GSTRING_LEN)
        struct.pack_into("III", buf, 0, ETHTOOL_GSTRINGS, ETH_SS_STATS, count)
        self._ioctl(buf)
        n = struct.unpack_from("I", buf, 8)[0]
        raw = buf.raw[12:12 + n * ETH_GSTRING_LEN]
        return [raw[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode(errors="replace")
                for i in range(0, len(raw), ETH_GSTRING_LEN)]

    def read(self) -> dict[str, int]:
        """Every statistic's current value, by name."""
        with self._lock:
            for _ in range(3):
                count = self._count()
                if count != len(self.names):
                    self.names = self._names(count)
                buf = ctypes.create_string_buffer(8 + (count + SPARE_STATS) * 8)
                struct.pack_into("II", buf, 0, ETHTOOL_GSTATS, count)
                self._ioctl(buf)
                n = struct.unpack_from("I", buf, 4)[0]
                if n == len(self.names):
                    return dict(zip(self.names, struct.unpack_from(f"{n}Q", buf, 8),
                                    strict=True))
                # The set changed between the two ioctls: ask again.
            raise EthtoolError(errno.EAGAIN, f"{self.iface}: its statistics keep changing")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> EthtoolStats:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
