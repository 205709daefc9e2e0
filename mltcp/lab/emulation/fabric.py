"""A network of namespaces: hosts, switches and shaped links, routed by shortest paths.

The testbed needs more than a one-router dumbbell: ring collectives send in both
directions across the shared link, and leaf-spine fabrics have several shared
links with equal-cost paths.  A :class:`Fabric` is built from nodes and links;
every link is a veth pair with its own /24, every shaped link has an HTB class
with a byte-limited FIFO on *both* egress sides, and routes to every host's
address are installed along all shortest paths (several next hops = ECMP,
hashed on L4 so that connections spread).

Host devices send single segments by default (``gso_max_segs``): the drop-tail
queues then drop packets rather than whole 64 KB GSO bursts, which otherwise
land on whichever flow grows fastest and hide the effect MLTCP relies on
(measured in issue 2: docs/known-issues.md and tests/test_kernel_behaviour.py).

Namespaces are named ``<tag>-<node>`` with the project prefix so that
``mltcp testbed clean`` (netns.cleanup_leftovers) finds leftovers of killed runs.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field

from mltcp.core.errors import SpecError
from mltcp.lab.emulation.netns import (
    _HTB_CLASS_MINOR,
    _HTB_QUANTUM_BYTES,
    _LIVE,
    _LIVE_LOCK,
    _cmd,
    _delete_netns,
    _install_exit_hooks,
    _ip_batch,
    _run_tag,
    _sysctl,
    _tc_batch,
    list_netns,
    nsenter_argv,
    require_netns,
)
from mltcp.lab.graph import LinkSpec, NetworkGraph, dumbbell_graph, leaf_spine_graph
from mltcp.lab.scenario import ETHERNET_HEADER_BYTES

HTB_BURST_BYTES = 500_000


@dataclass
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
    closed: bool = False


class Fabric:
    """Build on construction, tear down on close() / context exit / SIGTERM / exit."""

    def __init__(self, hosts: list[str], switches: list[str], links: list[LinkSpec],
                 prefix: str | None = None, gso_max_segs: int | None = 1,
                 rto_min_ms: float | None = None, mtu_bytes: int = 1500) -> None:
        require_netns()
        self.graph = NetworkGraph(list(hosts), list(switches), list(links))
        if len(links) > 250:
            raise SpecError("links", f"{len(links)} links", "use at most 250 links")
        self.hosts, self.switches, self.links = list(hosts), list(switches), list(links)
        self.gso_max_segs = gso_max_segs
        self.rto_min_ms = rto_min_ms
        self.mtu_bytes = mtu_bytes
        self.tag = _run_tag(prefix)
        self.ports: dict[str, tuple[Port, Port]] = {}
        self._built = _Built()
        self._lock = threading.Lock()
        _install_exit_hooks()
        with _LIVE_LOCK:
            _LIVE.add(self)  # type: ignore[arg-type]  # closed like a Dumbbell
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- naming
    def ns(self, node: str) -> str:
        return f"{self.tag}-{node}"

    def host_addr(self, host: str) -> str:
        """A host's address (on its first link)."""
        for a_port, b_port in self.ports.values():
            for port in (a_port, b_port):
                if port.node == host:
                    return port.addr
        raise SpecError("host", f"no host {host!r}", f"use one of {self.hosts}")

    def shaped_ports(self) -> list[tuple[str, Port]]:
        """(link id, egress port) for both directions of every shaped link."""
        out = []
        for link in self.links:
            if link.rate_mbit:
                a_port, b_port = self.ports[link.id]
                out += [(link.id, a_port), (link.id, b_port)]
        return out

    # ---------------------------------------------------------------- build
    def _build(self) -> None:
        for node in [*self.hosts, *self.switches]:
            ns = self.ns(node)
            if ns in list_netns():
                raise SpecError("prefix", f"namespace {ns} already exists", "pick another prefix")
            _cmd(["ip", "netns", "add", ns])
            self._built.namespaces.append(ns)
            settings = {"net.ipv6.conf.all.disable_ipv6": "1",
                        "net.ipv6.conf.default.disable_ipv6": "1"}
            if node in self.switches:
                settings |= {"net.ipv4.ip_forward": "1",
                             "net.ipv4.fib_multipath_hash_policy": "1"}
            else:
                settings |= {"net.ipv4.tcp_ecn": "1", "net.ipv4.tcp_ecn_fallback": "0",
                             "net.ipv4.tcp_no_metrics_save": "1"}
            _sysctl(ns, settings)
            _ip_batch(ns, ["link set lo up"])
        cmds: dict[str, list[str]] = {n: [] for n in [*self.hosts, *self.switches]}
        for k, link in enumerate(self.links):
            net = f"10.{200 + k // 250}.{k % 250}"
            a_dev, b_dev = f"l{k}-{link.b}"[:15], f"l{k}-{link.a}"[:15]
            _cmd(["ip", "link", "add", "name", a_dev, "netns", self.ns(link.a), "type", "veth",
                  "peer", "name", b_dev, "netns", self.ns(link.b)])
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
            _ip_batch(self.ns(node), lines)
        for node in [*self.hosts, *self.switches]:
            _ip_batch(self.ns(node), self._routes(node))
        for link in self.links:
            if link.rate_mbit:
                for port in self.ports[link.id]:
                    _tc_batch(self.ns(port.node), self._htb(port.dev, link))

    def _port(self, link: LinkSpec, node: str) -> Port:
        """The end of ``link`` in ``node``."""
        a_port, b_port = self.ports[link.id]
        return a_port if a_port.node == node else b_port

    def distances(self, target: str) -> dict[str, int]:
        """Hops from every node to `target` (hosts do not forward)."""
        return self.graph.distances(target)

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
        minor = _HTB_CLASS_MINOR
        return [
            f"qdisc replace dev {dev} root handle 1: htb default {minor}",
            f"class add dev {dev} parent 1: classid 1:{minor} htb rate {rate} ceil {rate} "
            f"burst {HTB_BURST_BYTES}b cburst {HTB_BURST_BYTES}b quantum {_HTB_QUANTUM_BYTES}",
            f"qdisc add dev {dev} parent 1:{minor} handle {minor}: bfifo limit "
            f"{link.queue_packets * (self.mtu_bytes + ETHERNET_HEADER_BYTES)}",
        ]

    # ---------------------------------------------------------------- use
    def qdisc_stats(self, node: str) -> dict[str, dict]:
        """Root-qdisc counters per device of one node: bytes, packets, drops, backlog."""
        out = _cmd(nsenter_argv(self.ns(node), ["tc", "-s", "-j", "qdisc", "show"]))
        stats = {}
        for q in json.loads(out or "[]"):
            if q.get("root"):
                stats[q["dev"]] = {"bytes": q.get("bytes", 0), "packets": q.get("packets", 0),
                                   "drops": q.get("drops", 0), "backlog": q.get("backlog", 0)}
        return stats

    def close(self) -> None:
        with self._lock:
            if self._built.closed:
                return
            self._built.closed = True
        for ns in reversed(self._built.namespaces):
            with contextlib.suppress(Exception):
                _delete_netns(ns)
        with _LIVE_LOCK:
            _LIVE.discard(self)  # type: ignore[arg-type]

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def from_graph(graph: NetworkGraph, **kw: object) -> Fabric:
    """Build ``graph`` out of namespaces (see Fabric for the keyword options)."""
    return Fabric(graph.hosts, graph.switches, graph.links, **kw)  # type: ignore[arg-type]


def dumbbell(hosts: int, bottleneck_mbit: float, queue_packets: int,
             host_link_mbit: float | None = None, **kw: object) -> Fabric:
    """h1..h(n/2) on switch L, the rest on switch R, one shaped link L-R ("bottleneck")."""
    return from_graph(dumbbell_graph(hosts, bottleneck_mbit, queue_packets, host_link_mbit),
                      **kw)


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int, host_link_mbit: float,
               oversubscription: float, queue_packets: int, **kw: object) -> Fabric:
    """Hosts on leaves, every leaf linked to every spine (see graph.leaf_spine_graph)."""
    return from_graph(leaf_spine_graph(leaves, spines, hosts_per_leaf, host_link_mbit,
                                       oversubscription, queue_packets), **kw)
