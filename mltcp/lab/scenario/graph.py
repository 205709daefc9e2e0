"""The network of a scenario as a plain graph: nodes, links, shortest paths, link ids.

Every backend must see the same network: the netns testbed builds it out of
namespaces (:mod:`mltcp.lab.scenario.emulation.fabric`), the fluid model computes rates on it
(:mod:`mltcp.lab.scenario.batched.fluid`), and both name the links in their traces the same way
(``"bottleneck:swL->swR"``: the link id and the direction), so that overlap
and utilisation mean the same thing in both reports.  Nothing here touches the
kernel.

Routing follows the testbed's: hosts do not forward, every shortest path
between two hosts is a candidate, and several shortest paths are equal-cost
multipath (ECMP).
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mltcp.core.errors import SpecError
from mltcp.lab.scenario.spec import Topology, named


@dataclass(frozen=True)
class LinkSpec:
    """An undirected link; shaped (both directions) when rate_mbit is set."""

    id: str
    a: str
    b: str
    rate_mbit: float | None = None
    queue_packets: int = 100


def directed_id(link: LinkSpec, src: str, dst: str) -> str:
    """How traces name one direction of a link: ``"<id>:<from>-><to>"``."""
    return f"{link.id}:{src}->{dst}"


@dataclass
class NetworkGraph:
    """Hosts and switches joined by links (validated: known ends, unique names)."""

    hosts: list[str]
    switches: list[str]
    links: list[LinkSpec]
    _adjacent: dict[str, list[tuple[str, LinkSpec]]] = field(init=False, repr=False)
    # Hops to each target, computed once: a cluster-size scenario asks for the paths of
    # thousands of host pairs among a few hundred hosts (the graph is not changed after
    # it is made).
    _distances: dict[str, dict[str, int]] = field(init=False, repr=False)
    _switch_set: frozenset[str] = field(init=False, repr=False)
    _link_position: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        nodes = [*self.hosts, *self.switches]
        if len(set(nodes)) != len(nodes):
            raise SpecError("nodes", "duplicate node names", "give every host/switch its own name")
        ids = [link.id for link in self.links]
        if len(set(ids)) != len(ids):
            raise SpecError("links", "duplicate link ids", "give every link its own id")
        self._adjacent = {n: [] for n in nodes}
        self._distances = {}
        self._switch_set = frozenset(self.switches)
        self._link_position = {link.id: i for i, link in enumerate(self.links)}
        for link in self.links:
            for end in (link.a, link.b):
                if end not in self._adjacent:
                    raise SpecError(f"links.{link.id}", f"unknown node {end!r}",
                                    "connect only declared hosts and switches")
            self._adjacent[link.a].append((link.b, link))
            self._adjacent[link.b].append((link.a, link))

    def link(self, link_id: str) -> LinkSpec:
        """The link called ``link_id``."""
        return named(self.links, link_id, "link", "link", attr="id")

    def neighbours(self, node: str) -> list[tuple[str, LinkSpec]]:
        """(peer, link) for every link of ``node``, in link order."""
        return self._adjacent[node]

    def distances(self, target: str) -> dict[str, int]:
        """Hops from every node that can reach ``target`` (hosts do not forward); the
        graph's own dict, not to be changed."""
        if target in self._distances:
            return self._distances[target]
        dist = {target: 0}
        queue = deque([target])
        switches = self._switch_set
        while queue:
            cur = queue.popleft()
            for nxt, _ in self._adjacent[cur]:
                if nxt not in dist and (cur == target or cur in switches):
                    dist[nxt] = dist[cur] + 1
                    queue.append(nxt)
        self._distances[target] = dist
        return dist

    def next_hops(self, node: str, host: str,
                  dist: dict[str, int] | None = None) -> list[tuple[str, LinkSpec]]:
        """The (peer, link) steps from ``node`` along a shortest path towards ``host``."""
        dist = self.distances(host) if dist is None else dist
        if node not in dist:
            raise SpecError("links", f"{node} cannot reach {host}", "connect the fabric")
        return [(nxt, link) for nxt, link in self._adjacent[node]
                if nxt in dist and dist[nxt] == dist[node] - 1
                and (nxt == host or nxt in self._switch_set)]

    def path(self, src: str, dst: str,
             choose: Callable[[Sequence[tuple[str, LinkSpec]]], int] | None = None
             ) -> list[tuple[str, str, LinkSpec]]:
        """One shortest path from ``src`` to ``dst`` as (from, to, link) hops.

        Where there are several next hops (ECMP), ``choose`` picks the index, like a
        switch's flow hash does; by default the first one.
        """
        dist = self.distances(dst)
        hops, node = [], src
        while node != dst:
            options = self.next_hops(node, dst, dist)
            nxt, link = options[choose(options) if choose and len(options) > 1 else 0]
            hops.append((node, nxt, link))
            node = nxt
        return hops

    def directed_link_ids(self, src: str, dst: str, shaped_only: bool = True) -> list[str]:
        """Directed ids of the links on *any* shortest path from src to dst (all ECMP
        alternatives), in link order: the links a flow between them may cross."""
        to_dst, from_src = self.distances(dst), self.distances(src)
        total = to_dst[src]
        found = []          # (link's position, direction, id): sorted into link order
        for a, hops in from_src.items():
            # a step a -> b lies on a shortest path; only src and switches forward
            if (a != src and a not in self._switch_set) or hops + to_dst.get(a, -1) != total:
                continue
            for b, link in self._adjacent[a]:
                if (b in to_dst and hops + 1 + to_dst[b] == total
                        and (link.rate_mbit or not shaped_only)):
                    found.append((self._link_position[link.id], a != link.a,
                                  directed_id(link, a, b)))
        return [lid for *_, lid in sorted(found)]


def dumbbell_graph(hosts: int, bottleneck_mbit: float, queue_packets: int,
                   host_link_mbit: float | None = None) -> NetworkGraph:
    """h1..h(n/2) on switch L, the rest on switch R, one shaped link L-R ("bottleneck")."""
    names = [f"h{i}" for i in range(1, hosts + 1)]
    half = (hosts + 1) // 2
    links = [LinkSpec(f"{h}-access", h, "swL" if i < half else "swR", host_link_mbit,
                      queue_packets) for i, h in enumerate(names)]
    links.append(LinkSpec("bottleneck", "swL", "swR", bottleneck_mbit, queue_packets))
    return NetworkGraph(names, ["swL", "swR"], links)


def leaf_spine_graph(leaves: int, spines: int, hosts_per_leaf: int, host_link_mbit: float,
                     oversubscription: float, queue_packets: int) -> NetworkGraph:
    """Hosts on leaves, every leaf linked to every spine; uplinks sized for the
    oversubscription: hosts_per_leaf * host_link / oversubscription over `spines` links."""
    hosts, links = [], []
    uplink = hosts_per_leaf * host_link_mbit / oversubscription / spines
    n = 0
    for leaf in range(1, leaves + 1):
        for _ in range(hosts_per_leaf):
            n += 1
            hosts.append(f"h{n}")
            links.append(LinkSpec(f"h{n}-access", f"h{n}", f"leaf{leaf}", host_link_mbit,
                                  queue_packets))
        for spine in range(1, spines + 1):
            links.append(LinkSpec(f"leaf{leaf}-spine{spine}", f"leaf{leaf}", f"spine{spine}",
                                  uplink, queue_packets))
    switches = [f"leaf{i}" for i in range(1, leaves + 1)] + [f"spine{i}"
                                                             for i in range(1, spines + 1)]
    return NetworkGraph(hosts, switches, links)


def graph_for(topology: Topology) -> NetworkGraph:
    """The scenario's network.  A dumbbell's host links stay unshaped (as on the
    testbed, where they are veths far faster than the bottleneck)."""
    if topology.kind == "dumbbell":
        return dumbbell_graph(topology.hosts, topology.bottleneck_mbit, topology.queue_packets)
    return leaf_spine_graph(topology.leaves, topology.spines, topology.hosts_per_leaf,
                            topology.host_link_mbit, topology.oversubscription,
                            topology.queue_packets)


def shaped_link_ids(graph: NetworkGraph) -> dict[str, tuple[str, ...]]:
    """Every name a scenario may give a shaped link, with the directed ids it names: the
    link's id (both directions) and each direction's id, in graph order."""
    out: dict[str, tuple[str, ...]] = {}
    for link in graph.links:
        if link.rate_mbit:
            ways = (directed_id(link, link.a, link.b), directed_id(link, link.b, link.a))
            out[link.id] = ways
            out.update({way: (way,) for way in ways})
    return out


def recorded_link_ids(graph: NetworkGraph, choice: str | Sequence[str],
                      job_links: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The directed links a run's trace samples, in graph order, for a scenario's
    ``record_links`` (:class:`mltcp.lab.scenario.spec.Scenario`) and the links each of
    its jobs' rings may cross (:func:`ring_link_ids`; every job, run alone or not, so a
    dedicated run records what the shared runs do).  "fabric": the crossed links between
    two switches; "crossed": every crossed link; "all"; "none"; or ids (see
    :func:`shaped_link_ids`)."""
    names = shaped_link_ids(graph)
    ordered = [way for link in graph.links if link.rate_mbit for way in names[link.id]]
    if choice == "none":
        return ()
    if choice == "all":
        return tuple(ordered)
    if isinstance(choice, str):
        crossed = {lid for links in job_links for lid in links}
        switches = set(graph.switches)
        keep = {lid for lid in crossed if choice == "crossed"
                or set(lid.split(":", 1)[1].split("->")) <= switches}
    else:
        keep = {way for name in choice for way in names[name]}
    return tuple(way for way in ordered if way in keep)


def ring_link_ids(graph: NetworkGraph, hosts: Sequence[str]) -> list[str]:
    """Directed ids of every shaped link a ring over ``hosts`` (in ring order) may
    cross: what a job's trace lists as its links, on every backend."""
    return sorted({lid for i, h in enumerate(hosts)
                   for lid in graph.directed_link_ids(h, hosts[(i + 1) % len(hosts)])})


def ring_flow_path(graph: NetworkGraph, hosts: Sequence[str], worker: int, seed: int,
                   job: str) -> list[tuple[str, str, LinkSpec]]:
    """The path of worker ``worker``'s ring flow (to its successor) in run ``seed``.

    Where ECMP offers several next hops, the choice is drawn from a generator seeded
    by (seed, job, worker): a switch's flow hash, reproducible, and the same in every
    backend that routes flows itself (the fluid model and ns-3), so their runs of one
    seed put the same flows on the same spines.  (The netns testbed leaves the choice
    to the kernel's multipath hash.)"""
    digest = hashlib.sha256(f"{seed}/{job}/{worker}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return graph.path(hosts[worker], hosts[(worker + 1) % len(hosts)],
                      choose=lambda options: rng.randrange(len(options)))
