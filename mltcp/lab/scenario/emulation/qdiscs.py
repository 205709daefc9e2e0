"""Root-qdisc counters over rtnetlink: one socket per namespace, opened once.

The testbed samples every shaped port's queue every 50 ms.  It used to fork ``nsenter
tc -s -j qdisc show`` per switch and sample: a process start each time (3 ms on an idle
host, much more on a busy 2-core one, CPU taken from the emulated network it measures).
A :class:`QdiscReader` instead holds one NETLINK_ROUTE socket created inside the
namespace (:func:`mltcp.host.namespaces.socket_in_netns`: a thread enters it, no process)
and asks it the dump ``tc -s qdisc show`` asks (RTM_GETQDISC); pyroute2 encodes the
request and decodes the answers (``tcmsg``, ``ifinfmsg``).  The counters are the very
ones tc prints: bytes and packets from TCA_STATS2's basic block, drops, overlimits,
requeues, backlog and qlen from its queue block.

Why not pyroute2's ``IPRoute``: its synchronous API ties its socket to the thread that
made it (another thread gets a RuntimeError) and runs an asyncio loop per call (1.5 ms
a dump here, against 0.3 ms for the request below); a fabric's queues are read from the
sampler's thread and from the caller's.  Here one lock serialises the request/answer
pairs on the socket, so any thread may read.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from pyroute2.netlink import NETLINK_ROUTE, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_GETQDISC, TC_H_ROOT
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.marshal import MarshalRtnl
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from mltcp.host.namespaces import netns_path, socket_in_netns
from mltcp.lab.scenario.emulation.netns import NetnsError, QdiscStats

RECV_BYTES = 1 << 16          # above the kernel's 32 KB dump messages: never truncated
TIMEOUT_S = 2.0


def stats_of(msg: Any) -> QdiscStats:
    """A decoded RTM_NEWQDISC's counters (TCA_STATS2, as tc reads them; the legacy
    TCA_STATS block where a qdisc has no TCA_STATS2)."""
    st2 = msg.get_attr("TCA_STATS2")
    if st2 is not None:
        basic = st2.get_attr("TCA_STATS_BASIC") or {}
        queue = st2.get_attr("TCA_STATS_QUEUE") or {}
        return QdiscStats(bytes=basic.get("bytes", 0), packets=basic.get("packets", 0),
                          drops=queue.get("drops", 0), overlimits=queue.get("overlimits", 0),
                          backlog=queue.get("backlog", 0), qlen=queue.get("qlen", 0),
                          requeues=queue.get("requeues", 0))
    old = msg.get_attr("TCA_STATS") or {}
    return QdiscStats(bytes=old.get("bytes", 0), packets=old.get("packets", 0),
                      drops=old.get("drop", 0), overlimits=old.get("overlimits", 0),
                      backlog=old.get("backlog", 0), qlen=old.get("qlen", 0))


class QdiscReader:
    """Root-qdisc counters of every device of one namespace (``None``: this process's)."""

    def __init__(self, ns: str | None) -> None:
        self.ns = ns
        self._sock = socket_in_netns(netns_path(ns) if ns else None, socket.AF_NETLINK,
                                     socket.SOCK_RAW, NETLINK_ROUTE)
        self._sock.settimeout(TIMEOUT_S)
        self._sock.bind((0, 0))
        self._marshal = MarshalRtnl()
        self._lock = threading.Lock()
        self._seq = 0
        self._names: dict[int, str] = {}

    def _dump(self, msg: Any, msg_type: int) -> list[Any]:
        """Send one dump request and collect its answers (up to NLMSG_DONE)."""
        with self._lock:
            self._seq += 1
            seq = self._seq
            msg["header"]["type"] = msg_type
            msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
            msg["header"]["sequence_number"] = seq
            msg.encode()
            self._sock.send(msg.data)
            out = []
            while True:
                try:
                    data = self._sock.recv(RECV_BYTES)
                except TimeoutError:
                    raise NetnsError(f"no answer to a netlink dump in namespace "
                                     f"{self.ns or '(own)'} within {TIMEOUT_S:g} s") from None
                for answer in self._marshal.parse(data):
                    header = answer["header"]
                    if header["sequence_number"] != seq:
                        continue        # the tail of a dump an earlier timeout gave up on
                    if header.get("error") is not None:
                        raise NetnsError(f"netlink dump in namespace {self.ns or '(own)'} "
                                         f"failed: {header['error']}")
                    if header["type"] == NLMSG_DONE:
                        return out
                    out.append(answer)

    def _refresh_names(self) -> None:
        msg = ifinfmsg()
        msg["family"] = socket.AF_UNSPEC
        self._names = {m["index"]: m.get_attr("IFLA_IFNAME")
                       for m in self._dump(msg, RTM_GETLINK)}

    def read(self, dev: str | None = None) -> dict[str, QdiscStats]:
        """Root-qdisc counters by device name (of ``dev`` only, when given)."""
        msg = tcmsg()
        msg["family"] = socket.AF_UNSPEC
        roots = {m["index"]: stats_of(m) for m in self._dump(msg, RTM_GETQDISC)
                 if m["parent"] == TC_H_ROOT}
        if any(index not in self._names for index in roots) or (
                dev is not None and dev not in self._names.values()):
            self._refresh_names()       # devices come and go; names are cached meanwhile
        out = {self._names[i]: st for i, st in roots.items() if i in self._names}
        if dev is None:
            return out
        if dev not in self._names.values():
            raise NetnsError(f"no device {dev} in namespace {self.ns or '(own)'}")
        return {dev: out[dev]} if dev in out else {}

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> QdiscReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
