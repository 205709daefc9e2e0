"""The one fabric builder: a network graph made of namespaces, veths and shaped links.

Every emulated network is built here, from the same :class:`~mltcp.lab.scenario.graph.NetworkGraph`
the other backends compute on (a dumbbell, a leaf-spine, or any graph a test makes):
every node is a namespace, every link a veth pair with its own /24, every shaped link
an HTB class with a byte-limited FIFO on *both* egress sides, and routes to every
host's address are installed along all shortest paths (several next hops = ECMP,
hashed on L4 so that connections spread).  The netns backend, ``mltcp demo --live``,
the kernel tests and the benchmarks all run on it.

Why the shaping looks as it does (measured on this machine kind):

* Only htb/tbf/pfifo/bfifo/clsact qdiscs exist, so a bottleneck is an HTB class with
  a FIFO leaf.  HTB needs an explicit burst/cburst of ~500 KB, otherwise the 64 KB
  GSO packets that veth passes through unsplit cap goodput far below the rate.
* The FIFO is a byte limit (bfifo) of ``queue_packets`` full-size frames: veth hands
  the switch GSO packets of up to 64 KB, so a packet count would make the buffer up to
  40x deeper than intended.
* Host devices send single segments by default (``gso_max_segs``): the drop-tail
  queues then drop packets rather than whole 64 KB GSO bursts, which otherwise land on
  whichever flow grows fastest and hide the effect MLTCP relies on.
* Hosts get ``tcp_ecn=1``/``tcp_ecn_fallback=0`` (reliable ECN) and
  ``tcp_no_metrics_save=1`` (no ssthresh carried between runs); IPv6 is off so no
  neighbour discovery crosses a bottleneck.  A BPF congestion control cannot be a
  namespace default (EPERM, and the failed attempt leaks a kernel reference), so
  programs pick their CC per socket.

Building runs ``ip``/``tc`` in batches (a few processes per namespace, once per run:
the commands stay readable and are what an engineer types to check a fabric by hand);
reading the queues while traffic runs goes through one netlink socket per namespace
(:mod:`mltcp.lab.scenario.emulation.qdiscs`), opened at the first read and closed with the fabric.

Namespaces are named ``<tag>-<node>`` with the project prefix so that ``mltcp testbed
clean`` finds leftovers of killed runs, and each is claimed in the run's owner record
before it is created (:mod:`mltcp.lab.scenario.emulation.owners`), so that ``clean`` leaves the
namespaces of live runs alone.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mltcp.core import signals
from mltcp.core.errors import SpecError
from mltcp.host.namespaces import netns_path, nsenter_argv
from mltcp.lab.scenario.emulation import netns
from mltcp.lab.scenario.emulation.owners import RunOwner
from mltcp.lab.scenario.emulation.procgroup import ProcessGroup, pdeathsig_argv
from mltcp.lab.scenario.emulation.qdiscs import QdiscReader
from mltcp.lab.scenario.emulation.traffic import Endpoint
from mltcp.lab.scenario.graph import (
    LinkSpec,
    NetworkGraph,
    dumbbell_graph,
    graph_for,
    leaf_spine_graph,
)
from mltcp.lab.scenario.spec import ETHERNET_HEADER_BYTES, Topology

HTB_BURST_BYTES = 500_000
# One DRR round must be able to dequeue a whole 64 KB GSO packet; 100 KB is above that
# and below HTB's 200 KB cap (the r2q default of rate/10 exceeds the cap).
HTB_QUANTUM_BYTES = 100_000
HTB_CLASS_MINOR = 10
MAX_LINKS = 250


@dataclass(frozen=True)
class Port:
    """One end of a link: the device in `node`'s namespace and its address."""

    node: str
    dev: str
    addr: str
    peer_addr: str
    peer_node: str


@dataclass
class _Built:
    namespaces: list[str] = field(default_factory=list)
    readers: dict[str, QdiscReader] = field(default_factory=dict)   # by namespace
    closed: bool = False


class Fabric:
    """Build on construction, tear down on close() / context exit / SIGTERM / exit.

    ``owner``: the run's claim on what it creates (:mod:`mltcp.lab.scenario.emulation.owners`),
    when the caller (the netns backend) holds one for more than the fabric; by default
    the fabric holds its own for its lifetime.  Processes it starts (:meth:`run`) are
    in :attr:`group`, which :meth:`close` stops as a whole (the netns backend starts its
    job drivers in it too)."""

    def __init__(self, graph: NetworkGraph, prefix: str | None = None,
                 gso_max_segs: int | None = 1, rto_min_ms: float | None = None,
                 mtu_bytes: int = 1500, owner: RunOwner | None = None) -> None:
        netns.require_netns()
        if len(graph.links) > MAX_LINKS:
            raise SpecError("links", f"{len(graph.links)} links",
                            f"use at most {MAX_LINKS} links")
        self.owner = owner if owner is not None else RunOwner()
        self._own_owner = owner is None
        self.group = ProcessGroup()
        self.graph = graph
        self.hosts, self.switches = list(graph.hosts), list(graph.switches)
        self.links = list(graph.links)
        self.gso_max_segs = gso_max_segs
        self.rto_min_ms = rto_min_ms
        self.mtu_bytes = mtu_bytes
        self.tag = netns.run_tag(prefix)
        self.ports: dict[str, tuple[Port, Port]] = {}
        self._built = _Built()
        self._lock = threading.Lock()
        netns.track(self)
        try:
            self._build()
        except BaseException as exc:
            try:
                self.close()
            except netns.NetnsError as left:
                exc.add_note(str(left))
            raise

    # ---------------------------------------------------------------- naming
    def ns(self, node: str) -> str:
        return f"{self.tag}-{node}"

    @property
    def namespaces(self) -> list[str]:
        return [self.ns(n) for n in [*self.hosts, *self.switches]]

    def host_addr(self, host: str) -> str:
        """A host's address (on its first link)."""
        for a_port, b_port in self.ports.values():
            for port in (a_port, b_port):
                if port.node == host:
                    return port.addr
        raise SpecError("host", f"no host {host!r}", f"use one of {self.hosts}")

    def endpoint(self, host: str, port: int) -> Endpoint:
        """A traffic worker on ``host`` listening on ``port``."""
        return Endpoint(netns_path(self.ns(host)), self.host_addr(host), port)

    def shaped_ports(self) -> list[tuple[str, Port]]:
        """(link id, egress port) for both directions of every shaped link."""
        out = []
        for link in self.links:
            if link.rate_mbit:
                a_port, b_port = self.ports[link.id]
                out += [(link.id, a_port), (link.id, b_port)]
        return out

    def egress(self, link_id: str, node: str) -> Port:
        """The port through which ``node`` sends onto link ``link_id``."""
        a_port, b_port = self.ports[link_id]
        for port in (a_port, b_port):
            if port.node == node:
                return port
        raise SpecError("node", f"{node!r} is not an end of link {link_id!r}",
                        f"use {a_port.node} or {b_port.node}")

    # ---------------------------------------------------------------- build
    def _build(self) -> None:
        for node in [*self.hosts, *self.switches]:
            ns = self.ns(node)
            with signals.deferred():   # created and recorded, or neither
                self.owner.claim(namespaces=[ns])
                netns.create_netns(ns)
                self._built.namespaces.append(ns)
            settings = {"net.ipv6.conf.all.disable_ipv6": "1",
                        "net.ipv6.conf.default.disable_ipv6": "1"}
            if node in self.switches:
                settings |= {"net.ipv4.ip_forward": "1",
                             "net.ipv4.fib_multipath_hash_policy": "1"}
            else:
                settings |= {"net.ipv4.tcp_ecn": "1", "net.ipv4.tcp_ecn_fallback": "0",
                             "net.ipv4.tcp_no_metrics_save": "1"}
            netns.set_sysctls(ns, settings)
            netns.ip_batch(ns, ["link set lo up"])
        cmds: dict[str, list[str]] = {n: [] for n in [*self.hosts, *self.switches]}
        for k, link in enumerate(self.links):
            net = f"10.{200 + k // 250}.{k % 250}"
            a_dev, b_dev = f"l{k}-{link.b}"[:15], f"l{k}-{link.a}"[:15]
            netns.run_cmd(["ip", "link", "add", "name", a_dev, "netns", self.ns(link.a),
                           "type", "veth", "peer", "name", b_dev, "netns", self.ns(link.b)])
            a_port = Port(link.a, a_dev, f"{net}.1", f"{net}.2", link.b)
            b_port = Port(link.b, b_dev, f"{net}.2", f"{net}.1", link.a)
            self.ports[link.id] = (a_port, b_port)
            for port in (a_port, b_port):
                cmds[port.node] += [f"addr add {port.addr}/24 dev {port.dev}",
                                    f"link set {port.dev} mtu {self.mtu_bytes}",
                                    f"link set {port.dev} up"]
                if port.node in self.hosts and self.gso_max_segs:
                    cmds[port.node].append(f"link set {port.dev} gso_max_segs {self.gso_max_segs}")
        for node, lines in cmds.items():
            netns.ip_batch(self.ns(node), lines)
        for node in [*self.hosts, *self.switches]:
            netns.ip_batch(self.ns(node), self._routes(node))
        for link in self.links:
            if link.rate_mbit:
                for port in self.ports[link.id]:
                    netns.tc_batch(self.ns(port.node), self._htb(port.dev, link))

    def _port(self, link: LinkSpec, node: str) -> Port:
        """The end of ``link`` in ``node``."""
        a_port, b_port = self.ports[link.id]
        return a_port if a_port.node == node else b_port

    def _routes(self, node: str) -> list[str]:
        lines = []
        for host in self.hosts:
            if host == node:
                continue
            hops = [self._port(link, node) for _, link in self.graph.next_hops(node, host)]
            addr = self.host_addr(host)
            # Data centres lower the 200 ms minimum RTO; a per-route rto_min does that
            # for the hosts' routes (switches do not terminate TCP).
            rto = (f" rto_min {self.rto_min_ms:g}ms"
                   if self.rto_min_ms and node in self.hosts else "")
            if len(hops) == 1:
                lines.append(f"route add {addr}/32 via {hops[0].peer_addr} dev {hops[0].dev}"
                             f"{rto}")
            else:
                nh = " ".join(f"nexthop via {p.peer_addr} dev {p.dev}" for p in hops)
                lines.append(f"route add {addr}/32{rto} {nh}")
        return lines

    def _htb(self, dev: str, link: LinkSpec) -> list[str]:
        rate = f"{round(link.rate_mbit * 1e6)}bit"  # type: ignore[operator]
        minor = HTB_CLASS_MINOR
        return [
            f"qdisc replace dev {dev} root handle 1: htb default {minor}",
            f"class add dev {dev} parent 1: classid 1:{minor} htb rate {rate} ceil {rate} "
            f"burst {HTB_BURST_BYTES}b cburst {HTB_BURST_BYTES}b quantum {HTB_QUANTUM_BYTES}",
            f"qdisc add dev {dev} parent 1:{minor} handle {minor}: bfifo limit "
            f"{link.queue_packets * (self.mtu_bytes + ETHERNET_HEADER_BYTES)}",
        ]

    # ---------------------------------------------------------------- use
    def _reader(self, node: str) -> QdiscReader:
        """The node's netlink socket, opened at its first read and kept until close()."""
        ns = self.ns(node)
        with self._lock:
            if self._built.closed:
                raise netns.NetnsError("fabric is closed")
            if ns not in self._built.readers:
                self._built.readers[ns] = QdiscReader(ns)
            return self._built.readers[ns]

    def qdisc_stats(self, node: str) -> dict[str, netns.QdiscStats]:
        """Root-qdisc counters per device of one node: bytes, packets, drops, backlog."""
        return self._reader(node).read()

    def queue(self, port: Port) -> netns.QdiscStats:
        """The counters of one egress port's queue."""
        return self._reader(port.node).read(port.dev)[port.dev]

    def run(self, node: str, argv: Sequence[str], **popen_kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``node``'s namespace, in the fabric's process group and
        killed if this thread dies (so start it from the thread that closes the fabric);
        it is stopped on close()."""
        with self._lock:
            if self._built.closed:
                raise netns.NetnsError("fabric is closed")
            return self.group.popen(nsenter_argv(self.ns(node), pdeathsig_argv(argv)),
                                    **popen_kw)

    def check_output(self, node: str, argv: Sequence[str], timeout_s: float = 60) -> str:
        """Run ``argv`` to completion in ``node``'s namespace and return its stdout."""
        proc = subprocess.run(nsenter_argv(self.ns(node), argv), capture_output=True,
                              text=True, check=False, timeout=timeout_s)
        if proc.returncode != 0:
            raise netns.NetnsError(f"{' '.join(argv)} in {self.ns(node)} exited "
                                   f"{proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def close(self) -> None:
        """Stop our process group and delete our namespaces; safe to call repeatedly.
        A signal meanwhile waits until the end (:func:`mltcp.core.signals.deferred`)."""
        with self._lock:
            if self._built.closed:
                return
            self._built.closed = True
        with signals.deferred():
            self._teardown()

    def _teardown(self) -> None:
        self.group.stop()
        for reader in self._built.readers.values():
            reader.close()      # a socket keeps its namespace (and devices) alive
        left: list[str] = []
        for ns in reversed(self._built.namespaces):
            try:
                netns.delete_netns(ns)
            except netns.NetnsError as exc:
                left.append(str(exc))
        netns.untrack(self)
        if self._own_owner:     # what is left behind is nobody's: `testbed clean` may go
            self.owner.close()
        if left:  # said aloud: a namespace left behind breaks the next fabric of this name
            raise netns.NetnsError(f"{len(left)} namespace(s) of {self.tag} were left "
                                   f"behind ({'; '.join(left)}): remove them with "
                                   "`mltcp testbed clean`")

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            self.close()
        except netns.NetnsError as left:
            if exc is None:
                raise
            exc.add_note(str(left))  # the error that ended the body stays the one reported

    def __repr__(self) -> str:
        return (f"Fabric(tag={self.tag!r}, hosts={len(self.hosts)}, "
                f"switches={len(self.switches)}, links={len(self.links)})")


def for_topology(topology: Topology, prefix: str | None = None,
                 graph: NetworkGraph | None = None, owner: RunOwner | None = None) -> Fabric:
    """A scenario topology's fabric (``graph``: the plan's, when the caller has it;
    ``owner``: the run's claim, when the caller holds one)."""
    return Fabric(graph or graph_for(topology), prefix=prefix,
                  gso_max_segs=topology.gso_max_segs, rto_min_ms=topology.rto_min_ms,
                  mtu_bytes=topology.mtu_bytes, owner=owner)


def dumbbell(hosts: int, bottleneck_mbit: float, queue_packets: int,
             host_link_mbit: float | None = None, **kw: Any) -> Fabric:
    """h1..h(n/2) on switch swL, the rest on swR, one shaped link swL-swR ("bottleneck")."""
    return Fabric(dumbbell_graph(hosts, bottleneck_mbit, queue_packets, host_link_mbit), **kw)


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int, host_link_mbit: float,
               oversubscription: float, queue_packets: int, **kw: Any) -> Fabric:
    """Hosts on leaves, every leaf linked to every spine (see graph.leaf_spine_graph)."""
    return Fabric(leaf_spine_graph(leaves, spines, hosts_per_leaf, host_link_mbit,
                                   oversubscription, queue_packets), **kw)
