"""Packet captures on the testbed's wires, for checks made from the packets themselves.

A :class:`Capture` records the frames one device of one namespace sends and receives:
an AF_PACKET socket made inside the namespace (:func:`mltcp.host.namespaces.socket_in_netns`:
a thread enters it, no process) and bound to the device, read by a thread into memory.
Each frame keeps its first :data:`SNAP_BYTES` bytes (every header, no payload), whether
the device sent it, and the kernel's timestamp of it on ``time.monotonic()``'s clock, the
one the traffic generator's iteration times use.  A device's egress capture sees packets
as they leave its qdisc, after the ECN marker (clsact egress, before the queue) acted.
:mod:`mltcp.lab.scenario.emulation.wire` dissects the frames with scapy.

Why not scapy's ``AsyncSniffer``: it dissects every packet in the receiving thread, and
at the testbed's tens of thousands of packets per second on 2 cores it falls behind
until the kernel drops frames from the socket, silently for the checks.  Appending raw
frames keeps up, and the socket's PACKET_STATISTICS says how many the kernel dropped
(``kernel_drops``): a check trusts a capture only when that is 0.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType

from mltcp.host.namespaces import netns_path, socket_in_netns

SNAP_BYTES = 128              # Ethernet + IPv4 (20..60) + TCP (20..60) headers
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35           # SCM_TIMESTAMPNS too: a struct timespec per frame
RCVBUF_BYTES = 64 << 20       # seconds of 1 Gbit/s: the reader may lose the CPU a while
_POLL_S = 0.05


@dataclass(frozen=True)
class Frame:
    """One captured frame: when (monotonic seconds), whether the device sent it, and its
    first SNAP_BYTES bytes."""

    t: float
    outgoing: bool
    data: bytes


@dataclass
class Capture:
    """Frames of device ``dev`` in namespace ``ns`` (None: this process's own), from
    start() (or entering ``with``) to stop()."""

    ns: str | None
    dev: str
    frames: list[Frame] = field(default_factory=list, init=False)
    kernel_drops: int = field(default=0, init=False)
    """Frames the kernel could not queue to the capture socket (it was full)."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._sock = socket_in_netns(netns_path(self.ns) if self.ns else None,
                                     socket.AF_PACKET, socket.SOCK_RAW,
                                     socket.htons(ETH_P_ALL))
        try:
            with contextlib.suppress(PermissionError):   # root only; the default is smaller
                self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
            self._sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self._sock.bind((self.dev, ETH_P_ALL))      # the name is looked up in its netns
            self._sock.settimeout(_POLL_S)
            self._drain_unbound()
        except BaseException:
            self._sock.close()
            raise

    def _drain_unbound(self) -> None:
        """Frames of other devices queued before bind(); then zero the drop counter."""
        self._sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                self._sock.recv(1)
        self._sock.settimeout(_POLL_S)
        self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)   # reading it resets it

    def _offset(self) -> float:
        """CLOCK_MONOTONIC minus CLOCK_REALTIME (the kernel stamps frames on the latter)."""
        return time.monotonic() - time.clock_gettime(time.CLOCK_REALTIME)

    def _recv_one(self, offset: float) -> bool:
        try:
            data, anc, _flags, addr = self._sock.recvmsg(SNAP_BYTES, socket.CMSG_SPACE(16))
        except TimeoutError:
            return False
        t = None
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", raw[:16])
                t = sec + nsec / 1e9 + offset
        if addr[0] == self.dev:
            self.frames.append(Frame(t if t is not None else time.monotonic(),
                                     addr[2] == PACKET_OUTGOING, data))
        return True

    def _run(self) -> None:
        offset = self._offset()
        try:
            while not self._stop.is_set():
                self._recv_one(offset)
            # What was queued before stop() still counts: read until a quiet 0.2 s (or
            # 2 s, should the device still be busy).
            self._sock.settimeout(0.2)
            deadline = time.monotonic() + 2.0
            while self._recv_one(offset) and time.monotonic() < deadline:
                pass
        except BaseException as exc:
            self._error = exc

    def start(self) -> Capture:
        self._thread = threading.Thread(target=self._run, name=f"capture-{self.dev}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Capture:
        """Stop, read the kernel's drop count, close the socket; raises what the reader hit."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            _packets, drops = struct.unpack(
                "II", self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.kernel_drops += drops
        finally:
            self._sock.close()
        if self._error is not None:
            raise self._error
        return self

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
